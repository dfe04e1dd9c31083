"""The JSON API for runs, mounted at /api/runs/ beside /api/limits/: what `stackbone runs --agent`
talks to. Auth, errors and bodies are limits.api.requests': a bearer token only (never the session, so no
CSRF exposure), `{"error": ..., "field": ...}` with a 4xx. Reads need a token of any active user;
starting and cancelling also need `studio.change_run` ("Can change run"), the permission Studio's
Start form and Cancel buttons need.

    GET  /api/runs/?status=&workflow=&key=&waiting_for=&search=&size=20&before=<run id>
         {"runs": [run, ...], "more": bool}: newest first, the filters of `stackbone runs list`;
         `before` pages on: the runs created before that run
    POST /api/runs/  {"workflow": "place_call", "input": {...}, "key": "acme", "limits": ["voice-calls"],
                      "on_full": "skip"}
         201, the run; only `workflow` is required (`key`, `limits`, `on_full`: null or left out for
         none). `on_full` is start_run's (SPEC 14.1): what the run does if its bounds cannot take it
         at once; a run that ends at once says so in its `status` ('skipped'), `end_reason`, `end_limit`
    POST /api/runs/  {"workflow": "sync_tenant", "runs": [{"input": {...}, "key": "acme"}, ...], "limits": [...],
                      "on_full": "skip"}
         a batch (limits.runs.start_runs): 201, {"runs": [run, ...]} in the order given, started
         in that order in one transaction; 1 to MAX_BATCH_SIZE runs, each's `input` and `key` as a
         single start's, `on_full` for every run (each judged in order); a bad one refuses the
         batch, naming it (`runs[2].input`), nothing written
    GET  /api/runs/<run id>/          the run with its input, output, error, waits, slots and steps
    POST /api/runs/<run id>/cancel/   {"cancelled": true, "id", "status"}, or for a finished run
         {"cancelled": false, "id", "status", "reason": "already finished"} (nothing changed)

A `run` is limits.runs.listing.run_summary (the keys of `stackbone runs list --json`), a run's details
listing.run_details (`stackbone runs show --json`): the API and the CLI print the same dicts.
A bad value is a 400 naming its field, and a refused start creates nothing; an unknown run is a
404 with field `run`.

It sits in the limits app beside Studio's screens: it reads runs through limits.runs.listing, which
knows both the run layer and the limits (tests/test_layers.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from limits.api.requests import ApiError, ApiRequest, json_body, token_auth
from limits.config import check_key
from limits.runs import listing, pages
from limits.runs.start import start_runs
from limits.runs.values import DEFAULT_LIST_SIZE, MAX_LIST_SIZE, RunsError, batch_runs
from stackbone.plumbing.access import CANCEL_RUN
from stackbone.runs.runtime import WorkflowError

OPERATE_RUN = CANCEL_RUN  # as in Studio (limits.runs.screen): one permission starts and cancels runs
START_FIELDS = ("workflow", "input", "key", "limits", "on_full")
BATCH_FIELDS = ("workflow", "runs", "limits", "on_full")  # a batch: `runs` holds each run's input and key
FILTERS = ("status", "workflow", "waiting_for", "key", "search")  # `stackbone runs list`'s, by RunFilter's names

NO_PERMISSION = "user {username!r} may not start or cancel runs (needs the studio.change_run permission)"
NO_WORKFLOW = "workflow is required: the name of a registered workflow"
NOT_TEXT = "{field} must be a string"
UNKNOWN_FIELD = (
    "unknown field {name!r}: a start takes " + ", ".join(START_FIELDS) + "; a batch " + ", ".join(BATCH_FIELDS)
)
NOT_IN_A_BATCH = '{name} goes in each run of a batch: {{"runs": [{{"input": {{...}}, "key": "K"}}, ...]}}'
BAD_SIZE = f"size must be a whole number from 1 to {MAX_LIST_SIZE}"
LIMITS_NOT_A_LIST = "limits must be a list of limit names, or null for the workflow's own"

type ApiView = Callable[..., JsonResponse]


def runs_api(*, operate: bool = False) -> Callable[[ApiView], ApiView]:
    """limits.api's token auth, and for a write the run permission; listing's RunsError is the
    JSON 400 naming its field (404 for an unknown run)."""

    def decorator(view: ApiView) -> ApiView:
        @functools.wraps(view)
        def checked(request: ApiRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            if operate and not request.api_user.has_perm(OPERATE_RUN):
                raise ApiError(403, NO_PERMISSION.format(username=request.api_user.get_username()))
            try:
                return view(request, *args, **kwargs)
            except listing.RunsError as error:
                status = 404 if error.field == "run" else 400
                raise ApiError(status, error.message, field=error.field) from None

        return csrf_exempt(token_auth()(checked))

    return decorator


@csrf_exempt
@require_http_methods(["GET", "POST"])
def runs(request: ApiRequest) -> JsonResponse:
    """GET lists (any token), POST starts (the run permission)."""
    if request.method == "POST":
        return start(request)
    return run_list_view(request)


@runs_api()
def run_list_view(request: ApiRequest) -> JsonResponse:
    """The runs, newest first: `stackbone runs list` (its --rows is `size`, its --waiting-for
    `waiting_for`)."""
    text = request.GET.get("size", str(DEFAULT_LIST_SIZE))
    if not text.isascii() or not text.isdigit() or len(text) > 10 or not 1 <= int(text) <= MAX_LIST_SIZE:
        raise ApiError(400, BAD_SIZE, field="size")
    # A bad status or key is listing's RunsError, naming it (a NUL anywhere in the query is
    # refused before any view: stackbone.plumbing.middleware).
    run_filter = listing.RunFilter(**{name: request.GET.get(name, "") for name in FILTERS})
    answer = listing.list_answer(run_filter, size=int(text), older_than=request.GET.get("before") or None)
    return JsonResponse(answer)


@runs_api(operate=True)
def start(request: ApiRequest) -> JsonResponse:
    """Start a run: `stackbone runs start` (its --input, --key, --limits, --on-full); with `runs`,
    a batch (`stackbone runs start --from`). Checked in full before anything is created."""
    body = json_body(request)
    batch = "runs" in body
    for name in body:
        if name not in (BATCH_FIELDS if batch else START_FIELDS):
            message = NOT_IN_A_BATCH if batch and name in START_FIELDS else UNKNOWN_FIELD
            raise ApiError(400, message.format(name=name), field=name)
    if "workflow" not in body:
        raise ApiError(400, NO_WORKFLOW, field="workflow")
    workflow, key, limits, on_full = body["workflow"], body.get("key"), body.get("limits"), body.get("on_full")
    if not isinstance(workflow, str):
        raise ApiError(400, NOT_TEXT.format(field="workflow"), field="workflow")
    if key is not None and not isinstance(key, str):
        raise ApiError(400, NOT_TEXT.format(field="key"), field="key")
    if limits is not None and (not isinstance(limits, list) or not all(isinstance(name, str) for name in limits)):
        raise ApiError(400, LIMITS_NOT_A_LIST, field="limits")
    if batch:
        return JsonResponse(start_batch_answer(workflow, body["runs"], limits, on_full), status=201)
    answer = listing.start_answer(workflow, body.get("input", {}), key, limits, on_full)
    return JsonResponse(answer, status=201)


def start_batch_answer(
    workflow: str, runs: object, limits: list[str] | None = None, on_full: object = None
) -> dict[str, Any]:
    """Start a batch through the public limits.runs.start_runs (one transaction, trigger order):
    `{"runs": [summary, ...]}` in the order given. `runs` as sent (values.batch_runs); each
    run checked as a single start is (listing.check_start), a refusal a RunsError naming the
    run (`runs[2].key`), nothing created; `on_full` (listing.check_on_full) for every run: a run
    the batch's earlier runs filled its bounds for may come back 'skipped'. The API's batch and
    `stackbone runs start --from`."""
    checked = batch_runs(runs)
    keys = [key or None for _, key in checked]  # "" is no key, as in a single start
    for index, key in enumerate(keys):
        if key is not None:
            try:
                check_key(key)
            except ValueError as error:
                raise RunsError(f"runs[{index}]: {error}", f"runs[{index}].key") from None
    first = next((index for index, key in enumerate(keys) if key is not None), None)
    try:  # the workflow, the limits, and a key for a run without bounds (one key says it for all)
        listing.check_start(workflow, None if first is None else keys[first], limits, on_full)
    except RunsError as error:
        if error.field != "key" or first is None:
            raise
        raise RunsError(f"runs[{first}]: {error.message}", f"runs[{first}].key") from None
    try:
        started = start_runs(
            workflow,
            [input for input, _ in checked],
            None if first is None else keys,
            limits,
            on_full=listing.check_on_full(workflow, on_full),
        )
    except WorkflowError as error:
        raise _batch_refusal(error, limits) from None
    # The waits, slots and keys of the whole batch in three queries (run_row would read them run by run).
    return {"runs": [listing.run_summary(row) for row in pages.run_rows(started)]}


def _batch_refusal(error: WorkflowError, limits: list[str] | None) -> RunsError:
    """start_runs' refusal, naming the run as the API does: its `inputs[2]` is `runs[2].input`,
    its `concurrency_keys[2]` `runs[2].key` (a refusal of the whole batch names limits or workflow,
    as listing.start does)."""
    if error.field == "on_full":
        return RunsError(str(error), "on_full")
    found = re.fullmatch(r"(inputs|concurrency_keys)\[(\d+)\]", error.field or "")
    if found is None:
        return RunsError(str(error), "limits" if limits else "workflow")
    index, name = found[2], "input" if found[1] == "inputs" else "key"
    text = str(error).replace(found[0], name, 1)
    return RunsError(f"runs[{index}]: {text}", f"runs[{index}].{name}")


@require_GET
@runs_api()
def run_detail(request: ApiRequest, run_id: str) -> JsonResponse:
    """One run: `stackbone runs show --json`."""
    return JsonResponse(listing.show_answer(run_id))


@require_POST
@runs_api(operate=True)
def cancel(request: ApiRequest, run_id: str) -> JsonResponse:
    """Cancel a run (the run page's Cancel): it leaves every queue and frees any reservation.
    The body is empty or `{}`. A finished run is `"cancelled": false` with a 200, like a release
    of a slot already free."""
    json_body(request)
    return JsonResponse(listing.cancel_answer(run_id))
