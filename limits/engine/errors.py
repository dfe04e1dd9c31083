"""The engine's one expected failure, its messages, and the checks of what callers pass in."""

from __future__ import annotations

from limits import config
from limits.config import check_key as check_key_text
from limits.durations import DurationError, parse_duration
from limits.models import LABEL_MAX_LENGTH, REQUEST_MAX_LENGTH, RUN_ID_MAX_LENGTH, is_storable_text

UNKNOWN_LIMIT = "unknown limit {name!r}"
UNDECLARED_LIMIT = "limit {name!r} is no longer declared in the workspace, so it cannot be acquired"
BAD_LABEL = f"label must be a string of at most {LABEL_MAX_LENGTH} characters (no NUL characters)"
BAD_RUN_ID = f"run id must be a non-empty string of at most {RUN_ID_MAX_LENGTH} characters (no NUL characters)"
BAD_REQUEST = f"request must be a non-empty string of at most {REQUEST_MAX_LENGTH} characters (no NUL characters)"
BAD_CAPACITY = "capacity {error}"
BAD_MAX_HOLD = "max hold {error}"
BAD_TIMEOUT = "timeout {error}"
BAD_LIMITS = "limits must be a list of 1 to 3 distinct limit names"
BAD_PER_KEY = "per_key {error}"
BAD_ON_FULL = "on_full {error}"
BAD_MAX_WAITING = "{field} {error}"


class LimitsError(Exception):
    """An expected failure: the message says what was wrong, and nothing was changed."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def duration_ms(value: object, message: str, field_name: str) -> int:
    try:
        return parse_duration(value)
    except DurationError as error:
        raise LimitsError(message.format(error=error), field=field_name) from None


def check_label(label: object) -> str:
    if label is None:
        return ""
    if not is_storable_text(label) or len(label) > LABEL_MAX_LENGTH:
        raise LimitsError(BAD_LABEL, field="label")
    return label


def check_run_id(run_id: object) -> None:
    if not is_storable_text(run_id) or not run_id or len(run_id) > RUN_ID_MAX_LENGTH:
        raise LimitsError(BAD_RUN_ID, field="run_id")


def check_request(request: object) -> None:
    if not is_storable_text(request) or not request or len(request) > REQUEST_MAX_LENGTH:
        raise LimitsError(BAD_REQUEST, field="request")


def check_on_full(on_full: object) -> str | None:
    """An acquisition's own on_full (SPEC 14.1): None for its limits' own; a bad one is a
    LimitsError naming the field."""
    if on_full is None:
        return None
    try:
        return config.check_on_full(on_full)
    except ValueError as error:
        raise LimitsError(BAD_ON_FULL.format(error=error), field="on_full") from None


def check_key(key: object) -> str:
    """A concurrency key (SPEC 9.2); a bad one is a LimitsError naming the field."""
    try:
        return check_key_text(key)
    except ValueError as error:
        raise LimitsError(str(error), field="key") from None
