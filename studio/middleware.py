"""Requests no page of ours can answer sensibly, refused before any view runs."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

NUL_REFUSED = "Bad request: the address or the form holds a NUL character (%00), which no field accepts."
FORM_TYPE = "application/x-www-form-urlencoded"


class RejectNulCharactersMiddleware:
    """400 for a NUL character in the path, the query string or a urlencoded form.

    PostgreSQL cannot store or even compare a string holding NUL, so such a value would reach the
    database as an error (a 500) from any lookup: a slot or run id in the path, an admin filter,
    the admin's selected rows. No identifier, name or value of ours can hold one. Multipart bodies
    are left alone (parsing them here would consume the stream a JSON view reads)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path or _has_nul(request.GET):
            return HttpResponseBadRequest(NUL_REFUSED, content_type="text/plain; charset=utf-8")
        if request.method == "POST" and request.content_type == FORM_TYPE and _has_nul(request.POST):
            return HttpResponseBadRequest(NUL_REFUSED, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def _has_nul(params: object) -> bool:
    lists = params.lists()  # type: ignore[attr-defined]
    return any("\x00" in key or any("\x00" in value for value in values) for key, values in lists)
