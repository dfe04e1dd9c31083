"""Requests no page of ours can answer sensibly, refused before any view runs."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse, QueryDict

NUL_REFUSED = "Bad request: the address or the form holds a NUL character (%00), which no field accepts."
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RejectNulCharactersMiddleware:
    """400 for a NUL character in the path, the query string or a posted form.

    PostgreSQL cannot store or even compare a string holding NUL, so such a value would reach the
    database as an error (a 500) from any lookup: a slot or run id in the path, an admin filter,
    the admin's selected rows. No identifier, name or value of ours can hold one. The JSON API's
    bodies are left alone: parsing a multipart body here would consume the stream it reads."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path or _has_nul(request.GET) or self._form_has_nul(request):
            if request.path.startswith("/api/"):
                return JsonResponse({"error": NUL_REFUSED, "field": None}, status=400)
            return HttpResponseBadRequest(NUL_REFUSED, content_type="text/plain; charset=utf-8")
        return self.get_response(request)

    @staticmethod
    def _form_has_nul(request: HttpRequest) -> bool:
        if request.method != "POST" or request.content_type not in FORM_TYPES or request.path.startswith("/api/"):
            return False
        try:
            return _has_nul(request.POST)
        except Exception:  # a malformed body: the view (or CSRF) answers it as it always has
            return False


def _has_nul(params: QueryDict) -> bool:
    lists = params.lists()
    return any("\x00" in key or any("\x00" in value for value in values) for key, values in lists)
