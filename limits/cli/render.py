"""What the verbs print: aligned tables and JSON, on streams that may be Django's OutputWrapper.

Every user-supplied value in human-readable output goes through `printable()`
(limits.printable); JSON escapes control characters itself.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from limits.cli.backend import SlotsView
from limits.durations import format_duration
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
