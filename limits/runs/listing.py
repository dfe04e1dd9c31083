"""Runs as the Runs screen (limits.runs.screen), `stackbone runs` (limits.cli.runs) and the JSON
API (limits.runs.api, /api/runs/) act on them: the workflows one can start, starting and
cancelling a run with the checks they all share, and the answers the CLI's --json and the API both
print (run_summary, run_details, *_answer). A page of runs (RunFilter, runs_page, search_matches)
is limits.runs.pages' (issue 48), and is named here too; a run's input, RunsError and their
messages live in limits.runs.values (no Django, for `stackbone runs --agent`); RunsError and
parse_input are named here too, as they always were.
"""

from __future__ import annotations

import datetime as dt
import inspect
from typing import Any

from limits.config import BOX_NAME, check_key
from limits.engine.results import REASONS
from limits.runs import bounds as run_bounds

# A page of runs: limits.runs.pages' (each name handed on, as this module had it).
from limits.runs.pages import BAD_STATUS as BAD_STATUS
from limits.runs.pages import FINISHED_STATUSES as FINISHED_STATUSES
from limits.runs.pages import RUNS_PER_PAGE as RUNS_PER_PAGE
from limits.runs.pages import SEARCH_MATCHES as SEARCH_MATCHES
from limits.runs.pages import SEARCH_MAX_LENGTH as SEARCH_MAX_LENGTH
from limits.runs.pages import SEARCH_SCANNED as SEARCH_SCANNED
from limits.runs.pages import STATUSES as STATUSES
from limits.runs.pages import WAITING_AS_LIST as WAITING_AS_LIST
from limits.runs.pages import Cursor as Cursor
from limits.runs.pages import Key as Key
from limits.runs.pages import Matches as Matches
from limits.runs.pages import RunFilter as RunFilter
from limits.runs.pages import RunPage as RunPage
from limits.runs.pages import RunRow as RunRow
from limits.runs.pages import _first as _first
from limits.runs.pages import _key_parts as _key_parts
from limits.runs.pages import _live_under_key as _live_under_key
from limits.runs.pages import _runs as _runs
from limits.runs.pages import _taken_under_key as _taken_under_key
from limits.runs.pages import _under_key as _under_key
from limits.runs.pages import _waiting_for as _waiting_for
from limits.runs.pages import _window as _window
from limits.runs.pages import _with_limits as _with_limits
from limits.runs.pages import limit_names as limit_names
from limits.runs.pages import run_row as run_row
from limits.runs.pages import run_rows as run_rows
from limits.runs.pages import runs as runs
from limits.runs.pages import runs_page as runs_page
from limits.runs.pages import search_matches as search_matches
from limits.runs.selectors import deferred_start, get_run
from limits.runs.start import start_run
from limits.runs.values import FINISHED, check_input
from limits.runs.values import RunsError as RunsError
from limits.runs.values import parse_input as parse_input
from limits.services import why_waiting
from stackbone.runs import runtime
from stackbone.runs.models import Run

# Messages (tests assert on them). Each error names its field. The input's are limits.runs.values'.
UNKNOWN_WORKFLOW = "unknown workflow {name!r} (known: {known})"
NO_WORKFLOWS = "none: no module in STACKBONE_WORKFLOWS registers one"
KEY_WITHOUT_BOUNDS = (
    "key: workflow {name!r} caps no runs (no @workflow(concurrency=...) or limits=...; the box's run "
    "concurrency takes no key), so a concurrency key means nothing for it; put a key its body reads into "
    "the input instead (a key its body takes a slot under finds the run by that key)"
)
UNKNOWN_RUN = "unknown run {run_id!r}"


# --- workflows ----------------------------------------------------------------------------------


def workflow_names() -> list[str]:
    """The workflows this installation can start: every @workflow in the modules
    settings.STACKBONE_WORKFLOWS names (imported on first use), sorted."""
    return runtime.workflow_names()


HINT_MAX_LENGTH = 600


def workflow_hints() -> dict[str, str]:
    """Each workflow's docstring (its function's, cleaned), for the Start form: what it does and
    the input it reads. "" for a workflow without one; cut at HINT_MAX_LENGTH characters."""
    hints = {}
    for name in workflow_names():
        text = inspect.getdoc(runtime.get_workflow(name).fn) or ""
        hints[name] = text if len(text) <= HINT_MAX_LENGTH else text[: HINT_MAX_LENGTH - 1] + "…"
    return hints


# --- starting and cancelling --------------------------------------------------------------------


def check_start(workflow: str, key: str | None, limits: list[str] | None = None, on_full: object = None) -> str | None:
    """Refuse, before anything is created, an unknown workflow, a bad `on_full` (check_on_full),
    bad `limits` (the named limits this run holds instead of the workflow's: SPEC 11.1), a bad
    key, or a key for a run without bounds of its own (start_run would drop it without a word;
    under the box's run concurrency, whose pools are the workflows', it would keep it and limit
    nothing by it). Returns the key."""
    names = workflow_names()
    if workflow not in names:
        known = ", ".join(names) if names else NO_WORKFLOWS
        raise RunsError(UNKNOWN_WORKFLOW.format(name=workflow, known=known), "workflow")
    check_on_full(workflow, on_full)
    bounds: list[str] | None = None
    if limits is not None:
        try:
            bounds, _key = run_bounds.bounds_for_run(workflow, limits)
        except runtime.WorkflowError as error:
            raise RunsError(str(error), "limits") from None
    if key is None or key == "":
        return None
    try:
        check_key(key)
    except ValueError as error:
        raise RunsError(str(error), "key") from None
    if bounds is None:
        try:
            bounds, _key = run_bounds.bounds_for_run(workflow)
        except runtime.WorkflowError as error:
            raise RunsError(str(error), "workflow") from None
    if not [name for name in bounds if name != BOX_NAME]:
        raise RunsError(KEY_WITHOUT_BOUNDS.format(name=workflow), "key")
    return key


def check_on_full(workflow: str, on_full: object) -> str | None:
    """A start's own `on_full` (SPEC 14.1: what the run does if its bounds cannot take it at once),
    checked as the public start_run checks it (limits.runs.bounds.check_start_on_full: whatever a
    run's start accepts in this release), or a RunsError naming `on_full`. None: the bounds' own."""
    if on_full is None:
        return None
    try:
        return run_bounds.check_start_on_full(workflow, on_full)
    except runtime.WorkflowError as error:
        raise RunsError(str(error), "on_full") from None


def start(
    workflow: str,
    input: dict[str, Any],
    key: str | None = None,
    limits: list[str] | None = None,
    on_full: object = None,
) -> Run:
    """Start a run through the public limits.runs.start_run, after check_start. A refusal
    of start_run itself (a bound's limit no longer declared) is a RunsError, nothing created.
    A run its bounds could not take at once under `on_full` (or theirs) comes back ended, as
    start_run returns it ('skipped', with its end_reason and end_limit: SPEC 14.2, 14.5)."""
    key = check_start(workflow, key, limits, on_full)
    try:
        return start_run(workflow, input, concurrency_key=key, limits=limits, on_full=check_on_full(workflow, on_full))
    except runtime.WorkflowError as error:
        if error.field == "on_full":
            raise RunsError(str(error), "on_full") from None
        field = "input" if "input" in str(error) else "limits" if limits else "workflow"
        raise RunsError(str(error), field) from None


def cancel(run_id: str) -> tuple[bool, Run]:
    """The one cancel path of every surface (a run's page and the Runs screen, through
    limits.runs.views.cancel_or_404; `stackbone runs cancel`; /api/runs/<id>/cancel/): the run
    layer's cancel_run (limits.runs.cancel_run), then (cancelled?, the run as it is now). An id
    no run has is a RunsError (field 'run'), nothing changed."""
    run = get_run(run_id)
    if run is None:
        raise RunsError(UNKNOWN_RUN.format(run_id=run_id), "run")
    cancelled = runtime.cancel_run(run.id)
    run.refresh_from_db()
    return cancelled, run


# --- JSON shapes (the CLI's --json) ---------------------------------------------------------------


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def run_summary(row: RunRow) -> dict[str, Any]:
    """A run as `stackbone runs list --json` prints it. `key` is its concurrency key, "" for a run
    without one; `keys` that, the keys it took slots under (kept after it ends), and the keys of
    the slots it holds and the queues it waits in;
    `reference` the value of its input's reference field ("" for none)."""
    run = row.run
    return {
        "id": run.id,
        "workflow": run.workflow,
        "status": run.status,
        "key": run.concurrency_key,
        "keys": row.keys,
        "reference": run.reference,
        "suspended": run.suspended,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "duration_ms": row.duration_ms,
        "waiting_for": [entry.limit.name for entry in row.waits],
        "holding": [slot.limit.name for slot in row.holds],
        "labels": row.labels,
        # SPEC 14.6: why a run ended skipped or replaced (or was cancelled by another run), "" else
        "end_reason": run.end_reason or "",
        "end_reason_text": REASONS.get(run.end_reason or "", run.end_reason or ""),
        "end_limit": run.end_limit or "",
        "caused_by": run.caused_by or "",
    }


def run_details(row: RunRow) -> dict[str, Any]:
    """A run as `stackbone runs show --json` prints it: the summary, its input, output, error,
    the waits (each with its `reason`, SPEC 6.5) and slots in full, and its steps."""
    run = row.run
    steps = list(run.step_records.order_by("seq"))
    reasons = why_waiting(row.waits)  # SPEC 6.5: why each wait is not granted yet
    return {
        **run_summary(row),
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "starts_at": _iso(deferred_start(run)),  # a deferred run's start time (SPEC 15.4), else null
        "waits": [
            {
                "limit": entry.limit.name,
                "label": entry.label,
                "key": entry.key,
                "waiting_since": _iso(entry.enqueued_at),
                "deadline": _iso(entry.deadline),
                "reason": reasons[entry.id].as_json() if entry.id in reasons else None,
            }
            for entry in row.waits
        ],
        "slots": [
            {
                "id": slot.id,
                "limit": slot.limit.name,
                "state": slot.state,
                "label": slot.label,
                "key": slot.key,
                "granted_at": _iso(slot.granted_at),
            }
            for slot in row.holds
        ],
        "steps": [
            {
                "seq": step.seq,
                "name": step.name,
                "kind": step.kind,
                "status": step.status,
                "error": step.error,
                "started_at": _iso(step.started_at),
                "finished_at": _iso(step.finished_at),
            }
            for step in steps
        ],
    }


# --- the answers of `stackbone runs ... --json` and /api/runs/ (the same dicts) --------------------


def start_answer(
    workflow: str, input: object, key: str | None = None, limits: list[str] | None = None, on_full: object = None
) -> dict[str, Any]:
    """Start a run (start, with the input checked: check_input, and its on_full: check_on_full)
    and answer its summary (a skipped run's with its end_reason, end_limit)."""
    return run_summary(run_row(start(workflow, check_input(input), key, limits, on_full)))


def list_answer(run_filter: RunFilter, *, size: int, older_than: str | None = None) -> dict[str, Any]:
    """`{"runs": [summary, ...], "more": bool}`: the newest `size` runs that match, or with
    `older_than` (a run's id) the runs created before that run; `more` says whether older runs
    match."""
    cursor = None
    if older_than is not None:
        run = get_run(older_than)
        if run is None:
            raise RunsError(UNKNOWN_RUN.format(run_id=older_than), "before")
        cursor = Cursor.of(run)
    page = runs_page(run_filter, older_than=cursor, size=size)
    return {"runs": [run_summary(row) for row in page.rows], "more": page.older is not None}


def show_answer(run_id: str) -> dict[str, Any]:
    """One run's details (run_details); an unknown run is a RunsError (field 'run')."""
    run = get_run(run_id)
    if run is None:
        raise RunsError(UNKNOWN_RUN.format(run_id=run_id), "run")
    return run_details(run_row(run))


def cancel_answer(run_id: str) -> dict[str, Any]:
    """Cancel a run: `{"cancelled": true, "id", "status"}`, or for a run that had finished
    `{"cancelled": false, "id", "status", "reason": "already finished"}` (nothing changed). An
    unknown run is a RunsError (field 'run')."""
    cancelled, run = cancel(run_id)
    answer: dict[str, Any] = {"cancelled": cancelled, "id": run.id, "status": run.status}
    if not cancelled:
        answer["reason"] = FINISHED
    return answer
