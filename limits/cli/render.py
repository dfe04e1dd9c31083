"""What the verbs print: aligned tables and JSON, on streams that may be Django's OutputWrapper.

Every user-supplied value in human-readable output goes through `printable()`
(limits.printable); JSON escapes control characters itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from limits.cli.backend import KeysView, SlotsView
from limits.durations import format_duration
from limits.eta import eta_words
from limits.printable import printable


@dataclass(slots=True)
class Streams:
    stdin: IO[str] | Any = field(default_factory=lambda: sys.stdin)
    stdout: IO[str] | Any = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] | Any = field(default_factory=lambda: sys.stderr)

    def out(self, text: str = "") -> None:
        write(self.stdout, text + "\n")

    def err(self, text: str) -> None:
        write(self.stderr, text + "\n")

    def json(self, value: object) -> None:
        self.out(json.dumps(value, indent=2))


def write(stream: Any, text: str) -> None:
    """Write as is, also through Django's OutputWrapper (which would add its own line endings);
    on a terminal that cannot show an arrow, write an ASCII one."""
    try:
        if hasattr(stream, "style_func"):
            stream.write(text, ending="")
        else:
            stream.write(text)
    except UnicodeEncodeError:
        write(stream, text.replace("→", "->").replace("…", "...").encode("ascii", "replace").decode())
        return
    stream.flush()


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


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


CONFIRM_NOTE = (
    "reserved: its run confirms within CONFIRM WITHIN or the slot lapses to the next run; "
    "max hold counts only once it is confirmed"
)


def _expires(slot: dict[str, Any], now: datetime) -> str:
    """Time left before max hold; for a reserved slot, when it applies: once the run confirms
    (the sweep takes back only confirmed slots), as Studio says."""
    left = _until(slot["expires_at"], now, passed="past max hold")
    return f"{left} once confirmed" if slot["state"] == "reserved" and slot["expires_at"] else left


def _confirm_within(slot: dict[str, Any], now: datetime) -> str:
    """A reserved slot's confirm deadline, the timer that applies until its run confirms ('-' for
    a busy slot): past it the slot lapses to the next run."""
    if slot["state"] != "reserved":
        return "-"
    return _until(slot.get("reserved_until"), now, passed="lapsing")


def _max_hold(limit: dict[str, Any]) -> str:
    """A limit's max hold; '-' for a workflow's own bound, which has none (its max_hold_ms is null)."""
    if limit.get("max_hold_ms") is None:
        return "-"
    return format_duration(limit["max_hold_ms"]) + ("*" if limit["max_hold_overridden"] else "")


def in_use(row: dict[str, Any]) -> object:
    """A limit's or a pool's slots in use: busy (confirmed) + reserved (SPEC 6.5). An
    installation from before `in_use` answered that figure as `busy`. Shown as given (through
    printable(), like every value from another installation)."""
    return row["in_use"] if "in_use" in row else row["busy"]


def is_bound(limit: dict[str, Any]) -> bool:
    return limit.get("kind") == "workflow"


def is_box(limit: dict[str, Any]) -> bool:
    return limit.get("kind") == "box"


def _burst(value: object) -> str:
    """A burst factor as the audit log writes it: 2 for 2.0, 1.5 for 1.5."""
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def box_text(figures: dict[str, Any]) -> str:
    """'base 3, burst 2, ceiling 6', from the box's limit row (its capacity is the ceiling) or
    from the figures before a change ({base, burst, ceiling})."""
    ceiling = figures["ceiling"] if "ceiling" in figures else figures.get("capacity")
    return f"base {figures.get('base')}, burst {_burst(figures.get('burst'))}, ceiling {ceiling}"


def render_box(io: Streams, limit: dict[str, Any]) -> None:
    """The box's run concurrency (SPEC 12): runs executing of the ceiling, runs waiting for the
    box, and its base and burst with their declared values."""
    header = f"box: {in_use(limit)}/{limit['capacity']} runs executing"
    if limit["reserved"]:
        header += f" ({limit['reserved']} starting)"
    header += f", {limit['waiting']} waiting for the box"
    if not limit["declared"]:
        header += " (undeclared: run_concurrency left the workspace config; the box caps no new run)"
    if limit.get("paused"):
        header += " (paused: no run starts or resumes until `stackbone limits resume box`)"
    io.out(printable(header))
    base, burst = limit.get("base"), limit.get("burst")
    base_note = f" (overridden; declared {limit.get('declared_base')})" if limit.get("base_overridden") else ""
    burst_note = (
        f" (overridden; declared {_burst(limit.get('declared_burst'))})" if limit.get("burst_overridden") else ""
    )
    runs = "run" if base == 1 else "runs"
    io.out(printable(f"base  {base}{base_note}: no single workflow executes more than {base} {runs} at once"))
    io.out(
        printable(
            f"burst {_burst(burst)}{burst_note}: the box executes at most {limit['capacity']} runs at once "
            f"(floor({base} x {_burst(burst)}))"
        )
    )
    io.out("runs executing and waiting: `stackbone limits slots box`; per workflow: `stackbone limits keys box`")


def render_limits(io: Streams, limits: list[dict[str, Any]], kind: str | None = None) -> None:
    """The limits as a table. A paused limit says so first in its NOTES ('paused': it grants
    nothing until resumed), a workflow's own bound next ('workflow bound'; its MAX HOLD is '-': it
    has none). The columns stay those of a box without bounds."""
    if not limits:
        if kind == "workflow":
            io.out("no workflow bounds: no workflow caps its runs with @workflow(concurrency=...)")
        else:
            io.out("no limits: declare them in the workspace module and run `manage.py limits sync`")
        return
    rows = []
    for limit in limits:
        notes = ["workflow bound"] if is_bound(limit) else []
        if is_box(limit):
            notes.append(
                f"box: base {limit.get('base')}" + ("*" if limit.get("base_overridden") else "")
                + f", burst {_burst(limit.get('burst'))}" + ("*" if limit.get("burst_overridden") else "")
            )  # fmt: skip
        if limit.get("capped_by_box") and is_bound(limit):
            notes.append(f"capped by the box's base: {limit.get('in_force')} at once")
        elif limit.get("capped_by_box"):
            notes.append(f"whole runs capped by the box's base: {limit.get('whole_runs_in_force')}")
        if limit.get("paused"):  # .get: an installation from before pause
            notes.insert(0, "paused")
        if limit["reserved"]:
            notes.append(f"{limit['reserved']} reserved")
        if not limit["declared"]:
            notes.append("undeclared")
        if limit.get("per_key") is not None and not is_box(limit):
            notes.append(f"per key {limit['per_key']}" + ("*" if limit.get("per_key_overridden") else ""))
        if limit.get("share") == "fair" or limit.get("share_overridden"):  # .get: from before fair shares
            notes.append(f"{limit.get('share')} shares" + ("*" if limit.get("share_overridden") else ""))
        notes.extend(_when_full_notes(limit))
        rows.append(
            [
                limit["name"],
                f"{in_use(limit)}/{limit['capacity']}" + ("*" if limit["capacity_overridden"] else ""),
                str(limit["waiting"]),
                _max_hold(limit),
                ", ".join(notes),
            ]
        )
    for line in table(["NAME", "IN USE/CAPACITY", "WAITING", "MAX HOLD", "NOTES"], rows):
        io.out(line)
    if any(
        (limit["capacity_overridden"] and not is_box(limit))
        or limit["max_hold_overridden"]
        or limit.get("per_key_overridden")
        or limit.get("share_overridden")
        or any(limit.get(f"{name}_overridden") for name in WHEN_FULL_FIELDS)
        for limit in limits
    ):
        io.out("* overridden by an operator; `reset` restores the declared value")


WHEN_FULL_FIELDS = ("on_full", "max_waiting", "max_waiting_per_key")  # SPEC 14.1


def _when_full_notes(limit: dict[str, Any]) -> list[str]:
    """`list`'s NOTES for SPEC 14: 'on full skip' and the queue's caps, when not the defaults
    (wait, no cap) or set by an operator ('*'). .get: an installation from before them has none."""
    notes = []
    if limit.get("on_full", "wait") != "wait" or limit.get("on_full_overridden"):
        notes.append(f"on full {limit.get('on_full')}" + ("*" if limit.get("on_full_overridden") else ""))
    for cap, words in (("max_waiting", "max waiting"), ("max_waiting_per_key", "max waiting per key")):
        if limit.get(cap) is not None:
            notes.append(f"{words} {limit[cap]}" + ("*" if limit.get(f"{cap}_overridden") else ""))
    return notes


def render_limit(io: Streams, limit: dict[str, Any]) -> None:
    """`show`: one limit's figures, then each value in force, '(overridden; declared X)' when an
    operator set it, and the acquisitions it answered at once instead of queueing (SPEC 14.6). A
    value an installation from before it does not answer is '-'."""
    header = f"{limit['name']}: {in_use(limit)}/{limit['capacity']} in use"
    if limit["reserved"]:
        header += f" ({limit['reserved']} reserved)"
    header += f", {limit['waiting']} waiting"
    if limit.get("paused"):
        header += " (paused: grants nothing until resumed)"
    if not limit["declared"]:
        header += " (undeclared)"
    io.out(printable(header))
    rows = [["kind", str(limit.get("kind", "limit"))]]
    if is_box(limit):  # its capacity is the ceiling, floor(base x burst): set through base and burst
        rows += [
            ["ceiling", str(limit["capacity"])],
            ["base", _in_force(limit, "base", "declared_base", "base_overridden", str)],
            ["burst", _in_force(limit, "burst", "declared_burst", "burst_overridden", _burst)],
        ]
    else:
        rows += [
            ["capacity", _in_force(limit, "capacity", "declared_capacity", "capacity_overridden", str)],
            ["max hold", _in_force(limit, "max_hold_ms", "declared_max_hold_ms", "max_hold_overridden", _hold)],
            ["per key", _in_force(limit, "per_key", "declared_per_key", "per_key_overridden", _cap)],
        ]
    for value, words in (
        ("share", "share"),
        ("on_full", "on full"),
        ("max_waiting", "max waiting"),
        ("max_waiting_per_key", "max waiting per key"),
    ):
        rows.append([words, _in_force(limit, value, f"declared_{value}", f"{value}_overridden", _cap)])
    rows += [
        ["skipped", str(limit.get("skipped_count", "-"))],
        ["refused (queue full)", str(limit.get("refused_count", "-"))],
        ["replaced", str(limit.get("replaced_count", "-"))],
        ["cancelled", str(limit.get("cancelled_count", "-"))],
    ]
    for line in table(["", ""], rows)[1:]:
        io.out(line)


def _hold(ms: Any) -> str:
    return "none" if ms is None else format_duration(ms)


def _cap(value: object) -> str:
    """A pool size or a cap; 'none' when there is none."""
    return "none" if value is None else str(value)


def _in_force(limit: dict[str, Any], field: str, declared: str, overridden: str, text: Callable[[Any], str]) -> str:
    """A value in force as `text` writes it, with '(overridden; declared X)' when an operator set
    it; '-' when the row has no such value (an installation from before it)."""
    if field not in limit:
        return "-"
    if limit.get(overridden):
        return f"{text(limit[field])} (overridden; declared {text(limit.get(declared))})"
    return text(limit[field])


def _share(value: object) -> str:
    """A fair share of the capacity ('2.5', '3'); '-' for a key neither holding nor waiting."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:g}"


def _turns(value: object) -> str:
    """A key's pass in turns, to two decimals ('3.50'); '-' for a key neither holding nor waiting
    (or from an installation from before the pass)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:.2f}"


def _pool_figures(pool: dict[str, Any]) -> str:
    """'2/3 in use (1 reserved), 4 waiting' for a key's pool; without a pool size, '2 in use, ...'."""
    text = f"{in_use(pool)}/{pool['pool']} in use" if pool["pool"] is not None else f"{in_use(pool)} in use"
    if pool["reserved"]:
        text += f" ({pool['reserved']} reserved)"
    return text + f", {pool['waiting']} waiting"


def _extra_columns(rows: list[dict[str, Any]], *, keys: bool) -> tuple[list[str], list[list[str]]]:
    """KEY (unless the rows are one key's) and LIMITS (the limits of a group acquisition), each
    only when a row has one, so a limit without keys or groups prints as it always did."""
    headers: list[str] = []
    cells: list[list[str]] = [[] for _ in rows]
    if keys and any(row.get("key") for row in rows):
        headers.append("KEY")
        for cell, row in zip(cells, rows, strict=True):
            cell.append(row.get("key") or "-")
    if any(row.get("group") for row in rows):
        headers.append("LIMITS")
        for cell, row in zip(cells, rows, strict=True):
            cell.append(" + ".join(row.get("group") or []) or "-")
    return headers, cells


def render_slots(io: Streams, view: SlotsView) -> None:
    limit, now = view.limit, view.now
    header = f"{limit['name']}: {in_use(limit)}/{limit['capacity']} in use"
    if limit["reserved"]:
        header += f" ({limit['reserved']} reserved)"
    if is_bound(limit) or is_box(limit) or limit.get("max_hold_ms") is None:
        header += f", {limit['waiting']} queued, no max hold"
    else:
        header += f", {limit['waiting']} waiting, max hold {format_duration(limit['max_hold_ms'])}"
    if is_box(limit):
        header += f", base {limit.get('base')}, burst {_burst(limit.get('burst'))}"
        header += " (the box's run concurrency: each executing run holds a slot of its workflow's pool of base)"
    elif limit.get("per_key") is not None:
        header += f", per key {limit['per_key']}"
    if is_bound(limit):
        header += " (workflow bound: each running run holds a slot until it ends)"
        if limit.get("capped_by_box"):
            header += f" (capped by the box's base: {limit.get('in_force')} at once)"
    if not limit["declared"]:
        header += " (undeclared)"
    if limit.get("paused"):
        header += " (paused: grants nothing until resumed; waiting runs keep their places)"
    io.out(printable(header))
    if view.key is not None:
        io.out(printable(f"key {view.key['key']}: {_pool_figures(view.key)}"))
    if limit.get("share") == "fair" and view.queue:  # .get: an installation from before fair shares
        io.out(FAIR_QUEUE_NOTE)
    io.out()
    bound = is_bound(limit) or is_box(limit)  # its slots last as long as their run: no EXPIRES IN
    if view.slots:
        extra, cells = _extra_columns(view.slots, keys=view.key is None)
        # A reserved slot has two timers: its run must confirm by `reserved_until` or the slot
        # lapses to the next run; max hold (EXPIRES IN) applies only once it is confirmed. The
        # CONFIRM WITHIN column appears when a slot is reserved, and says which one applies now.
        confirming = any(slot["state"] == "reserved" for slot in view.slots)
        rows = [
            [
                slot["id"],
                slot["state"],
                slot["run"],
                slot["label"] or "-",
                *more,
                _ago(slot["granted_at"], now),
                *([] if bound else [_expires(slot, now)]),
                *([_confirm_within(slot, now)] if confirming else []),
            ]
            for slot, more in zip(view.slots, cells, strict=True)
        ]
        headers = [
            "SLOT",
            "STATE",
            "RUN",
            "LABEL",
            *extra,
            "GRANTED",
            *([] if bound else ["EXPIRES IN"]),
            *(["CONFIRM WITHIN"] if confirming else []),
        ]
        for line in table(headers, rows):
            io.out(line)
        if confirming:
            io.out(CONFIRM_NOTE)
    else:
        io.out("no runs running" if bound else "no slots in use")
    if view.more_slots:
        io.out(f"… and {view.more_slots} more slot{'s' if view.more_slots != 1 else ''}")
    io.out()
    if view.queue:
        extra, cells = _extra_columns(view.queue, keys=view.key is None)
        rows = [
            [
                _position(entry),
                entry["run"],
                entry["label"] or "-",
                *more,
                eta_words(entry.get("eta_seconds")),  # .get: a server from before eta_seconds
                _ago(entry["waiting_since"], now),
                _until(entry["deadline"], now, passed="passed"),
                (entry.get("reason") or {}).get("text", "-"),  # .get: a server from before reasons (SPEC 6.5)
            ]
            for entry, more in zip(view.queue, cells, strict=True)
        ]
        since = "QUEUED SINCE" if bound else "WAITING SINCE"
        for line in table(["POSITION", "RUN", "LABEL", *extra, "ETA", since, "DEADLINE IN", "WHY"], rows):
            io.out(line)
    else:
        io.out("no runs queued" if bound else "no runs waiting")
    if view.more_queue:
        io.out(f"… and {view.more_queue} more {'queued' if bound else 'waiting'}")
    if any(entry.get("position_estimated") for entry in view.queue):
        io.out("~ estimated: past the first runs, the order follows the keys' turns (it may change)")


FAIR_QUEUE_NOTE = (
    "fair shares between keys: the key holding least of its share is served next; keys take turns. "
    "The queue is listed in the order it is served: the first run gets the next free slot"
)


def _position(entry: dict[str, Any]) -> str:
    """A queue row's position; '~51' when it is an estimate (a fair limit's queue past the runs
    walked exactly, SPEC 13.7). .get: an installation from before fair queues."""
    return ("~" if entry.get("position_estimated") else "") + str(entry["position"])


def render_keys(io: Streams, view: KeysView) -> None:
    """The limit's figures, its keys busiest first (IN USE counts busy and reserved slots, NOTES
    the reserved ones; POOL is the key's pool size, '-' when only the total applies; OVERRIDE an
    operator's size for that key; on a fair limit WEIGHT, MIN, FAIR SHARE and PASS, its place in
    the turns), and the pool of runs without a key."""
    limit = view.limit
    header = f"{limit['name']}: {in_use(limit)}/{limit['capacity']} in use, {limit['waiting']} waiting, "
    if limit.get("per_key") is None:
        header += "no per-key pools (only the total applies)"
    else:
        header += f"per key {limit['per_key']}" + (" (overridden)" if limit.get("per_key_overridden") else "")
    fair = limit.get("share") == "fair"  # .get: an installation from before fair shares
    if fair:
        header += ", fair shares" + (" (overridden)" if limit.get("share_overridden") else "")
    io.out(printable(header))
    io.out()
    if view.keys:
        rows = []
        for key in view.keys:
            row = [key["key"], str(in_use(key)), "-" if key["pool"] is None else str(key["pool"])]
            if fair:
                row += [str(key.get("weight", 1)), str(key.get("min", 0)), _share(key.get("fair_share"))]
                row.append(_turns(key.get("pass")))
            row += [
                str(key["waiting"]),
                "-" if key["pool_override"] is None else str(key["pool_override"]),
                f"{key['reserved']} reserved" if key["reserved"] else "",
            ]
            rows.append(row)
        headers = ["KEY", "IN USE", "POOL", *(["WEIGHT", "MIN", "FAIR SHARE", "PASS"] if fair else []), "WAITING"]
        for line in table([*headers, "OVERRIDE", "NOTES"], rows):
            io.out(line)
    elif view.key is not None:
        io.out(printable(f"no key {view.key} on {limit['name']}: no run has used it and no operator has sized it"))
    elif view.search:
        io.out(printable(f"no key of {limit['name']} contains {view.search}"))
    else:
        io.out("no keys yet: no run has acquired this limit with a key")
    if view.more_keys:
        io.out(f"… and {view.more_keys} more key{'s' if view.more_keys != 1 else ''}")
    if view.key is None and not view.search:
        io.out()
        share = view.no_key.get("fair_share") if fair else None
        note = f", fair share {_share(share)} (weight 1)" if share is not None else ""
        if share is not None and view.no_key.get("pass") is not None:
            note += f", pass {_turns(view.no_key.get('pass'))}"
        io.out(f"without a key: {_pool_figures(view.no_key)}{note}")
