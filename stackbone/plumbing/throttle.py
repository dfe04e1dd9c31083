"""Sign-in throttling, shared by every web worker (the failures are rows, not process memory).

After STACKBONE_LOGIN_MAX_FAILURES failed sign-ins for one username, or
STACKBONE_LOGIN_MAX_FAILURES_PER_ADDRESS from one client address, within
STACKBONE_LOGIN_WINDOW_SECONDS, the sign-in forms (Studio's and the admin's) refuse further
attempts for that username or address, without checking the password, until enough failures
have aged out of the window. The refusal reads the same whether or not the user exists, and
failures for unknown usernames count like the others. A successful sign-in clears its username's
failures.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest

from stackbone.plumbing import clock
from stackbone.plumbing.models import SignInFailure

THROTTLED = (
    "Too many failed sign-ins for this username or from this address. "
    "Wait {minutes} minutes and try again, or ask an administrator to reset your password."
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def keys_for(username: str, request: HttpRequest | None) -> dict[str, int]:
    """The throttle keys of an attempt and the number of failures each may have."""
    per_user = int(getattr(settings, "STACKBONE_LOGIN_MAX_FAILURES", 5))
    per_address = int(getattr(settings, "STACKBONE_LOGIN_MAX_FAILURES_PER_ADDRESS", 4 * per_user))
    keys = {_digest("user:" + username.strip().casefold()): per_user}
    address = request.META.get("REMOTE_ADDR") if request is not None else None
    if address and per_address > 0:
        keys[_digest("addr:" + address)] = per_address
    return keys


def _window() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "STACKBONE_LOGIN_WINDOW_SECONDS", 15 * 60)))


def begin_attempt(keys: dict[str, int]) -> list[int] | None:
    """Count an attempt as a failure *before* its password is checked, then check the allowance:
    None, with nothing kept, when a key already had its allowed failures in the window; otherwise
    the ids of the attempt's rows (deleted again if it succeeds). Because each attempt's row is
    written before it counts, attempts racing from several workers see one another, and no more
    than the allowance ever get a password check."""
    now = clock.now()
    since = now - _window()
    SignInFailure.objects.filter(at__lte=since).delete()  # keep the table small
    ids = [row.pk for row in SignInFailure.objects.bulk_create([SignInFailure(key=key, at=now) for key in keys])]
    if any(SignInFailure.objects.filter(key=key, at__gt=since).count() > allowed for key, allowed in keys.items()):
        SignInFailure.objects.filter(pk__in=ids).delete()
        return None
    return ids


def clear_user(username: str) -> None:
    SignInFailure.objects.filter(key=_digest("user:" + username.strip().casefold())).delete()


if TYPE_CHECKING:
    _FormBase = AuthenticationForm  # what the mixin is mixed into: its data, request and clean()
else:
    _FormBase = object


class ThrottledFormMixin(_FormBase):
    """Refuse before authenticating when the username or address is throttled; count failures."""

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))[:150]
        attempt = begin_attempt(keys_for(username, self.request))
        if attempt is None:
            minutes = max(1, int(_window().total_seconds() // 60))
            raise forms.ValidationError(THROTTLED.format(minutes=minutes), code="throttled")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            raise  # the attempt's rows stay: they are its failure
        except BaseException:
            SignInFailure.objects.filter(pk__in=attempt).delete()  # not a failed sign-in: an error
            raise
        SignInFailure.objects.filter(pk__in=attempt).delete()
        clear_user(username)
        return cleaned


class ThrottledAuthenticationForm(ThrottledFormMixin, AuthenticationForm):
    """Studio's sign-in form (/accounts/login/)."""


class ThrottledAdminAuthenticationForm(ThrottledFormMixin, AdminAuthenticationForm):
    """The admin's sign-in form (/admin/login/)."""
