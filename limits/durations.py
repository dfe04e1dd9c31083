"""Durations as users write them ('90s', '45m') and as the box stores them (milliseconds).

Text always needs a unit: '45' is refused with a message naming the units (a user typing a bare
number into a max-hold field means seconds or made a mistake, never milliseconds). Only a Python
or JSON int is a number of milliseconds, as the workspace config and the API document it."""

from __future__ import annotations

import re

MS_PER_UNIT = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DURATION_MS = 30 * MS_PER_UNIT["d"]
_DURATION_RE = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)")  # ASCII digits only: '٣m' is not a duration
_BARE_NUMBER_RE = re.compile(r"[+]?([0-9]{1,12})")
_NEGATIVE_RE = re.compile(r"-[0-9]{1,12}(ms|s|m|h|d)?")

DURATION_HELP = "a duration with a unit, such as '500ms', '90s', '45m', '2h' or '30d', more than 0 and at most 30 days"
NEEDS_A_UNIT = "{value!r} needs a unit: {number}s, {number}m, {number}h"


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
            raise DurationError(_text_error(value))
        ms = int(match[1]) * MS_PER_UNIT[match[2]]
    else:
        ms = value
    if ms <= 0:
        raise DurationError(f"must be more than 0 ({DURATION_HELP})")
    if maximum is not None and ms > maximum:
        raise DurationError(f"must be at most 30 days ({DURATION_HELP})")
    return ms


def needs_a_unit(value: str) -> str | None:
    """The message for a bare number typed as a duration ('45'), or None for anything else."""
    bare = _BARE_NUMBER_RE.fullmatch(value.strip())
    if bare is None or int(bare[1]) == 0:
        return None
    return NEEDS_A_UNIT.format(value=value.strip(), number=int(bare[1]))


def _text_error(value: str) -> str:
    if (message := needs_a_unit(value)) is not None:
        return message
    if _NEGATIVE_RE.fullmatch(value.strip()) or _BARE_NUMBER_RE.fullmatch(value.strip()):
        return f"must be more than 0, not {value.strip()!r} ({DURATION_HELP})"
    return f"{value!r} is not {DURATION_HELP}"


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
