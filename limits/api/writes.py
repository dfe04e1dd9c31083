"""The JSON API's writes (POST /api/limits/...): an operator's changes through limits.services,
audited as `api:<username>`, each needing the operate permission (limits.api.requests): a slot
released, a limit's capacity, max hold, per_key (or a key's pool), share, on_full, max waiting, a
key's weight and min, pause and resume, forget, and the box's base and burst (whose GET is here
too: one path, two methods). A bad value is a 400 naming the part of the body to fix, and
nothing changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from limits import selectors, serializers, services
from limits.api.requests import (
    MISSING_FIELD,
    UNKNOWN_SLOT,
    ApiError,
    ApiRequest,
    actor,
    body_field,
    checked_key,
    json_body,
    limit_named,
    token_auth,
)
from limits.config import CAPACITY_HELP, MAX_BURST, MIN_BURST
from limits.engine.operator_actions import NO_BOX
from limits.forget import forget_limit
from limits.models import Limit

PER_KEY_HELP = "a whole number from 1 to the limit's capacity"
SHARE_HELP = "'fifo' or 'fair'"
ON_FULL_HELP = "'wait', 'skip' or 'replace' ('cancel_running' on a workflow's own bound)"
MAX_WAITING_HELP = "a whole number from 1 to 1,000,000"
BAD_PER_KEY_FLAG = "per_key must be true (each key's cap of the queue) or false (the queue's cap), not {value!r}"
WEIGHT_HELP = "a whole number from 1 to 100"
MIN_HELP = "a whole number from 0 to the limit's capacity"
KEY_REQUIRED = "key is required: the key whose {field} to change"
NO_BOX_FIELD = (
    f"send base ({CAPACITY_HELP}), burst (a number from {MIN_BURST} to {MAX_BURST}) or both; "
    "null resets one to the declared value"
)
UNKNOWN_BOX_FIELD = "unknown field {field!r}: the box's run concurrency has base and burst"


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
    value = body_field(request, "capacity", services.CAPACITY_HELP)
    old = limit_named(name).capacity
    limit = services.set_capacity(name, value, actor=actor(request))
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_max_hold(request: ApiRequest, name: str) -> JsonResponse:
    value = body_field(request, "max_hold", "a duration such as '45m' or milliseconds")
    old = limit_named(name).max_hold_ms
    limit = services.set_max_hold(name, value, actor=actor(request))
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_per_key(request: ApiRequest, name: str) -> JsonResponse:
    """Without "key", the limit's per_key override; with it, that key's pool size. null resets
    (to the declared per_key, or for a key to the limit's per_key). The service names a bad value
    `per_key`; here it is the body's `value`, so the field says which part of the body to fix."""
    body = _with_value(request, PER_KEY_HELP)
    key = None if body.get("key") is None else checked_key(body["key"])
    limit = limit_named(name)
    if key is None:
        old = limit.per_key
    else:
        before = serializers.get_key(limit, key)
        old = serializers.pool_size(limit, before.pool_override if before is not None else None)
    with _as_value("per_key"):
        changed = services.set_per_key(name, body["value"], key=key, actor=actor(request))
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
    return _set_limit_value(request, name, _with_value(request, SHARE_HELP), "share", services.set_share)


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_on_full(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 14.1, 14.6: {"value": "wait" | "skip" | "replace" | "cancel_running" | null}; null
    resets to the declared on_full; 'cancel_running' on a workflow's own bound only (14.4). A bad
    value ('cancel_running' on a named limit included) is a 400 with field "value", and nothing
    changes."""
    return _set_limit_value(request, name, _with_value(request, ON_FULL_HELP), "on_full", services.set_on_full)


@csrf_exempt
@require_POST
@token_auth(operate=True)
def set_max_waiting(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 14.5, 14.6: {"value": 1-1,000,000 | null, "per_key": false (default) | true}: the
    queue's cap (max_waiting), or with per_key each key's (max_waiting_per_key); null resets it to
    the declared value. A bad value is a 400 with field "value", a per_key that is not a boolean
    one with field "per_key"; nothing changes."""
    body = _with_value(request, MAX_WAITING_HELP)
    per_key = body.get("per_key", False)
    if not isinstance(per_key, bool):
        raise ApiError(400, BAD_PER_KEY_FLAG.format(value=per_key), field="per_key")
    return _set_limit_value(
        request,
        name,
        body,
        "max_waiting_per_key" if per_key else "max_waiting",
        services.set_max_waiting,
        fields=("max_waiting", "max_waiting_per_key"),
        per_key=per_key,
    )


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


def _with_value(request: ApiRequest, help_text: str) -> dict[str, object]:
    """A write's body, which must hold `value` (null too: it resets the value)."""
    body = json_body(request)
    if "value" not in body:
        raise ApiError(400, MISSING_FIELD.format(field="value", help=help_text), field="value")
    return body


def _set_limit_value(
    request: ApiRequest,
    name: str,
    body: dict[str, object],
    attribute: str,
    action: Callable[..., Limit],
    *,
    fields: tuple[str, ...] | None = None,
    **options: object,
) -> JsonResponse:
    """One of a limit's values set from the body's `value` by the service `action` (with
    `options`): the answer is the value before (the limit's `attribute`) and the limit after. A
    bad value the service names by one of `fields` (by default `attribute`) is a 400 naming the
    body's `value`."""
    old = getattr(limit_named(name), attribute)
    with _as_value(*(fields or (attribute,))):
        limit = action(name, body["value"], actor=actor(request), **options)
    return JsonResponse({"old": old, "limit": serializers.limit_summary(limit)})


@contextmanager
def _as_value(*fields: str) -> Iterator[None]:
    """A bad value the service names by its own field (`share`, `per_key`) is a 400 naming the
    body's `value`: the part of the body to fix."""
    try:
        yield
    except services.LimitsError as error:
        if error.field in fields:
            raise ApiError(400, error.message, field="value") from None
        raise


def _set_key_field(request: ApiRequest, name: str, field: str, help_text: str) -> JsonResponse:
    body = _with_value(request, help_text)
    if body.get("key") is None:
        raise ApiError(400, KEY_REQUIRED.format(field=field), field="key")
    key = checked_key(body["key"])
    old = serializers.key_row(limit_named(name), key)[field]
    action = services.set_weight if field == "weight" else services.set_min
    with _as_value(field):
        changed = action(name, body["value"], key=key, actor=actor(request))
    return JsonResponse(
        {"old": old, "limit": serializers.limit_summary(changed), "key": serializers.key_row(changed, key)}
    )


@csrf_exempt
@require_POST
@token_auth(operate=True)
def pause(request: ApiRequest, name: str) -> JsonResponse:
    """SPEC 5.6: the limit grants nothing until resumed; audited as `api:<username>` (a second
    pause changes nothing and records nothing). The body is empty or `{}`."""
    json_body(request)
    old = limit_named(name).paused
    limit = services.pause_limit(name, actor=actor(request))
    return JsonResponse({"old": paused_word(old), "limit": serializers.limit_summary(limit)})


@csrf_exempt
@require_POST
@token_auth(operate=True)
def resume(request: ApiRequest, name: str) -> JsonResponse:
    """Resume a paused limit: its free capacity goes to the queue at once. The body is empty or `{}`."""
    json_body(request)
    old = limit_named(name).paused
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
    json_body(request)
    limit_named(name)
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
    body = json_body(request)
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
