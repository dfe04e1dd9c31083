"""The workspace config: which limits exist, with their declared capacity and max hold.

A user declares limits in one Python module (``studio.workspace`` by default)::

    workspace = define_workspace(limits={
        "voice-calls": {"capacity": 20, "max_hold": "45m"},
    })
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings

from limits.durations import DurationError, parse_duration

NAME_RE = re.compile(r"[a-z0-9._-]{1,64}")
MIN_CAPACITY = 1  # engine.sql: limits_min_capacity
MAX_CAPACITY = 100_000  # engine.sql: limits_max_capacity
LIMIT_FIELDS = frozenset({"capacity", "max_hold", "per_key", "share", "on_full", "max_waiting", "max_waiting_per_key"})
LIMIT_FIELDS_SHOWN = "capacity, max_hold, per_key, share, on_full, max_waiting, max_waiting_per_key"
SHARES = ("fifo", "fair")  # SPEC 13.1: first come, first served (the default), or fair shares between keys
# SPEC 14.1: what an acquisition that cannot be granted at once does: wait in the queue (the
# default), skip (answered at once, queued nowhere) or replace (take the place of its key's runs
# waiting, 14.3). cancel_running (SPEC 14.4): a workflow's own bound's only (BOUND_ON_FULL).
ON_FULL = ("wait", "skip", "replace")
CANCEL_RUNNING = "cancel_running"
BOUND_ON_FULL = (*ON_FULL, CANCEL_RUNNING)
BOUND_ONLY = "it is a workflow's own bound's only (SPEC 14.4), not a named limit's or an acquisition's"
# SPEC 14.7: a group is answered by the strictest on_full of its limits, skip before replace
# before cancel_running before wait (engine.sql: limits_stricter_on_full).
ON_FULL_STRICTNESS = ("skip", "replace", CANCEL_RUNNING, "wait")
MAX_WAITING = 1_000_000  # SPEC 14.1: the largest cap on a queue
MIN_WEIGHT, MAX_WEIGHT = 1, 100
KEY_MAX_LENGTH = 128
BOUND_PREFIX = "workflow."  # a workflow's own bound is the limit 'workflow.<workflow name>' (SPEC 11.5)
BOX_NAME = "box"  # the box's own run concurrency is the limit 'box', kind 'box' (SPEC 12.2)
RUN_CONCURRENCY_FIELDS = frozenset({"base", "burst"})
MIN_BURST, MAX_BURST, DEFAULT_BURST = 1.0, 10.0, 2.0
NAME_HELP = "1 to 64 characters from lowercase letters, digits, '.', '_' and '-'"
CAPACITY_HELP = f"a whole number from {MIN_CAPACITY} to {MAX_CAPACITY}"


class ConfigError(Exception):
    """The workspace config is invalid; the message names the limit and the field.

    `errors` holds one ConfigError per problem (a bad name, a bad field of a limit), so a check
    reports them all at once; a single problem reads as its own message."""

    def __init__(self, message: str, errors: Sequence[ConfigError] = ()) -> None:
        super().__init__(message)
        self.errors: list[ConfigError] = list(errors) or [self]

    @classmethod
    def collected(cls, problems: Sequence[str]) -> ConfigError:
        if len(problems) == 1:
            return cls(problems[0])
        text = f"{len(problems)} problems in the workspace config: " + "; ".join(problems)
        return cls(text, [cls(problem) for problem in problems])


@dataclass(frozen=True, slots=True)
class LimitSpec:
    name: str
    capacity: int
    max_hold_ms: int
    per_key: int | None = None
    share: str = "fifo"
    on_full: str = "wait"
    max_waiting: int | None = None
    max_waiting_per_key: int | None = None


@dataclass(frozen=True, slots=True)
class RunConcurrency:
    """The box's run concurrency (SPEC 12.1): at most `ceiling` runs execute at once, and no one
    workflow more than `base`."""

    base: int
    burst: float = DEFAULT_BURST

    @property
    def ceiling(self) -> int:
        return box_ceiling(self.base, self.burst)


@dataclass(frozen=True, slots=True)
class Workspace:
    limits: Mapping[str, LimitSpec]
    run_concurrency: RunConcurrency | None = None


def box_ceiling(base: int, burst: float) -> int:
    """floor(base x burst): the runs the box executes at once (SPEC 12.2). One home in Python
    (engine.sql: limits_box_ceiling); the box's writers keep its capacity so
    (limits.engine.operator_actions)."""
    return int(base * burst + 1e-9)


def check_base(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_CAPACITY <= value <= MAX_CAPACITY:
        raise ValueError(f"base must be {CAPACITY_HELP}, not {value!r}")
    return value


def check_burst(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_BURST <= value <= MAX_BURST:
        raise ValueError(f"burst must be from {MIN_BURST} to {MAX_BURST}, not {value!r}")
    return float(value)


def burst_text(burst: float) -> str:
    """A burst as the box's audit rows write it: the shortest text that reads back as the same
    float, without a trailing ".0" (2.0 -> "2", 1.75 -> "1.75", 1.011205 -> "1.011205"). That is
    PostgreSQL's own float8 text (limits_box_text writes the same), where a rounding to a number
    of digits would differ between the two on some values."""
    return repr(float(burst)).removesuffix(".0")


def check_ceiling(base: int, burst: float) -> int:
    ceiling = box_ceiling(base, burst)
    if ceiling > MAX_CAPACITY:
        raise ValueError(ceiling_problem(ceiling))
    return ceiling


def ceiling_problem(ceiling: int) -> str:
    """The refusal of a box whose ceiling passes MAX_CAPACITY (check_ceiling; on PostgreSQL
    limits_operate finds it under the lock and answers that ceiling)."""
    return f"base x burst must be at most {MAX_CAPACITY}, not {ceiling}"


def run_concurrency_problems(value: object) -> list[str]:
    """Every problem of run_concurrency={"base": n, "burst": f}, each naming the field."""
    if not isinstance(value, Mapping):
        return ["run_concurrency must be a mapping like {'base': 10, 'burst': 2.0}"]
    problems = []
    unknown = sorted(set(value) - RUN_CONCURRENCY_FIELDS, key=str)
    if unknown:
        problems.append(f"run_concurrency: unknown field {unknown[0]!r} (allowed: base, burst)")
    checked: list[int | float] = []
    if "base" not in value:
        problems.append("run_concurrency: base is required")
    for field, check, default in (("base", check_base, None), ("burst", check_burst, DEFAULT_BURST)):
        if field in value or default is not None:
            try:
                checked.append(check(value.get(field, default)))
            except ValueError as error:
                problems.append(f"run_concurrency: {error}")
    if not problems:
        try:
            check_ceiling(int(checked[0]), float(checked[1]))
        except ValueError as error:
            problems.append(f"run_concurrency: {error}")
    return problems


def check_name(name: object) -> str:
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ValueError(f"limit name {name!r} is invalid: use {NAME_HELP}")
    return name


def check_capacity(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be {CAPACITY_HELP}, not {value!r}")
    if not MIN_CAPACITY <= value <= MAX_CAPACITY:
        raise ValueError(f"must be {CAPACITY_HELP}, not {value}")
    return value


def check_per_key(value: object, capacity: int) -> int:
    """A key pool's size (SPEC 9.1): a whole number from 1 to the limit's capacity."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be a whole number from {MIN_CAPACITY} to capacity ({capacity}), not {value!r}")
    if value < MIN_CAPACITY:
        raise ValueError(f"must be at least {MIN_CAPACITY}, not {value}")
    if value > capacity:
        raise ValueError(f"must be at most capacity ({capacity})")
    return value


def check_share(value: object) -> str:
    if value not in SHARES:
        raise ValueError(f"must be 'fifo' or 'fair', not {value!r}")
    assert isinstance(value, str)
    return value


def check_on_full(value: object, bound: bool = False) -> str:
    """SPEC 14.1: 'wait', 'skip' or 'replace'; with `bound` (a workflow's own bound) also
    'cancel_running' (14.4), which anywhere else is refused as BOUND_ONLY says."""
    if value == CANCEL_RUNNING and not bound:
        raise ValueError(f"must be 'wait', 'skip' or 'replace', not {value!r}: {BOUND_ONLY}")
    if value not in (BOUND_ON_FULL if bound else ON_FULL):
        allowed = "'wait', 'skip', 'replace' or 'cancel_running'" if bound else "'wait', 'skip' or 'replace'"
        raise ValueError(f"must be {allowed}, not {value!r}")
    assert isinstance(value, str)
    return value


def strictest_on_full(values: Iterable[str]) -> str:
    """SPEC 14.7: the on_full that answers a group, skip before replace before wait."""
    return min(values, key=ON_FULL_STRICTNESS.index, default="wait")


def check_max_waiting(value: object) -> int:
    """SPEC 14.1: a cap on a queue, a whole number from 1 to 1,000,000."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WAITING:
        raise ValueError(f"must be a whole number from 1 to {MAX_WAITING:,}, not {value!r}")
    return value


def check_weight(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_WEIGHT <= value <= MAX_WEIGHT:
        raise ValueError(f"must be a whole number from {MIN_WEIGHT} to {MAX_WEIGHT}, not {value!r}")
    return value


def check_minimum(value: object, capacity: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= capacity:
        raise ValueError(f"must be a whole number from 0 to capacity ({capacity}), not {value!r}")
    return value


def check_key(key: object) -> str:
    """A concurrency key (SPEC 9.2): 1 to 128 characters, none of them a control character.
    Case-sensitive; shown beside the slot like a label."""
    if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX_LENGTH:
        raise ValueError(f"key must be a string of 1 to {KEY_MAX_LENGTH} characters")
    if any(ord(ch) < 32 or 127 <= ord(ch) < 160 or 0xD800 <= ord(ch) <= 0xDFFF for ch in key):
        raise ValueError("key must not contain control characters")
    return key


def define_workspace(
    *, limits: Mapping[str, Mapping[str, object]], run_concurrency: Mapping[str, object] | None = None
) -> Workspace:
    """Validate a workspace's limits and the box's run concurrency (SPEC 12.1); raise ConfigError
    naming every bad limit and field (its `errors`: one per problem, in the order of the config)."""
    if not isinstance(limits, Mapping):
        raise ConfigError("limits must be a mapping of limit name to {'capacity': ..., 'max_hold': ...}")
    specs: dict[str, LimitSpec] = {}
    problems: list[str] = []
    for name, fields in limits.items():
        found = _problems_of(name, fields)
        if found:
            problems.extend(found)
            continue
        assert isinstance(fields, Mapping)
        per_key = fields.get("per_key")
        specs[name] = LimitSpec(
            name=name,
            capacity=check_capacity(fields["capacity"]),
            max_hold_ms=parse_duration(fields["max_hold"]),
            per_key=None if per_key is None else check_per_key(per_key, check_capacity(fields["capacity"])),
            share=check_share(fields.get("share", "fifo")),
            on_full=check_on_full(fields.get("on_full", "wait")),
            max_waiting=_optional(check_max_waiting, fields.get("max_waiting")),
            max_waiting_per_key=_optional(check_max_waiting, fields.get("max_waiting_per_key")),
        )
    box = None
    if run_concurrency is not None:
        found = run_concurrency_problems(run_concurrency)
        problems.extend(found)
        if BOX_NAME in limits:
            problems.append(f"limit {BOX_NAME!r}: the name belongs to the box's run concurrency (run_concurrency)")
        if not found:
            assert isinstance(run_concurrency, Mapping)
            base = check_base(run_concurrency["base"])
            box = RunConcurrency(base, check_burst(run_concurrency.get("burst", DEFAULT_BURST)))
    if problems:
        raise ConfigError.collected(problems)
    return Workspace(limits=specs, run_concurrency=box)


def _problems_of(name: object, fields: object) -> list[str]:
    """Every problem of one declared limit, each naming the limit and the field."""
    try:
        check_name(name)
    except ValueError as error:
        return [str(error)]
    assert isinstance(name, str)
    if name.startswith(BOUND_PREFIX):
        return [f"limit {name!r}: names starting {BOUND_PREFIX!r} belong to workflows' own bounds"]
    if not isinstance(fields, Mapping):
        return [f"limit {name!r}: must be a mapping with capacity and max_hold"]
    problems: list[str] = []
    unknown = sorted(set(fields) - LIMIT_FIELDS, key=str)
    if unknown:
        problems.append(f"limit {name!r}: unknown field {unknown[0]!r} (allowed: {LIMIT_FIELDS_SHOWN})")
    capacity: int | None = None
    if "capacity" not in fields:
        problems.append(f"limit {name!r}: capacity is required")
    else:
        try:
            capacity = check_capacity(fields["capacity"])
        except ValueError as error:
            problems.append(f"limit {name!r}: capacity {error}")
    if "max_hold" not in fields:
        problems.append(f"limit {name!r}: max_hold is required")
    else:
        try:
            parse_duration(fields["max_hold"])
        except DurationError as error:
            problems.append(f"limit {name!r}: max_hold {error}")
    if fields.get("per_key") is not None and capacity is not None:
        try:
            check_per_key(fields["per_key"], capacity)
        except ValueError as error:
            problems.append(f"limit {name!r}: per_key {error}")
    if "share" in fields:
        try:
            check_share(fields["share"])
        except ValueError as error:
            problems.append(f"limit {name!r}: share {error}")
    if "on_full" in fields:
        try:
            check_on_full(fields["on_full"])
        except ValueError as error:
            problems.append(f"limit {name!r}: on_full {error}")
    for field in ("max_waiting", "max_waiting_per_key"):
        if fields.get(field) is not None:
            try:
                check_max_waiting(fields[field])
            except ValueError as error:
                problems.append(f"limit {name!r}: {field} {error}")
    return problems


def _optional[T](check: Callable[[object], T], value: object) -> T | None:
    return None if value is None else check(value)


def load_workspace(module_path: str | None = None) -> Workspace:
    """Import the workspace module (settings.STACKBONE_WORKSPACE) and return its `workspace`."""
    module_path = module_path or settings.STACKBONE_WORKSPACE
    try:
        module = importlib.import_module(module_path)
    except ConfigError:
        raise
    except Exception as error:  # a user's module can fail in any way; report it as config
        raise ConfigError(f"workspace module {module_path!r} cannot be loaded: {error}") from None
    workspace = getattr(module, "workspace", None)
    if not isinstance(workspace, Workspace):
        raise ConfigError(
            f"workspace module {module_path!r} must define `workspace = define_workspace(limits={{...}})`"
        )
    return workspace
