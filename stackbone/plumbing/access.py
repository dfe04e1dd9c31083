"""Who may see and operate Studio: signed-in users see it; operators change it."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Permission
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers
from django_htmx.http import HttpResponseClientRedirect

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

OPERATE_LIMIT = "limits.operate_limit"
CANCEL_RUN = "studio.change_run"
NEEDS_OPERATE_LIMIT = (
    "Releasing slots and changing a limit's capacity or max hold needs the permission "
    "“Can release slots and change limits” (limits.operate_limit). Ask an administrator to grant it to you "
    "or to a group you belong to."
)
NEEDS_CANCEL_RUN = (
    "Cancelling a run needs the permission “Can change run” (studio.change_run). "
    "Ask an administrator to grant it to you or to a group you belong to."
)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


type ViewFunc = Callable[..., HttpResponse]


def studio_login_required[View: Callable[..., HttpResponse]](view: View) -> View:
    """login_required that also works for htmx requests: a poll or a click after the session
    ended sends the whole page to the login form instead of swapping the form into a table.

    What a signed-in user sees is never stored by a browser or a proxy (`Cache-Control:
    no-store, private`): after sign-out, Back or a shared machine's cache shows nothing."""

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if request.user.is_authenticated:
            response = view(request, *args, **kwargs)
            add_never_cache_headers(response)
            return response
        if request.htmx:
            current = request.htmx.current_url or request.get_full_path()
            split = urlsplit(current)
            next_path = split.path + (f"?{split.query}" if split.query else "")
            return HttpResponseClientRedirect(redirect_to_login(next_path).url)
        return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)

    return wrapper  # type: ignore[return-value]  # functools.wraps: the same signature as view


def permission_required(perm: str, reason: str) -> Callable[[ViewFunc], ViewFunc]:
    """Signed in and holding `perm`, or a 403 page that says which permission is missing."""

    def decorator(view: ViewFunc) -> ViewFunc:
        @wraps(view)
        def wrapper(request: HtmxHttpRequest, *args: object, **kwargs: object) -> HttpResponse:
            if not request.user.has_perm(perm):
                raise PermissionDenied(reason)
            return view(request, *args, **kwargs)

        return studio_login_required(wrapper)

    return decorator


def holds_permission(request: HttpRequest, perm: str) -> bool:
    """`request.user.has_perm(perm)` in one query instead of ModelBackend's two (its user and group
    permission reads), for pages with a query budget. Same answer as ModelBackend, the only
    authentication backend the project configures: an active superuser holds every permission;
    otherwise the permission must be granted to the user or to one of their groups."""
    user = request.user
    if not user.is_active:
        return False
    if user.is_superuser:
        return True
    app_label, codename = perm.split(".", 1)
    return Permission.objects.filter(
        Q(user=user) | Q(group__user=user), content_type__app_label=app_label, codename=codename
    ).exists()


def actor(request: HttpRequest) -> str:
    """The audit actor for a signed-in user."""
    return f"user:{request.user.get_username()}"
