"""The operator verbs of `stackbone limits ...` and `python manage.py limits ...`, implemented once.

Each verb talks to a backend: the local installation (this project's database, read through
limits.selectors and changed through limits.services) or, with `--agent <id>`, another
installation's JSON API (limits.api). Both backends return the JSON shapes of the API, so one
renderer prints both, as aligned columns or, with `--json`, as JSON.

Exit codes: 0 done; 1 the target was not found (unknown limit or slot, an installation that cannot
be reached) or nothing was released; 2 bad usage or a bad value (the message names the argument
and what is allowed). Errors are one line on stderr, never a traceback.

Every user-supplied value in human-readable output (limit names, slot and run ids, labels, agent
ids, messages from another installation) goes through `printable()` (limits.printable): control
characters and bidirectional overrides are shown as escapes such as `\\x1b` and `\\u202e`, so a
label cannot drive the terminal, reverse a line or forge a table row. `--json` output needs no
such care: JSON escapes control characters itself.

Actors recorded in the audit log: `cli:<os user>` locally, `api:<username>` through the API.
"""

from __future__ import annotations

import argparse
import getpass
import http.client
import json
import os
import re
import sys
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

from limits.durations import DURATION_HELP, format_duration
from limits.printable import printable

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2

VERBS = ("list", "slots", "release", "capacity", "max-hold", "verify")
AGENTS_FILE_ENV = "STACKBONE_AGENTS_FILE"
AGENT_TIMEOUT_SECONDS = 15.0
API_PAGE_SIZE = 500
LIVE_STATES = ("busy", "reserved")

NO_TERMINAL = "release: refusing to release {slot_id} without --yes: there is no terminal to confirm on"
NOT_CONFIRMED = "release: not confirmed; nothing released"
ALREADY_FREE = "{slot_id} was already free ({state}): nothing released"
UNKNOWN_SLOT = "unknown slot {slot_id!r}"
UNKNOWN_LIMIT = "unknown limit {name!r}"
BAD_CUT = "--limit must be a whole number of at least 1, not {value!r}"
VERIFY_LOCAL_ONLY = "verify reads the history rows of an installation: run it there (manage.py limits verify)"
EMPTY_AGENT = "--agent needs an agent id, not an empty value (leave --agent out for this installation)"


class CliError(Exception):
    """A failure the user can act on: one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# --- arguments ----------------------------------------------------------------------------------


def add_verbs(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    """Add the operator verbs to `parser` (the `stackbone limits` group or the management command)
    and return the subparsers, so a caller can add verbs of its own (sync, sweep, token)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument(
        "--agent",
        metavar="ID",
        help=f"act on another installation, listed in the agents file (${AGENTS_FILE_ENV}, "
        "default ~/.config/stackbone/agents.toml)",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    kwargs: dict[str, Any] = {"parents": [common]}
    verbs.add_parser("list", help="every limit: busy/capacity, waiting, max hold", **kwargs)
    slots = verbs.add_parser("slots", help="a limit's slots (busy first), then its queue", **kwargs)
    slots.add_argument("limit", help="the limit's name")
    slots.add_argument("--limit", dest="cut", metavar="N", type=_cut, help="show at most N slots and N waiting runs")
    release = verbs.add_parser("release", help="release a busy or reserved slot", **kwargs)
    release.add_argument("slot_id", help="the slot's id (slot_...)")
    release.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    capacity = verbs.add_parser("capacity", help="override a limit's capacity, or reset it", **kwargs)
    capacity.add_argument("limit", help="the limit's name")
    capacity.add_argument("value", help="a whole number from 1 to 100000, or 'reset' for the declared value")
    max_hold = verbs.add_parser("max-hold", help="override a limit's max hold, or reset it", **kwargs)
    max_hold.add_argument("limit", help="the limit's name")
    max_hold.add_argument("value", help=f"{DURATION_HELP}; or 'reset' for the declared value")
    verify = verbs.add_parser(
        "verify",
        help="prove from the history rows that no limit broke its rules (exit 1 with the violations)",
        **kwargs,
    )
    verify.add_argument("limits", nargs="*", metavar="limit", help="the limits to check (default: every limit)")
    return verbs


def _cut(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(BAD_CUT.format(value=text))
    return int(text)


def capacity_value(text: str) -> int | str | None:
    """'reset' → None; a whole number → int; anything else is passed on as it is, for the
    service to reject with a message naming the field and the allowed range."""
    text = _argument_text(text)
    if text.strip().lower() == "reset":
        return None
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,12}", text.strip()) else text


def max_hold_value(text: str) -> int | str | None:
    """'reset' → None; bare digits are milliseconds, as in the config; else a duration string."""
    text = _argument_text(text)
    if text.strip().lower() == "reset":
        return None
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,15}", text.strip()) else text


def _argument_text(value: object) -> str:
    """Python 3.13.0's argparse hands a positional `[]` for `'' -- --`: treat it as empty."""
    return value if isinstance(value, str) else ""


def build_parser(prog: str = "stackbone limits") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Operate concurrency limits.")
    add_verbs(parser)
    return parser


# --- backends -----------------------------------------------------------------------------------


@dataclass(slots=True)
class SlotsView:
    """A limit's slots and queue, as far as the cut goes, and how many more there are."""

    limit: dict[str, Any]
    slots: list[dict[str, Any]]
    queue: list[dict[str, Any]]
    more_slots: int
    more_queue: int
    now: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit["name"],
            "slots": self.slots,
            "queue": self.queue,
            "more_slots": self.more_slots,
            "more_queue": self.more_queue,
        }


@dataclass(slots=True)
class Change:
    """A capacity or max-hold change: the value before and the limit after."""

    old: int
    limit: dict[str, Any]


class Backend(Protocol):
    def limits(self) -> list[dict[str, Any]]: ...

    def slots(self, name: str, cut: int | None) -> SlotsView: ...

    def slot(self, slot_id: str) -> dict[str, Any]: ...

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]: ...

    def set_capacity(self, name: str, value: int | str | None) -> Change: ...

    def set_max_hold(self, name: str, value: int | str | None) -> Change: ...


def local_actor() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"cli:{user}"[:150]


class LocalBackend:
    """This installation: reads through the selectors, writes through the services, each verb a
    constant number of queries."""

    def __init__(self, actor: str) -> None:
        self.actor = actor

    def limits(self) -> list[dict[str, Any]]:
        from limits import selectors

        return [selectors.limit_summary(limit) for limit in selectors.limits()]

    def slots(self, name: str, cut: int | None) -> SlotsView:
        from django.utils import timezone

        from limits import selectors

        limit = self._limit(name)
        slot_rows = selectors.live_slots(limit)
        queue_rows = selectors.waiting_entries(limit)
        if cut is not None:
            slot_rows, queue_rows = slot_rows[: cut + 1], queue_rows[: cut + 1]  # one more tells if there are more
        slots = [selectors.slot_summary(slot) for slot in slot_rows]
        queue = [selectors.queue_entry_summary(entry, index + 1) for index, entry in enumerate(queue_rows)]
        return SlotsView(
            limit=selectors.limit_summary(limit),
            slots=slots[:cut],
            queue=queue[:cut],
            more_slots=_more(len(slots), limit.in_use, cut),
            more_queue=_more(len(queue), limit.waiting_count, cut),
            now=timezone.now(),
        )

    def slot(self, slot_id: str) -> dict[str, Any]:
        from limits import selectors

        slot = selectors.get_slot(slot_id)
        if slot is None:
            raise CliError(UNKNOWN_SLOT.format(slot_id=slot_id), EXIT_NOT_FOUND)
        return {**selectors.slot_summary(slot), "limit": slot.limit.name}

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]:
        from limits import services

        before = self.slot(slot_id)
        released = services.release(slot_id, actor=self.actor)
        after = before if released else self.slot(slot_id)
        return released, after

    def set_capacity(self, name: str, value: int | str | None) -> Change:
        from limits import selectors, services

        old = self._limit(name).capacity
        return Change(old, selectors.limit_summary(services.set_capacity(name, value, actor=self.actor)))  # type: ignore[arg-type]

    def set_max_hold(self, name: str, value: int | str | None) -> Change:
        from limits import selectors, services

        old = self._limit(name).max_hold_ms
        return Change(old, selectors.limit_summary(services.set_max_hold(name, value, actor=self.actor)))

    def verify(self, names: list[str] | None) -> Any:
        from limits.verify import verify

        return verify(names)

    def _limit(self, name: str) -> Any:
        from limits import selectors

        limit = selectors.get_limit(name)
        if limit is None:
            raise CliError(UNKNOWN_LIMIT.format(name=name), EXIT_NOT_FOUND)
        return limit


def _more(fetched: int, total: int, cut: int | None) -> int:
    """How many rows lie past the cut. `total` comes from the limit's counters; `fetched` holds
    one row past the cut when there are more, in case the counters moved since they were read."""
    if cut is None or fetched <= cut:
        return 0
    return max(total - cut, 1)


@dataclass(frozen=True, slots=True)
class Agent:
    id: str
    url: str
    token: str


def agents_file() -> Path:
    configured = os.environ.get(AGENTS_FILE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "stackbone" / "agents.toml"


def load_agent(agent_id: str) -> Agent:
    """Read one agent from the agents file::

    [agents.staging]
    url = "https://staging.example.com"
    token = "sbk_..."            # or: token_env = "STAGING_TOKEN"
    """
    path = agents_file()
    try:
        with path.open("rb") as handle:
            config = tomllib.load(handle)
    except FileNotFoundError:
        raise CliError(
            f"--agent {agent_id}: no agents file at {path} (add [agents.{agent_id}] with url and token, "
            f"or point {AGENTS_FILE_ENV} at one)"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CliError(f"--agent {agent_id}: cannot read the agents file {path}: {error}") from None
    agents = config.get("agents")
    entry = agents.get(agent_id) if isinstance(agents, dict) else None
    if not isinstance(entry, dict):
        known = ", ".join(sorted(agents)) if isinstance(agents, dict) and agents else "none"
        raise CliError(f"--agent {agent_id}: unknown agent in {path} (known: {known})")
    url = entry.get("url")
    if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CliError(f"--agent {agent_id}: 'url' in {path} must be an http:// or https:// address")
    token = entry.get("token")
    if token is None and isinstance(entry.get("token_env"), str):
        token = os.environ.get(entry["token_env"])
    if not isinstance(token, str) or not token:
        raise CliError(f"--agent {agent_id}: no 'token' (or 'token_env' naming a set variable) in {path}")
    return Agent(agent_id, url.rstrip("/"), token)


class AgentBackend:
    """Another installation, through its JSON API (limits.api)."""

    def __init__(self, agent: Agent, *, timeout: float = AGENT_TIMEOUT_SECONDS) -> None:
        self.agent = agent
        self.timeout = timeout

    def limits(self) -> list[dict[str, Any]]:
        return self._call("GET", "")["limits"]

    def slots(self, name: str, cut: int | None) -> SlotsView:
        quoted = _quote(name)
        summary = self._call("GET", f"{quoted}/", not_found=UNKNOWN_LIMIT.format(name=name))
        slots, more_slots, now = self._pages(f"{quoted}/slots/", "slots", cut, name)
        queue, more_queue, _ = self._pages(f"{quoted}/queue/", "queue", cut, name)
        return SlotsView(summary, slots, queue, more_slots, more_queue, now)

    def slot(self, slot_id: str) -> dict[str, Any]:
        return self._call("GET", f"slots/{_quote(slot_id)}/", not_found=UNKNOWN_SLOT.format(slot_id=slot_id))

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]:
        answer = self._call(
            "POST", f"slots/{_quote(slot_id)}/release/", {}, not_found=UNKNOWN_SLOT.format(slot_id=slot_id)
        )
        return bool(answer["released"]), answer["slot"]

    def set_capacity(self, name: str, value: int | str | None) -> Change:
        answer = self._call(
            "POST", f"{_quote(name)}/capacity/", {"capacity": value}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return Change(answer["old"], answer["limit"])

    def set_max_hold(self, name: str, value: int | str | None) -> Change:
        answer = self._call(
            "POST", f"{_quote(name)}/max-hold/", {"max_hold": value}, not_found=UNKNOWN_LIMIT.format(name=name)
        )
        return Change(answer["old"], answer["limit"])

    def _pages(self, path: str, key: str, cut: int | None, name: str) -> tuple[list[dict[str, Any]], int, datetime]:
        """Follow the pages of a list until one row past the cut (or the end): the rows, how
        many more there are, and the server's clock (times are shown relative to it)."""
        rows: list[dict[str, Any]] = []
        size = API_PAGE_SIZE if cut is None else min(API_PAGE_SIZE, cut + 1)
        page = 1
        while True:
            answer = self._call("GET", f"{path}?page={page}&size={size}", not_found=UNKNOWN_LIMIT.format(name=name))
            rows.extend(answer[key])
            if not answer["has_next"] or (cut is not None and len(rows) > cut):
                return rows[:cut], _more(len(rows), answer["total"], cut), datetime.fromisoformat(answer["now"])
            page += 1

    def _call(self, method: str, path: str, body: object = None, *, not_found: str = "not found") -> Any:
        url = f"{self.agent.url}/api/limits/{path}"
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Bearer {self.agent.token}",
                "Accept": "application/json",
                "Content-Type": "application/json",
                "User-Agent": "stackbone-cli",
            },
        )
        where = f"agent {self.agent.id!r} ({self.agent.url})"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (http(s) only)
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise self._refusal(error, where, not_found) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as error:
            reason = getattr(error, "reason", None) or error
            raise CliError(f"cannot reach {where}: {_one_line(str(reason))}", EXIT_NOT_FOUND) from None
        try:
            return json.loads(payload)
        except ValueError:
            raise CliError(
                f"{where} did not answer with JSON: is it a Stackbone installation?", EXIT_NOT_FOUND
            ) from None

    def _refusal(self, error: urllib.error.HTTPError, where: str, not_found: str) -> CliError:
        try:
            message = str(json.loads(error.read()).get("error") or "")
        except (ValueError, AttributeError, OSError):
            message = ""
        if error.code == 401:
            return CliError(f"{where} refused the token: {message or 'unauthorized'}", EXIT_USAGE)
        if error.code == 403:
            return CliError(f"{where} refused: {message or 'forbidden'}", EXIT_USAGE)
        if error.code == 404:
            return CliError(message or not_found, EXIT_NOT_FOUND)
        if error.code == 400:
            return CliError(message or "bad request", EXIT_USAGE)
        return CliError(f"{where} answered {error.code} {error.reason}", EXIT_NOT_FOUND)


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


# --- output -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Streams:
    stdin: IO[str] | Any = field(default_factory=lambda: sys.stdin)
    stdout: IO[str] | Any = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] | Any = field(default_factory=lambda: sys.stderr)

    def out(self, text: str = "") -> None:
        _write(self.stdout, text + "\n")

    def err(self, text: str) -> None:
        _write(self.stderr, text + "\n")

    def json(self, value: object) -> None:
        self.out(json.dumps(value, indent=2))


def _write(stream: Any, text: str) -> None:
    """Write as is, also through Django's OutputWrapper (which would add its own line endings);
    on a terminal that cannot show an arrow, write an ASCII one."""
    try:
        if hasattr(stream, "style_func"):
            stream.write(text, ending="")
        else:
            stream.write(text)
    except UnicodeEncodeError:
        _write(stream, text.replace("→", "->").replace("…", "...").encode("ascii", "replace").decode())
        return
    stream.flush()


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned columns; every cell is shown printable, so no value can break the layout."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def _ago(moment: str | None, now: datetime) -> str:
    if not moment:
        return "-"
    ms = int((now - datetime.fromisoformat(moment)).total_seconds() * 1000)
    return "just now" if ms < 1000 else f"{format_duration(ms)} ago"


def _until(moment: str | None, now: datetime, *, passed: str) -> str:
    if not moment:
        return "-"
    ms = int((datetime.fromisoformat(moment) - now).total_seconds() * 1000)
    return passed if ms <= 0 else format_duration(ms)


def render_limits(io: Streams, limits: list[dict[str, Any]]) -> None:
    if not limits:
        io.out("no limits: declare them in the workspace module and run `manage.py limits sync`")
        return
    rows = []
    for limit in limits:
        notes = []
        if limit["reserved"]:
            notes.append(f"{limit['reserved']} reserved")
        if not limit["declared"]:
            notes.append("undeclared")
        rows.append(
            [
                limit["name"],
                f"{limit['busy']}/{limit['capacity']}" + ("*" if limit["capacity_overridden"] else ""),
                str(limit["waiting"]),
                format_duration(limit["max_hold_ms"]) + ("*" if limit["max_hold_overridden"] else ""),
                ", ".join(notes),
            ]
        )
    for line in table(["NAME", "BUSY/CAPACITY", "WAITING", "MAX HOLD", "NOTES"], rows):
        io.out(line)
    if any(limit["capacity_overridden"] or limit["max_hold_overridden"] for limit in limits):
        io.out("* overridden by an operator; `reset` restores the declared value")


def render_slots(io: Streams, view: SlotsView) -> None:
    limit, now = view.limit, view.now
    header = f"{limit['name']}: {limit['busy']}/{limit['capacity']} busy"
    if limit["reserved"]:
        header += f" ({limit['reserved']} reserved)"
    header += f", {limit['waiting']} waiting, max hold {format_duration(limit['max_hold_ms'])}"
    if not limit["declared"]:
        header += " (undeclared)"
    io.out(printable(header))
    io.out()
    if view.slots:
        rows = [
            [
                slot["id"],
                slot["state"],
                slot["run"],
                slot["label"] or "-",
                _ago(slot["granted_at"], now),
                _until(slot["expires_at"], now, passed="past max hold"),
            ]
            for slot in view.slots
        ]
        for line in table(["SLOT", "STATE", "RUN", "LABEL", "GRANTED", "EXPIRES IN"], rows):
            io.out(line)
    else:
        io.out("no slots in use")
    if view.more_slots:
        io.out(f"… and {view.more_slots} more slot{'s' if view.more_slots != 1 else ''}")
    io.out()
    if view.queue:
        rows = [
            [
                str(entry["position"]),
                entry["run"],
                entry["label"] or "-",
                _ago(entry["waiting_since"], now),
                _until(entry["deadline"], now, passed="passed"),
            ]
            for entry in view.queue
        ]
        for line in table(["POSITION", "RUN", "LABEL", "WAITING SINCE", "DEADLINE IN"], rows):
            io.out(line)
    else:
        io.out("no runs waiting")
    if view.more_queue:
        io.out(f"… and {view.more_queue} more waiting")


# --- the verbs ----------------------------------------------------------------------------------


def _list(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    limits = backend.limits()
    if options.json:
        io.json(limits)
    else:
        render_limits(io, limits)
    return EXIT_OK


def _slots(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    view = backend.slots(options.limit, options.cut)
    if options.json:
        io.json(view.as_json())
    else:
        render_slots(io, view)
    return EXIT_OK


def _release(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    slot_id = options.slot_id
    if not options.yes:
        if not _is_terminal(io.stdin):
            raise CliError(NO_TERMINAL.format(slot_id=slot_id) + " (pass --yes)", EXIT_USAGE)
        slot = backend.slot(slot_id)
        if slot["state"] in LIVE_STATES:
            label = f", label {slot['label']}" if slot["label"] else ""
            question = f"Release {slot_id} of {slot['limit']} ({slot['state']}, run {slot['run']}{label})?"
            _write(io.stderr, printable(question) + " [y/N] ")
            if io.stdin.readline().strip().lower() not in ("y", "yes"):
                raise CliError(NOT_CONFIRMED, EXIT_NOT_FOUND)
    try:
        released, slot = backend.release(slot_id)
    except CliError as error:
        if options.json and error.code == EXIT_NOT_FOUND:
            io.json({"released": False})
        raise
    if options.json:
        io.json({"released": released})
    if not released:
        raise CliError(ALREADY_FREE.format(slot_id=slot_id, state=slot["state"]), EXIT_NOT_FOUND)
    if not options.json:
        io.out(printable(f"released {slot_id} of {slot['limit']} (was {slot['state']}, run {slot['run']})"))
    return EXIT_OK


def _capacity(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    value = capacity_value(options.value)
    change = backend.set_capacity(options.limit, value)
    if options.json:
        io.json(change.limit)
    else:
        new = str(change.limit["capacity"]) + (" (declared)" if value is None else "")
        io.out(printable(f"{change.limit['name']} capacity: {change.old} → {new}"))
    return EXIT_OK


def _max_hold(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    value = max_hold_value(options.value)
    change = backend.set_max_hold(options.limit, value)
    if options.json:
        io.json(change.limit)
    else:
        new = format_duration(change.limit["max_hold_ms"]) + (" (declared)" if value is None else "")
        io.out(printable(f"{change.limit['name']} max hold: {format_duration(change.old)} → {new}"))
    return EXIT_OK


def _verify(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """Exit 0 with a one-line summary, or list the violations (one a line) and exit 1."""
    if not isinstance(backend, LocalBackend):
        raise CliError(VERIFY_LOCAL_ONLY, EXIT_USAGE)
    result = backend.verify(options.limits or None)
    if options.json:
        io.json({"ok": result.ok, "summary": result.summary(), "violations": result.violations})
    else:
        for violation in result.violations:
            io.out(printable(violation))
        io.out(result.summary())
    if not result.ok:
        raise CliError(f"{len(result.violations)} violation(s) found", EXIT_NOT_FOUND)
    return EXIT_OK


HANDLERS: dict[str, Callable[[Backend, argparse.Namespace, Streams], int]] = {
    "list": _list,
    "slots": _slots,
    "release": _release,
    "capacity": _capacity,
    "max-hold": _max_hold,
    "verify": _verify,
}


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _one_line(text: str) -> str:
    return " ".join(text.strip().splitlines()[:1]) or text


def run(
    options: argparse.Namespace,
    *,
    streams: Streams | None = None,
    setup: Callable[[], None] | None = None,
    actor: str | None = None,
) -> int:
    """Run one verb and return its exit code; errors are written to stderr as one line.

    `setup` prepares Django before a local verb (the `stackbone` script passes one; manage.py
    and tests have Django ready). `actor` defaults to `cli:<os user>`.
    """
    io = streams or Streams()
    try:
        return execute(options, io=io, setup=setup, actor=actor)
    except CliError as error:
        io.err(f"error: {printable(error.message)}")
        return error.code


def execute(
    options: argparse.Namespace,
    *,
    io: Streams,
    setup: Callable[[], None] | None = None,
    actor: str | None = None,
) -> int:
    """Run one verb; raise CliError for a failure (the management command turns it into a
    CommandError with the same exit code)."""
    handler = HANDLERS[options.verb]
    if options.agent is not None and not options.agent.strip():
        raise CliError(EMPTY_AGENT, EXIT_USAGE)  # an unset $TARGET must not mean "this installation"
    if options.agent:
        return handler(AgentBackend(load_agent(options.agent)), options, io)
    if setup is not None:
        setup()
    from django.db import DatabaseError, InterfaceError

    from limits.services import LimitsError

    try:
        return handler(LocalBackend(actor or local_actor()), options, io)
    except LimitsError as error:
        code = EXIT_NOT_FOUND if error.field == "limit" else EXIT_USAGE
        raise CliError(error.message, code) from None
    except (DatabaseError, InterfaceError) as error:
        raise CliError(database_error_message(error), EXIT_NOT_FOUND) from None


def database_error_message(error: Exception) -> str:
    from django.db import connection

    text = _one_line(str(error)) or type(error).__name__
    hint = ""
    if "no such table" in text or "does not exist" in text:
        hint = " (run `python manage.py migrate` first)"
    return f"cannot use the database ({connection.vendor}, {connection.settings_dict.get('NAME')}): {text}{hint}"


def main(argv: list[str] | None = None, *, streams: Streams | None = None) -> int:
    """`stackbone limits` without the outer script, for a Django that is already set up
    (tests, a shell)."""
    io = streams or Streams()
    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return run(options, streams=io)
