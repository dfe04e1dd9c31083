"""The plumbing's rows: failed sign-ins for the throttle (table studio_signinfailure)."""

from __future__ import annotations

from django.db import models


class SignInFailure(models.Model):
    """One failed sign-in, kept for the throttle window (studio.plumbing.throttle). `key` is a SHA-256 of
    'user:<username>' or 'addr:<ip>': what people typed as a username is never stored."""

    key = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        app_label = "studio"
        indexes = [models.Index(fields=["key", "at"], name="signin_failure_key_at"), models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.key[:12]}… at {self.at:%Y-%m-%d %H:%M:%S}"
