"""Small display filters for the Studio Limits screen."""

from __future__ import annotations

import re
from datetime import datetime

from django import template

from limits.durations import format_duration
from limits.models import AuditEvent, Limit
from limits.printable import printable as printable_text
from stackbone.plumbing import clock as box_clock

register = template.Library()

_LEADING_MS = re.compile(r"^(\d+)(.*)$")
_MAX_HOLD_MS = re.compile(r"max hold (\d+) ms")


@register.filter
def duration(ms: int | None) -> str:
    """Milliseconds as '44m 10s'."""
    return "" if ms is None else format_duration(int(ms))


@register.filter
def time_until(moment: datetime | None) -> str:
    """'12m 5s' until `moment`, or '' once it has passed."""
    if moment is None:
        return ""
    left = int((moment - box_clock.display_now()).total_seconds() * 1000)
    return format_duration(left) if left > 0 else ""


@register.filter
def time_since(moment: datetime | None) -> str:
    if moment is None:
        return ""
    passed = int((box_clock.display_now() - moment).total_seconds() * 1000)
    return format_duration(passed) if passed >= 1000 else "just now"


@register.filter
def percent_used(limit: Limit) -> int:
    """Busy + reserved as a share of capacity, for the bar (capped at 100: lowering capacity
    below what is held leaves the bar full, and the figures say by how much)."""
    if limit.capacity <= 0:
        return 100
    return min(round(100 * limit.in_use / limit.capacity), 100)


@register.filter
def audit_value(value: str, event: AuditEvent) -> str:
    """Max-hold values are stored in milliseconds; show them as durations."""
    if event.action == AuditEvent.Action.SYNC:
        return _MAX_HOLD_MS.sub(lambda match: "max hold " + format_duration(int(match[1])), value)
    if event.action != AuditEvent.Action.MAX_HOLD or not value:
        return value
    match = _LEADING_MS.match(value)
    if match is None:
        return value
    return format_duration(int(match[1])) + match[2]


@register.filter
def actor_name(actor: str) -> str:
    return actor.removeprefix("user:")


@register.filter
def printable(value: object, mode: str = "") -> str:
    """User-supplied text (a label, a run's input or error) with control and bidirectional-override
    characters shown as escapes (`\\u202e`), so a right-to-left override cannot reverse what
    follows it (limits.printable). `|printable:"lines"` keeps newlines and tabs, for <pre> blocks.
    The result is still autoescaped as HTML."""
    return printable_text("" if value is None else value, lines=mode == "lines")
