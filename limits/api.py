"""The JSON API behind `stackbone limits --agent`, mounted at /api/limits/.

Auth is a bearer token only (`Authorization: Bearer <token>`, limits.tokens): session cookies
are never read, so a browser cannot be tricked into a write (no CSRF hole) and the views are
exempt from the CSRF middleware. Reads need a valid token of an active user; writes also need the
`limits.operate_limit` permission. Answers are JSON; errors are `{"error": ..., "field": ...}`
with 400 (bad value, `field` names it), 401 (no or bad token), 403 (no permission), 404
(unknown limit or slot, or no such path), 409 (forget refused as things stand), 413 (a body
over DATA_UPLOAD_MAX_MEMORY_SIZE) or 415 (a write whose body is not labelled application/json).
Writes go through limits.services with the actor `api:<username>`.

    GET  /api/limits/?kind=limit|workflow|box       {"limits": [limit, ...]}; kind: only the workspace's limits,
         only the workflows' own bounds (SPEC 11.5) or only the box; another kind is a 400 with field "kind"
    GET  /api/limits/<name>/                        limit
    GET  /api/limits/<name>/slots/?page=1&size=100  {"limit", "key", "slots", "page", "size", "total", "has_next",
         "now"}
    GET  /api/limits/<name>/queue/?page=1&size=100  {"limit", "key", "order", "queue", "page", ...}; positions
         count from 1 (both take &key=K: only that key's rows; queue positions then count within the key's
         queue); each row's eta_seconds is its estimated wait (limits.eta), null when unknown. On a fair
         limit ("order": "fair", else "arrival") the queue is in the order the grant will serve it (SPEC
         13.7): exact for the first `size` runs, estimated past them (each row's "position_estimated")
    GET  /api/limits/<name>/keys/?page=1&size=100   {"limit", "per_key", "key", "search", "keys", "no_key",
         "page", ...}; busiest first; &key=K: only that key; &search=S: keys containing S (any case)
    GET  /api/limits/slots/<slot_id>/               slot, with its "limit"
    POST /api/limits/slots/<slot_id>/release/       {"released": bool, "slot": slot as it was}
    POST /api/limits/<name>/capacity/  {"capacity": 30 | null}    {"old": 20, "limit": limit}
    POST /api/limits/<name>/max-hold/  {"max_hold": "1h" | 3600000 | null}  {"old": ms, "limit": limit}
    POST /api/limits/<name>/per-key/   {"value": 3 | null, "key": "tenant-1" (optional)}
         {"old": 3 | null, "limit": limit, "key": key | null}; without "key" the limit's per_key,
         with it that key's pool size; a bad value is a 400 with field "value"
    POST /api/limits/<name>/share/     {"value": "fifo" | "fair" | null}   {"old": "fifo", "limit": limit}:
         first come, first served or fair shares between keys (SPEC 13.5); null resets to the declared share
    POST /api/limits/<name>/on-full/   {"value": "wait" | "skip" | "replace" | null}   {"old": "wait", "limit": limit}:
         what an acquisition that cannot be granted at once does (SPEC 14.1); null resets to the declared one
    POST /api/limits/<name>/max-waiting/   {"value": 1-1000000 | null, "per_key": false | true}
         {"old": n | null, "limit": limit}: the queue's cap, or with per_key each key's (SPEC 14.5); null
         resets it to the declared one; a bad value is a 400 with field "value", a bad per_key "per_key"
    POST /api/limits/<name>/weight/    {"value": 1-100 | null, "key": "tenant-1"}
    POST /api/limits/<name>/min/       {"value": 0-capacity | null, "key": "tenant-1"}
         {"old": 1, "limit": limit, "key": key}: one key's weight or min on a fair limit (null resets:
         weight 1, min 0); a bad value is a 400 with field "value", a bad or missing key field "key"
    POST /api/limits/<name>/pause/     {} (or no body)   {"old": "running" | "paused", "limit": limit}: the
         limit grants nothing until resumed (SPEC 5.6); pausing a paused limit changes nothing
    POST /api/limits/<name>/resume/    {} (or no body)   {"old": "paused" | "running", "limit": limit}: its
         free capacity goes to the queue at once; resuming a running limit changes nothing
    POST /api/limits/<name>/forget/    {} (or no body)
         {"forgotten": true, "limit", "kind", "at", "actor", "removed": {...}}: a limit that left the
         config, with no slot in use and no run waiting, removed with its history (limits.forget);
         still declared, in use or waited for: 409 with field "limit", nothing changed
    GET  /api/limits/-/box/                         the box's run concurrency (SPEC 12): its limit row, with
         "base", "burst" and their declared values; 404 with field "limit" when none is declared
    POST /api/limits/-/box/   {"base": 12 | null, "burst": 1.5 | null} (either or both)
         {"old": {"base", "burst", "ceiling"}, "limit": the box}: overrides or resets (null) the base and
         burst (SPEC 12.5); a bad value is a 400 naming the field ("base", "burst"), nothing changed
    GET  /api/limits/-/workers/                     the Celery workers alive, the runs pending for one and
         the limits the workers bound (limits.workers.report, the keys of `stackbone workers --json`);
         under "-/" as in Studio: "<name>/" never takes a slash, so no limit's path is this one

A `limit` is serializers.limit_summary (the keys of `stackbone limits list --json`; its `kind` is
"limit", "workflow" or "box", and a workflow's bound and the box have null max hold; the box also
has `base` and `burst`, a workflow's bound `in_force` and `capped_by_box`; `paused` and
`paused_at` say whether and since when an operator paused it; `on_full`, `max_waiting`,
`max_waiting_per_key` with their declared values, and `skipped_count`, `refused_count`), a `key`
serializers.key_summary.
No key is null in JSON.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from limits import eta, selectors, serializers, services, workers
from limits.config import KEY_MAX_LENGTH, check_key
from limits.engine.operator_actions import NO_BOX
from limits.forget import forget_limit
from limits.models import Limit, QueueEntry, Slot, is_storable_text
from limits.tokens import user_for_token
from stackbone.plumbing import clock as box_clock

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
OPERATE_PERMISSION = "limits.operate_limit"

NO_TOKEN = "missing or invalid token: send `Authorization: Bearer <token>`"
NO_PERMISSION = "user {username!r} may not operate limits (needs the limits.operate_limit permission)"
BAD_BODY = "the body must be a JSON object"
BAD_CONTENT_TYPE = "send the body as JSON, with the header `Content-Type: application/json`"
BODY_TOO_LARGE = "the body is too large: at most {limit:,} bytes"
MISSING_FIELD = "{field} is required: {help}, or null to reset it to the declared value"
BAD_PAGE = "{field} must be a whole number from 1 to {maximum}"
UNKNOWN_SLOT = "unknown slot {slot_id!r}"
BAD_SEARCH = f"search must be text of at most {KEY_MAX_LENGTH} characters (no NUL characters)"
PER_KEY_HELP = "a whole number from 1 to the limit's capacity"
SHARE_HELP = "'fifo' or 'fair'"
ON_FULL_HELP = "'wait', 'skip' or 'replace'"
MAX_WAITING_HELP = "a whole number from 1 to 1,000,000"
BAD_PER_KEY_FLAG = "per_key must be true (each key's cap of the queue) or false (the queue's cap), not {value!r}"
WEIGHT_HELP = "a whole number from 1 to 100"
MIN_HELP = "a whole number from 0 to the limit's capacity"
KEY_REQUIRED = "key is required: the key whose {field} to change"
BAD_KIND = (
    "kind must be 'limit' (a limit of the workspace), 'workflow' (a workflow's own bound) "
    "or 'box' (the box's run concurrency)"
)
NO_BOX_FIELD = (
    "send base (a whole number from 1 to 100000), burst (a number from 1.0 to 10.0) or both; "
    "null resets one to the declared value"
)
UNKNOWN_BOX_FIELD = "unknown field {field!r}: the box's run concurrency has base and burst"
UNKNOWN_PATH = "no such API path: {path} (see the README, section 'The JSON API')"


class ApiRequest(HttpRequest):
    api_user: User


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def error_response(status: int, message: str, field: str | None = None) -> JsonResponse:
    response = JsonResponse({"error": message, "field": field}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="stackbone"'
    return response


def token_auth(*, operate: bool = False) -> Callable[[Callable[..., JsonResponse]], Callable[..., JsonResponse]]:
    """Authenticate by bearer token (never by session), check the operate permission for writes,
    and answer expected failures as JSON."""

    def decorator(view: Callable[..., JsonResponse]) -> Callable[..., JsonResponse]:
        @functools.wraps(view)
        def wrapper(request: ApiRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
            user = user_for_token(raw.strip()) if scheme.lower() == "bearer" else None
            if user is None:
                return error_response(401, NO_TOKEN)
            if operate and not user.has_perm(OPERATE_PERMISSION):
                return error_response(403, NO_PERMISSION.format(username=user.get_username()))
            request.api_user = user
            try:
                return view(request, *args, **kwargs)
            except ApiError as error:
                return error_response(error.status, error.message, error.field)
            except services.LimitsError as error:
                return error_response(404 if error.field == "limit" else 400, error.message, error.field)

        return wrapper

    return decorator


@csrf_exempt
@token_auth()
def unknown_path(request: ApiRequest, **kwargs: Any) -> JsonResponse:
    """Every other path under /api/limits/, whatever the method: 404 in JSON (401 without a
    token, like every path of the API)."""
    raise ApiError(404, UNKNOWN_PATH.format(path=request.path))


def actor(request: ApiRequest) -> str:
    return f"api:{request.api_user.get_username()}"[:150]


def _limit(name: str) -> Limit:
    limit = selectors.get_limit(name)
    if limit is None:
        raise ApiError(404, services.UNKNOWN_LIMIT.format(name=name), field="limit")
    return limit


def _page_params(request: HttpRequest) -> tuple[int, int]:
    values = []
    for name, default, maximum in (("page", 1, 10**9), ("size", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)):
        text = request.GET.get(name, str(default))
        # At most 10 digits before int(): Python refuses to convert a 4,300-digit string.
        if not text.isascii() or not text.isdigit() or len(text) > 10 or not 1 <= int(text) <= maximum:
            raise ApiError(400, BAD_PAGE.format(field=name, maximum=maximum), field=name)
        values.append(int(text))
    return values[0], values[1]


def _key_param(request: HttpRequest) -> str | None:
    """The `key` filter of a read, or None when there is none."""
    if "key" not in request.GET:
        return None
    return _checked_key(request.GET["key"])


def _checked_key(value: object) -> str:
    try:
        return check_key(value)
    except ValueError as error:
        raise ApiError(400, str(error), field="key") from None


def _json_body(request: HttpRequest) -> dict[str, object]:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError(413, BODY_TOO_LARGE.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE), field="body") from None
    if raw and request.content_type != "application/json":
        raise ApiError(415, BAD_CONTENT_TYPE, field="body")
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        body = None
    if not isinstance(body, dict):
        raise ApiError(400, BAD_BODY, field="body")
    return body


def _body(request: HttpRequest, field: str, help_text: str) -> object:
    body = _json_body(request)
    if field not in body:
        raise ApiError(400, MISSING_FIELD.format(field=field, help=help_text), field=field)
    return body[field]


def _page_answer(
    limit: Limit,
    key: str,
    rows: list[dict[str, object]],
    page: int,
    size: int,
    total: int,
    extra: dict[str, object] | None = None,
) -> JsonResponse:
    return JsonResponse(
        {
            "limit": limit.name,
            **(extra or {}),
            key: rows,
            "page": page,
            "size": size,
            "total": total,
            "has_next": page * size < total,
            "now": box_clock.now().isoformat(),
        }
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
    limit = _limit(name)
    box_base = selectors.box_base() if not limit.is_box else None
    return JsonResponse(serializers.limit_summary(limit, box_base=box_base))


@csrf_exempt
@require_GET
@token_auth()
def limit_slots(request: ApiRequest, name: str) -> JsonResponse:
    """Busy slots first, then reserved ones, each in grant order (with ?key=, only that key's);
    a page past the end is empty."""
    page, size = _page_params(request)
    key = _key_param(request)
    limit = _limit(name)
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
    return _page_answer(limit, "slots", slots, page, size, total, {"key": key})


@csrf_exempt
@require_GET
@token_auth()
def limit_queue(request: ApiRequest, name: str) -> JsonResponse:
    """The queue in order; positions count from 1 at the head, across pages. With ?key=, only
    that key's waiting runs, and positions count within the key's queue."""
    page, size = _page_params(request)
    key = _key_param(request)
    limit = _limit(name)
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
    return _page_answer(limit, "queue", queue, page, size, total, {"key": key, "order": order})


@csrf_exempt
@require_GET
@token_auth()
def limit_keys(request: ApiRequest, name: str) -> JsonResponse:
    """A limit's keys, busiest first (with ?key=, only that one; with ?search=, those that contain
    it, any case), and the pool of runs without a key (`no_key`); a page past the end is empty."""
    page, size = _page_params(request)
    key = _key_param(request)
    search = request.GET.get("search", "")
    if len(search) > KEY_MAX_LENGTH or not is_storable_text(search):
        raise ApiError(400, BAD_SEARCH, field="search")
    limit = _limit(name)
    found = serializers.keys_rows(limit, key=key, search=search, offset=(page - 1) * size, size=size)
    weights = selectors.fair_weights(limit)  # one aggregate query on a fair limit, none on fifo
    rows = [serializers.key_summary(limit, row, weights) for row in found.items]
    extra: dict[str, object] = {
        "per_key": limit.per_key,
        "key": key,
        "search": search,
        "no_key": serializers.no_key_summary(limit, weights),
    }
    return _page_answer(limit, "keys", rows, page, size, found.total, extra)


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
@require_POST
@token_auth(operate=True)
def release_slot(request: ApiRequest, slot_id: str) -> JsonResponse:
    """Idempotent: `released` is false for a slot already free (SPEC 2.4, 5.1)."""
    slot = selectors.get_slot(slot_id)
    if slot is None:
        raise ApiError(404, UNKNOWN_SLOT.format(slot_id=slot_id), field="slot_id")
    released = services.release(slot_id, actor=actor(request))
    bound = slot.limit.is_workflow_bound or slot.limit.is_box
    summary = serializers.slot_summary(slot, serializers.slot_groups([slot]), bound=bound)
    return JsonResponse({"released": released, "slot": {**summary, "limit": slot.limit.name}})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_capacity(request: ApiRequest, name: str) -> JsonResponse:
    value = _body(request, "capacity", services.CAPACITY_HELP)
    old = _limit(name).capacity
    limit = services.set_capacity(name, value, actor=actor(request))
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_max_hold(request: ApiRequest, name: str) -> JsonResponse:
    value = _body(request, "max_hold", "a duration such as '45m' or milliseconds")
    old = _limit(name).max_hold_ms
    limit = services.set_max_hold(name, value, actor=actor(request))
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_per_key(request: ApiRequest, name: str) -> JsonResponse:
    """Without "key", the limit's per_key override; with it, that key's pool size. null resets
    (to the declared per_key, or for a key to the limit's per_key). The service names a bad value
    `per_key`; here it is the body's `value`, so the field says which part of the body to fix."""
    body = _json_body(request)
    if "value" not in body:
        raise ApiError(400, MISSING_FIELD.format(field="value", help=PER_KEY_HELP), field="value")
    key = None if body.get("key") is None else _checked_key(body["key"])
    limit = _limit(name)
    if key is None:
        old = limit.per_key
    else:
        before = serializers.get_key(limit, key)
        old = serializers.pool_size(limit, before.pool_override if before is not None else None)
    try:
        changed = services.set_per_key(name, body["value"], key=key, actor=actor(request))
    except services.LimitsError as error:
        if error.field == "per_key":
            raise ApiError(400, error.message, field="value") from None
        raise
    key_row = None
    if key is not None:
        after = serializers.get_key(changed, key)
        key_row = (
            serializers.key_summary(changed, after)
            if after is not None
            else serializers.unused_key_summary(changed, key)
        )
    return JsonResponse({"old": old, "limit": serializers.limit_summary(changed), "key": key_row})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_share(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 13.5: {"value": "fifo" | "fair" | null}; null resets to the declared share. A bad
    value is a 400 with field "value" (the part of the body to fix), and nothing changes."""
    body = _json_body(request)
    if "value" not in body:
        raise ApiError(400, MISSING_FIELD.format(field="value", help=SHARE_HELP), field="value")
    old = _limit(name).share
    try:
        limit = services.set_share(name, body["value"], actor=actor(request))
    except services.LimitsError as error:
        if error.field == "share":
            raise ApiError(400, error.message, field="value") from None
        raise
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_on_full(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 14.1, 14.6: {"value": "wait" | "skip" | "replace" | null}; null resets to the declared
    on_full. A bad value ('cancel_running' included: a workflow's own bound's, not built) is a 400
    with field "value", and nothing changes."""
    body = _json_body(request)
    if "value" not in body:
        raise ApiError(400, MISSING_FIELD.format(field="value", help=ON_FULL_HELP), field="value")
    old = _limit(name).on_full
    try:
        limit = services.set_on_full(name, body["value"], actor=actor(request))
    except services.LimitsError as error:
        if error.field == "on_full":
            raise ApiError(400, error.message, field="value") from None
        raise
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_max_waiting(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 14.5, 14.6: {"value": 1-1,000,000 | null, "per_key": false (default) | true}: the
    queue's cap (max_waiting), or with per_key each key's (max_waiting_per_key); null resets it to
    the declared value. A bad value is a 400 with field "value", a per_key that is not a boolean
    one with field "per_key"; nothing changes."""
    body = _json_body(request)
    if "value" not in body:
        raise ApiError(400, MISSING_FIELD.format(field="value", help=MAX_WAITING_HELP), field="value")
    per_key = body.get("per_key", False)
    if not isinstance(per_key, bool):
        raise ApiError(400, BAD_PER_KEY_FLAG.format(value=per_key), field="per_key")
    limit = _limit(name)
    old = limit.max_waiting_per_key if per_key else limit.max_waiting
    try:
        changed = services.set_max_waiting(name, body["value"], per_key=per_key, actor=actor(request))
    except services.LimitsError as error:
        if error.field in ("max_waiting", "max_waiting_per_key"):
            raise ApiError(400, error.message, field="value") from None
        raise
    return JsonResponse({"old": old, "limit": serializers.limit_summary(changed)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_weight(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 13.5: one key's weight, {"value": 1-100 | null, "key": K}; null resets it to 1."""
    return _set_key_field(request, name, "weight", WEIGHT_HELP)


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_min(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 13.5: one key's min, {"value": 0-capacity | null, "key": K}; null resets it to 0."""
    return _set_key_field(request, name, "min", MIN_HELP)


def _set_key_field(request: ApiRequest, name: str, field: str, help_text: str) -> JsonResponse:
    body = _json_body(request)
    if "value" not in body:
        raise ApiError(400, MISSING_FIELD.format(field="value", help=help_text), field="value")
    if body.get("key") is None:
        raise ApiError(400, KEY_REQUIRED.format(field=field), field="key")
    key = _checked_key(body["key"])
    old = serializers.key_row(_limit(name), key)[field]
    action = services.set_weight if field == "weight" else services.set_min
    try:
        changed = action(name, body["value"], key=key, actor=actor(request))
    except services.LimitsError as error:
        if error.field == field:
            raise ApiError(400, error.message, field="value") from None
        raise
    return JsonResponse(
        {"old": old, "limit": serializers.limit_summary(changed), "key": serializers.key_row(changed, key)}
    )


@csrf_exempt
@require_POST
@token_auth(operate=True)
def pause(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 5.6: the limit grants nothing until resumed; audited as `api:<username>` (a second
    pause changes nothing and records nothing). The body is empty or `{}`."""
    _json_body(request)
    old = _limit(name).paused
    limit = services.pause_limit(name, actor=actor(request))
    return JsonResponse({"old": paused_word(old), "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def resume(request: ApiRequest, name: str) -> JsonResponse:
    """Resume a paused limit: its free capacity goes to the queue at once. The body is empty or `{}`."""
    _json_body(request)
    old = _limit(name).paused
    limit = services.resume_limit(name, actor=actor(request))
    return JsonResponse({"old": paused_word(old), "limit": serializers.limit_summary(limit)})


def paused_word(paused: bool) -> str:
    """A limit's state as the audit log writes it: "paused" or "running"."""
    return "paused" if paused else "running"


@csrf_exempt
@require_POST
@token_auth(operate=True)
def forget(request: ApiRequest, name: str) -> JsonResponse:
    """`stackbone limits forget` (limits.forget), audited as `api:<username>`. The body is empty
    or `{}`. A refusal (still declared, a slot in use, a run waiting) is a 409 naming the limit,
    and nothing changes."""
    _json_body(request)
    _limit(name)
    try:
        record = forget_limit(name, actor=actor(request))
    except services.LimitsError as error:
        if error.message == services.UNKNOWN_LIMIT.format(name=name):  # forgotten by someone else meanwhile
            raise ApiError(404, error.message, field="limit") from None
        raise ApiError(409, error.message, field=error.field) from None
    return JsonResponse(serializers.forgotten_summary(record))


@csrf_exempt
@require_http_methods(["GET", "POST"])
def box(request: ApiRequest) -> JsonResponse:
    """GET: the box's run concurrency (SPEC 12), its limit row with base and burst; 404 (field
    "limit") when the workspace declares none. POST: `stackbone limits box --base/--burst`
    (SPEC 12.5), needing the operate permission: {"base": n | null, "burst": f | null}, either
    or both (null resets to the declared value; a field left out stays); answers {"old":
    {"base", "burst", "ceiling"}, "limit": the box}. A bad value is a 400 naming the field, and
    nothing changes."""
    return (_set_box if request.method == "POST" else _show_box)(request)


@token_auth()
def _show_box(request: ApiRequest) -> JsonResponse:
    limit = selectors.box()
    if limit is None:
        raise ApiError(404, NO_BOX, field="limit")
    return JsonResponse(serializers.limit_summary(limit))


@token_auth(operate=True)
def _set_box(request: ApiRequest) -> JsonResponse:
    body = _json_body(request)
    unknown = sorted(set(body) - {"base", "burst"})
    if unknown:
        field = unknown[0][:64]
        raise ApiError(400, UNKNOWN_BOX_FIELD.format(field=field), field=field)
    if not body:
        raise ApiError(400, NO_BOX_FIELD, field="base")
    before = selectors.box()
    old = {
        "base": None if before is None else before.per_key,
        "burst": None if before is None else before.burst,
        "ceiling": None if before is None else before.capacity,
    }
    limit = services.set_box(**body, actor=actor(request))
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_GET
@token_auth()
def workers_report(request: ApiRequest) -> JsonResponse:
    """The box's second ceiling, as `stackbone workers --json` prints it (limits.workers); the
    workers are asked at most every CACHE_SECONDS per web process, as for Studio's panel."""
    return JsonResponse(workers.report())
