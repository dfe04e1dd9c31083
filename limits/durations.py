"""Durations as users write them ('90s', '45m', 500) and as the box stores them (milliseconds)."""

from __future__ import annotations

import re

MS_PER_UNIT = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DURATION_MS = 30 * MS_PER_UNIT["d"]
_DURATION_RE = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)")  # ASCII digits only: '٣m' is not a duration

DURATION_HELP = (
    "a duration such as '500ms', '90s', '45m', '2h', '30d' or a whole number of milliseconds, "
    "more than 0 and at most 30 days"
)


class DurationError(ValueError):
    pass


def parse_duration(value: object, *, maximum: int | None = MAX_DURATION_MS) -> int:
    """Return `value` in milliseconds, or raise DurationError saying what is allowed. `maximum`
    None lifts the 30-day cap (for settings such as the history retention)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise DurationError(f"must be {DURATION_HELP}")
    if isinstance(value, str):
        match = _DURATION_RE.fullmatch(value.strip())
        if match is None:
            raise DurationError(f"{value!r} is not {DURATION_HELP}")
        ms = int(match[1]) * MS_PER_UNIT[match[2]]
    else:
        ms = value
    if ms <= 0:
        raise DurationError(f"must be more than 0 ({DURATION_HELP})")
    if maximum is not None and ms > maximum:
        raise DurationError(f"must be at most 30 days ({DURATION_HELP})")
    return ms


def format_duration(ms: int) -> str:
    """A short human form: '44m 10s', '2h', '500ms', '30d'."""
    if ms < 1_000:
        return f"{ms}ms"
    seconds = ms // 1_000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2])
