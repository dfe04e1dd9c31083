"""What starting, listing and cancelling runs take and answer, without Django: a run's input as
typed (`stackbone runs start --input`, Studio's Start form) or sent (`POST /api/runs/`), the runs
of a batch start (the API's `runs`, `stackbone runs start --from`), the size of a list, and the one
error type with its messages. limits.runs.listing applies them on this
installation; `stackbone runs --agent` checks the input here before it asks another one (its
API checks it again), so it needs no local database or settings.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_LIST_SIZE = 20
MAX_LIST_SIZE = 1000
INPUT_MAX_LENGTH = 64 * 1024
# Runs in one batch start. Under bounds a batch takes its acquisitions one after the other in one
# statement and its cost per run grows with it (docs/workflows.md: 1.7 ms a run at 100, 10 ms at
# 1,000), so a larger batch would hold one request for seconds: send several.
MAX_BATCH_SIZE = 500
BATCH_RUN_FIELDS = ("input", "key")
FINISHED_STATUSES = ("completed", "failed", "cancelled", "skipped", "replaced")  # stackbone.runs.models

# Messages (tests assert on them). Each error names its field.
BAD_JSON = "input is not valid JSON: {error}"
NOT_AN_OBJECT = "input must be a JSON object ({{...}}), not {kind}"
NOT_TEXT = "input must be UTF-8 text"
TOO_DEEP = "input is nested too deeply"
INPUT_TOO_LONG = "input must be at most {limit} characters of JSON, not {length}"
# A batch's messages name the run by its index: `runs[2]: ...`, field `runs[2].input`.
NOT_A_BATCH = 'runs must be a list of runs, each {{"input": {{...}}, "key": "K"}}, not {kind}'
EMPTY_BATCH = "runs must hold at least one run"
BATCH_TOO_BIG = "runs must hold at most {limit} runs, not {count}: start them in batches of {limit}"
NOT_A_BATCH_RUN = 'runs[{index}] must be a JSON object {{"input": {{...}}, "key": "K"}}, not {kind}'
UNKNOWN_RUN_FIELD = "runs[{index}]: unknown field {name!r}: a run of a batch takes input and key"
KEY_NOT_TEXT = "runs[{index}]: key must be a string, or null for none"
# The `reason` of a cancel's {"cancelled": false}: no such run, or it had finished already.
UNKNOWN = "unknown"
FINISHED = "already finished"


class RunsError(Exception):
    """A start or a filter that cannot be done as asked: the message names the field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def parse_input(text: str | None) -> dict[str, Any]:
    """A run's input as typed: a JSON object (an empty text is `{}`)."""
    if text is None or not text.strip():
        return {}
    if not _is_utf8(text):  # a non-UTF-8 argument arrives with lone surrogates: no database stores them
        raise RunsError(NOT_TEXT, "input")
    if len(text) > INPUT_MAX_LENGTH:
        raise RunsError(INPUT_TOO_LONG.format(limit=INPUT_MAX_LENGTH, length=len(text)), "input")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise RunsError(BAD_JSON.format(error=error), "input") from None
    except RecursionError:  # json's parser recurses: a few thousand nested [ fit in the size limit
        raise RunsError(TOO_DEEP, "input") from None
    if not isinstance(value, dict):
        raise RunsError(NOT_AN_OBJECT.format(kind=_json_kind(value)), "input")
    return value


def check_input(value: object) -> dict[str, Any]:
    """A run's input as sent already parsed (the API's body): a JSON object of at most
    INPUT_MAX_LENGTH characters as compact JSON (parse_input's limit on the typed text). What
    no database stores (NaN, NUL, a lone surrogate) start_run refuses itself, naming the input."""
    if not isinstance(value, dict):
        raise RunsError(NOT_AN_OBJECT.format(kind=_json_kind(value)), "input")
    try:
        length = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except RecursionError:
        raise RunsError(TOO_DEEP, "input") from None
    except (TypeError, ValueError):
        return value  # not JSON at all: start_run says why
    if length > INPUT_MAX_LENGTH:
        raise RunsError(INPUT_TOO_LONG.format(limit=INPUT_MAX_LENGTH, length=length), "input")
    return value


def batch_runs(value: object) -> list[tuple[dict[str, Any], str | None]]:
    """A batch's runs as sent: a list of 1 to MAX_BATCH_SIZE runs (batch_run each), in order."""
    if not isinstance(value, list):
        raise RunsError(NOT_A_BATCH.format(kind=_json_kind(value)), "runs")
    if not value:
        raise RunsError(EMPTY_BATCH, "runs")
    if len(value) > MAX_BATCH_SIZE:
        raise RunsError(BATCH_TOO_BIG.format(limit=MAX_BATCH_SIZE, count=len(value)), "runs")
    return [batch_run(run, index) for index, run in enumerate(value)]


def batch_run(value: object, index: int) -> tuple[dict[str, Any], str | None]:
    """One run of a batch: `{"input": {...}, "key": "K"}`, both optional (`{}`, no key); its input
    checked as a single start's (check_input), its key's type here (its value on the installation,
    as a single start's). A refusal names the run's index: `runs[2]: ...`, field `runs[2].input`."""
    where = f"runs[{index}]"
    if not isinstance(value, dict):
        raise RunsError(NOT_A_BATCH_RUN.format(index=index, kind=_json_kind(value)), where)
    for name in value:
        if name not in BATCH_RUN_FIELDS:
            raise RunsError(UNKNOWN_RUN_FIELD.format(index=index, name=name), f"{where}.{name}")
    key = value.get("key")
    if key is not None and not isinstance(key, str):
        raise RunsError(KEY_NOT_TEXT.format(index=index), f"{where}.key")
    try:
        input = check_input(value.get("input", {}))
    except RunsError as error:
        raise RunsError(f"{where}: {error.message}", f"{where}.input") from None
    return input, key


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if value is None:
        return "null"
    return "a number"
