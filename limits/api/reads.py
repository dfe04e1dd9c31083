"""The JSON API's reads (GET /api/limits/...): the limits, one limit, its live slots, its queue
(in the order it is served, with each run's estimated wait and why it waits), its keys, one slot,
and the workers' report. Each needs a valid token (limits.api.requests)."""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from limits import eta, selectors, serializers, services, workers
from limits.api.requests import (
    UNKNOWN_SLOT,
    ApiError,
    ApiRequest,
    key_param,
    limit_named,
    page_answer,
    page_params,
    token_auth,
)
from limits.config import KEY_MAX_LENGTH
from limits.models import QueueEntry, Slot, is_storable_text

BAD_SEARCH = f"search must be text of at most {KEY_MAX_LENGTH} characters (no NUL characters)"
BAD_KIND = (
    "kind must be 'limit' (a limit of the workspace), 'workflow' (a workflow's own bound) "
    "or 'box' (the box's run concurrency)"
)


@csrf_exempt
@require_GET
@token_auth()
def limit_list(request: ApiRequest) -> JsonResponse:
    """Every limit, or with ?kind=limit|workflow only the limits of the workspace or only the
    workflows' own bounds."""
    kind = request.GET.get("kind", "")
    if "kind" in request.GET and kind not in selectors.KINDS:
        raise ApiError(400, BAD_KIND, field="kind")
    rows = list(selectors.limits(kind=kind))
    box_base = selectors.box_base(rows)
    return JsonResponse({"limits": [serializers.limit_summary(limit, box_base=box_base) for limit in rows]})


@csrf_exempt
@require_GET
@token_auth()
def limit_detail(request: ApiRequest, name: str) -> JsonResponse:
    limit = limit_named(name)
    box_base = selectors.box_base() if not limit.is_box else None
    return JsonResponse(serializers.limit_summary(limit, box_base=box_base))


@csrf_exempt
@require_GET
@token_auth()
def limit_slots(request: ApiRequest, name: str) -> JsonResponse:
    """Busy slots first, then reserved ones, each in grant order (with ?key=, only that key's);
    a page past the end is empty."""
    page, size = page_params(request)
    key = key_param(request)
    limit = limit_named(name)
    rows: list[Slot] = []
    if key is not None:
        keyed = serializers.key_slots_rows(limit, key, offset=(page - 1) * size, size=size)
        rows, total = keyed.items, keyed.total
    else:
        total = limit.in_use
        if (page - 1) * size < total:
            rows = selectors.live_slots_page(limit, number=page, size=size).items
    groups = serializers.slot_groups(rows)
    bound = limit.is_workflow_bound or limit.is_box  # held while a run executes: no expiry
    slots = [serializers.slot_summary(slot, groups, bound=bound) for slot in rows]
    return page_answer(limit, "slots", slots, page, size, total, {"key": key})


@csrf_exempt
@require_GET
@token_auth()
def limit_queue(request: ApiRequest, name: str) -> JsonResponse:
    """The queue in order; positions count from 1 at the head, across pages. With ?key=, only
    that key's waiting runs, and positions count within the key's queue."""
    page, size = page_params(request)
    key = key_param(request)
    limit = limit_named(name)
    offset = (page - 1) * size
    rows: list[QueueEntry] = []
    exact: int | None = None  # a fair limit's: positions past it are estimated (SPEC 13.7)
    walked: dict[int, str | None] | None = None  # a fair limit's: the key next (the first row's)
    if key is not None:
        keyed = serializers.key_queue_rows(limit, key, offset=offset, size=size)
        rows, total = keyed.items, keyed.total
    else:
        total = limit.waiting_count
        if offset < total:
            found = selectors.queue_page(limit, number=page, size=size)
            rows, exact = found.items, found.estimated_after
            walked = {limit.id: found.next_key} if exact is not None else None
    groups = serializers.entry_groups(rows)
    first = None if key is not None else offset + 1
    etas = selectors.queue_etas(limit, rows, first_place=first, key_offset=offset)
    reasons = services.why_waiting(rows, next_keys=walked)
    queue = [
        serializers.queue_entry_summary(
            entry,
            offset + index + 1,
            groups,
            eta_seconds=seconds,
            reason=reasons.get(entry.id),
            estimated=exact is not None and offset + index + 1 > exact,
        )
        for index, (entry, seconds) in enumerate(zip(rows, etas, strict=True))
    ]
    order = eta.FAIR_ORDER if limit.is_fair else eta.ARRIVAL_ORDER
    return page_answer(limit, "queue", queue, page, size, total, {"key": key, "order": order})


@csrf_exempt
@require_GET
@token_auth()
def limit_keys(request: ApiRequest, name: str) -> JsonResponse:
    """A limit's keys, busiest first (with ?key=, only that one; with ?search=, those that contain
    it, any case), and the pool of runs without a key (`no_key`); a page past the end is empty."""
    page, size = page_params(request)
    key = key_param(request)
    search = request.GET.get("search", "")
    if len(search) > KEY_MAX_LENGTH or not is_storable_text(search):
        raise ApiError(400, BAD_SEARCH, field="search")
    limit = limit_named(name)
    found = serializers.keys_rows(limit, key=key, search=search, offset=(page - 1) * size, size=size)
    weights = selectors.fair_weights(limit)  # one aggregate query on a fair limit, none on fifo
    rows = [serializers.key_summary(limit, row, weights) for row in found.items]
    extra: dict[str, object] = {
        "per_key": limit.per_key,
        "key": key,
        "search": search,
        "no_key": serializers.no_key_summary(limit, weights),
    }
    return page_answer(limit, "keys", rows, page, size, found.total, extra)


@csrf_exempt
@require_GET
@token_auth()
def slot_detail(request: ApiRequest, slot_id: str) -> JsonResponse:
    slot = selectors.get_slot(slot_id)
    if slot is None:
        raise ApiError(404, UNKNOWN_SLOT.format(slot_id=slot_id), field="slot_id")
    bound = slot.limit.is_workflow_bound or slot.limit.is_box
    summary = serializers.slot_summary(slot, serializers.slot_groups([slot]), bound=bound)
    return JsonResponse({**summary, "limit": slot.limit.name})


@csrf_exempt
@require_GET
@token_auth()
def workers_report(request: ApiRequest) -> JsonResponse:
    """The box's second ceiling, as `stackbone workers --json` prints it (limits.workers); the
    workers are asked at most every CACHE_SECONDS per web process, as for Studio's panel."""
    return JsonResponse(workers.report())
