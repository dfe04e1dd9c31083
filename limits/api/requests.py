"""The JSON API's requests, the same for /api/limits/ and /api/runs/ (limits.runs.api): a bearer
token only (token_auth, never the session: no CSRF hole), the operate permission for a write,
errors as `{"error": ..., "field": ...}` (ApiError, error_response), a write's body as a JSON
object (json_body), a read's paging and key filter, and the limit a path names."""

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

from limits import selectors, services
from limits.config import check_key
from limits.models import Limit
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


def limit_named(name: str) -> Limit:
    """The limit a path names; an unknown one is a 404 naming the field `limit`."""
    limit = selectors.get_limit(name)
    if limit is None:
        raise ApiError(404, services.UNKNOWN_LIMIT.format(name=name), field="limit")
    return limit


def page_params(request: HttpRequest) -> tuple[int, int]:
    values = []
    for name, default, maximum in (("page", 1, 10**9), ("size", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)):
        text = request.GET.get(name, str(default))
        # At most 10 digits before int(): Python refuses to convert a 4,300-digit string.
        if not text.isascii() or not text.isdigit() or len(text) > 10 or not 1 <= int(text) <= maximum:
            raise ApiError(400, BAD_PAGE.format(field=name, maximum=maximum), field=name)
        values.append(int(text))
    return values[0], values[1]


def key_param(request: HttpRequest) -> str | None:
    """The `key` filter of a read, or None when there is none."""
    if "key" not in request.GET:
        return None
    return checked_key(request.GET["key"])


def checked_key(value: object) -> str:
    try:
        return check_key(value)
    except ValueError as error:
        raise ApiError(400, str(error), field="key") from None


def json_body(request: HttpRequest) -> dict[str, object]:
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


def body_field(request: HttpRequest, field: str, help_text: str) -> object:
    """A write's one field, required (null too: it resets the value to the declared one)."""
    body = json_body(request)
    if field not in body:
        raise ApiError(400, MISSING_FIELD.format(field=field, help=help_text), field=field)
    return body[field]


def page_answer(
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
