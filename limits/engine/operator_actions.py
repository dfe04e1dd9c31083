"""Operator actions and deploys: override or reset a limit's capacity and max hold (SPEC 5.2-5.5),
and bring the declared values in line with the workspace config (1.4, 1.5). Each is one durable
transaction that writes its audit row beside the change.

Here: what needs no lock is checked (a value's form, a key, the box's own fields), then the
database's engine does the change (limits.engine.engines: PostgresEngine in one call of
limits_operate or a deploy function; PythonEngine in limits.engine.python_operators). What is
checked against the capacity in force is checked under the lock, by each engine, and worded in
limits.engine.refusals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from limits.config import (
    BOUND_PREFIX,
    BOX_NAME,
    Workspace,
    check_base,
    check_burst,
    check_capacity,
    check_max_waiting,
    check_on_full,
    check_share,
    check_weight,
)
from limits.engine.engines import engine
from limits.engine.errors import BAD_CAPACITY, BAD_MAX_HOLD, LimitsError, check_key, duration_ms
from limits.engine.refusals import BOUND_NAME_TAKEN, BOX_LIMIT_TAKEN, BOX_NAME_TAKEN, NO_BOX, NO_MAX_HOLD
from limits.engine.results import BoundValues, SyncReport
from limits.engine.rules import DEPLOY_ACTOR
from limits.models import Limit

__all__ = [  # the refusals' words, also found here (their home: limits.engine.refusals)
    "BOUND_NAME_TAKEN",
    "BOX_LIMIT_TAKEN",
    "BOX_NAME_TAKEN",
    "NO_BOX",
    "NO_MAX_HOLD",
    "ensure_workflow_bound",
    "pause_limit",
    "resume_limit",
    "set_box",
    "set_capacity",
    "set_max_hold",
    "set_min",
    "set_per_key",
    "set_share",
    "set_weight",
    "sync_workflow_bounds",
    "sync_workspace",
]


def set_capacity(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Override a limit's capacity (1..100000), or reset it to the declared value with None.
    Raising it grants waiting runs at once; lowering it takes no slot back. `value` is checked
    here (it may come straight from a request)."""
    _not_the_box(name, "capacity")
    capacity = None
    if value is not None:
        try:
            capacity = check_capacity(value)
        except ValueError as error:
            raise LimitsError(BAD_CAPACITY.format(error=error), field="capacity") from None
    return engine().set_capacity(name, capacity, actor)


def pause_limit(name: str, *, actor: str | None = None) -> Limit:
    """Pause a limit (SPEC 5.6): from now on it grants nothing, neither a new acquisition nor its
    queue (Limit.room is 0; limits_room in engine.sql). Held slots stay; waiting runs keep their
    places and deadlines, and their timeouts still run; new acquisitions queue. A deploy keeps
    it. Audited; pausing a paused limit changes nothing and records nothing.

    Must never happen (limits verify checks it from the rows): a slot of the limit granted
    between a pause and the resume that follows it."""
    return engine().set_paused(name, True, actor)


def resume_limit(name: str, *, actor: str | None = None) -> Limit:
    """Resume a paused limit: its free capacity goes to the queue at once, as a capacity raise
    does (5.3). Audited; resuming a running limit changes nothing and records nothing."""
    return engine().set_paused(name, False, actor)


def set_max_hold(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Override a limit's max hold (same values as the config's max_hold), or reset it with None.
    Only slots granted afterwards get the new value: a slot's expiry is fixed at grant. `value`
    is checked here (it may come straight from a request)."""
    ms = None if value is None else duration_ms(value, BAD_MAX_HOLD, "max_hold")
    _not_the_box(name, "max_hold")
    return engine().set_max_hold(name, ms, actor)


def set_per_key(name: str, value: object, *, key: str | None = None, actor: str | None = None) -> Limit:
    """Override the pool size of every key of a limit (its per_key, 1..capacity), or with `key`
    the pool size of that one key (a large tenant gets 10, a noisy one 1); None resets it
    (SPEC 9.4). Audited; a deploy keeps it; raising it grants waiting runs at once, lowering it
    takes no slot back. `value` and `key` are checked here (they may come straight from a
    request)."""
    if key is not None:
        key = check_key(key)
    _not_the_box(name, "per_key")
    return engine().set_per_key(name, value, key, actor)


BOX_FIELDS = "'box' is the box's run concurrency: change its base and burst (stackbone limits box --base/--burst)"


def _not_the_box(name: object, field: str) -> None:
    """The box bound's capacity and pools follow its base and burst (set_box), nothing else."""
    if name == BOX_NAME and Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX).exists():
        raise LimitsError(BOX_FIELDS, field=field)


UNCHANGED = object()


def set_box(*, base: object = UNCHANGED, burst: object = UNCHANGED, actor: str | None = None) -> Limit:
    """Override the box's base (1..100000) or burst (1.0..10.0), or reset either with None (SPEC
    12.5). The box bound's per-workflow pool is the base and its capacity floor(base x burst).
    Audited; a deploy keeps it; raising grants waiting runs at once, lowering takes nothing back.
    Values are checked here (they may come straight from a request): the error names the field."""
    new_base = new_burst = None
    try:
        if base is not UNCHANGED and base is not None:
            new_base = check_base(base)
    except ValueError as error:
        raise LimitsError(str(error), field="base") from None
    try:
        if burst is not UNCHANGED and burst is not None:
            new_burst = check_burst(burst)
    except ValueError as error:
        raise LimitsError(str(error), field="burst") from None
    field = "base" if base is not UNCHANGED else "burst"
    return engine().set_box(new_base, base is not UNCHANGED, new_burst, burst is not UNCHANGED, actor, field)


def set_share(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Switch a limit between first come, first served ('fifo') and fair shares between keys
    ('fair'), or reset it to the declared share with None (SPEC 13.5). Audited; a deploy keeps it.
    The next grant follows the new order; nothing held changes."""
    share = None
    if value is not None:
        try:
            share = check_share(value)
        except ValueError as error:
            raise LimitsError(f"share {error}", field="share") from None
    _not_the_box(name, "share")
    return engine().set_share(name, share, actor)


def set_on_full(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Set what an acquisition of a limit that cannot be granted at once does, 'wait', 'skip' or
    'replace' (SPEC 14.1), and for a workflow's own bound also 'cancel_running' (14.4), or reset it
    to the declared value with None. Audited; a deploy keeps it. The runs waiting stay."""
    on_full = None
    if value is not None:
        bound = name.startswith(BOUND_PREFIX) and Limit.objects.filter(name=name, kind=Limit.Kind.WORKFLOW).exists()
        try:
            on_full = check_on_full(value, bound=bound)
        except ValueError as error:
            raise LimitsError(f"on_full {error}", field="on_full") from None
    _not_the_box(name, "on_full")
    return engine().set_on_full(name, on_full, actor)


def set_max_waiting(name: str, value: object, *, per_key: bool = False, actor: str | None = None) -> Limit:
    """Cap a limit's queue (max_waiting), or with `per_key` each key's share of it
    (max_waiting_per_key), 1..1,000,000; None resets it to the declared value (SPEC 14.1, 14.5).
    Audited; a deploy keeps it; lowering it takes no waiting run out of the queue."""
    field = "max_waiting_per_key" if per_key else "max_waiting"
    cap = None
    if value is not None:
        try:
            cap = check_max_waiting(value)
        except ValueError as error:
            raise LimitsError(f"{field} {error}", field=field) from None
    _not_the_box(name, field)
    return engine().set_max_waiting(name, cap, per_key, actor)


def set_weight(name: str, value: object, *, key: object, actor: str | None = None) -> Limit:
    """Set one key's weight on a limit (1-100), or reset it to 1 with None (SPEC 13.1, 13.5): on
    a fair limit the key's share is capacity x weight / the weights of the keys holding or
    waiting. Audited; a deploy keeps it."""
    weight = None
    if value is not None:
        try:
            weight = check_weight(value)
        except ValueError as error:
            raise LimitsError(f"weight {error}", field="weight") from None
    checked_key = check_key(key)
    _not_the_box(name, "weight")
    return engine().set_weight(name, checked_key, weight, actor)


def set_min(name: str, value: object, *, key: object, actor: str | None = None) -> Limit:
    """Set one key's min on a limit (0 to its capacity), or reset it to 0 with None (SPEC 13.1,
    13.5): on a fair limit a key holding fewer slots than its min is served first. Audited; a
    deploy keeps it."""
    checked_key = check_key(key)
    _not_the_box(name, "min")
    return engine().set_min(name, checked_key, value, actor)


def sync_workspace(workspace: Workspace, *, actor: str = DEPLOY_ACTOR) -> SyncReport:
    """Bring the declared values of every limit in line with the workspace config.

    Operator overrides survive (a deploy does not clear them). Limits that left the config are
    kept and marked undeclared; a limit that comes back is declared again. A declared capacity
    that rose grants waiting runs at once.
    """
    return engine().sync_workspace(workspace, actor)


def sync_workflow_bounds(
    bounds: Mapping[str, tuple[Any, ...]], *, actor: str = DEPLOY_ACTOR, only: bool = False
) -> SyncReport:
    """Bring the workflows' own bounds (SPEC 11.5) in line with their @workflow(concurrency=...):
    {limit name: (total, per_key)}, or (total, per_key, on_full, max_waiting,
    max_waiting_per_key) with SPEC 14.1's values (two values: 'wait', no caps). A bound is a
    limit of kind 'workflow' with no max hold (its slots last as long as their run: the sweep
    never takes them back); total None means only the per-key pools bind (capacity 100000).
    Operator overrides survive, as for declared limits; a bound whose workflow no longer declares
    one is kept, undeclared. With `only`, the bounds given are synced and nothing else is touched
    (start_run of a workflow whose bound the deploy did not load, SPEC 11.6:
    `ensure_workflow_bound`)."""
    return engine().sync_workflow_bounds({name: bound_values(values) for name, values in bounds.items()}, actor, only)


def bound_values(values: tuple[Any, ...]) -> BoundValues:
    """A bound's declared values, (total, per_key) or all five, as the five the engines sync."""
    if len(values) == 2:
        return (values[0], values[1], "wait", None, None)
    if len(values) != 5:
        raise ValueError(f"a bound's values are (total, per_key) or five, not {values!r}")
    return (values[0], values[1], values[2], values[3], values[4])


def ensure_workflow_bound(
    name: str,
    total: int | None,
    per_key: int | None,
    on_full: str = "wait",
    max_waiting: int | None = None,
    max_waiting_per_key: int | None = None,
) -> None:
    """SPEC 11.6: a workflow's own bound exists and is declared from the first moment a run of it
    can start. When the deploy did not sync it (the workflow lives in a test module, or a module
    the deploy did not load), start_run syncs that one bound in its own transaction, exactly as a
    sync of it would (audited as the deploy's): a user never sees "unknown limit" for a bound they
    declared. One indexed read when it is there already."""
    if Limit.objects.filter(name=name, declared=True, kind=Limit.Kind.WORKFLOW).exists():
        return
    sync_workflow_bounds({name: (total, per_key, on_full, max_waiting, max_waiting_per_key)}, only=True)
