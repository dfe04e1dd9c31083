"""What operators and the sweep leave behind: the audit trail, API tokens, the sweep's own row."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from limits.config import KEY_MAX_LENGTH
from limits.models.limit import Limit


class AuditEvent(models.Model):
    """Who changed what on a limit, and what the sweep took back. Written in the same
    transaction as the change."""

    class Action(models.TextChoices):
        RELEASE = "release", "released a slot"
        CAPACITY = "capacity", "changed capacity"
        MAX_HOLD = "max_hold", "changed max hold"
        SYNC = "sync", "synced declared values"
        EXPIRE = "expire", "took back slots past max hold"
        PER_KEY = "per_key", "changed per-key pool size"
        PAUSE = "pause", "paused the limit"
        RESUME = "resume", "resumed the limit"
        BOX = "box", "changed the box's run concurrency"
        SHARE = "share", "switched fifo/fair"
        WEIGHT = "weight", "changed a key's weight"
        MINIMUM = "min", "changed a key's min"
        ON_FULL = "on_full", "changed what a full limit does"
        MAX_WAITING = "max_waiting", "changed the queue's cap"
        MAX_WAITING_KEY = "max_waiting_key", "changed each key's cap of the queue"

    at = models.DateTimeField()
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=Action.choices)
    limit = models.ForeignKey(Limit, on_delete=models.PROTECT, related_name="audit_events")
    slot_id = models.CharField(max_length=40, blank=True, default="")
    key = models.CharField(
        max_length=KEY_MAX_LENGTH, blank=True, default="", help_text="Per-key changes: the key, if one."
    )
    old_value = models.CharField(max_length=200, blank=True, default="")
    new_value = models.CharField(max_length=200, blank=True, default="")
    capacity_after = models.PositiveIntegerField(
        null=True, blank=True, help_text="Capacity changes and syncs: the capacity in force after it (limits verify)."
    )

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["limit", "-at"], name="audit_by_limit")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.limit_id}"


class ApiToken(models.Model):
    """A bearer token for the JSON API (`/api/limits/`, used by `stackbone limits --agent`).
    Only a SHA-256 digest is stored: the token itself is shown once, when it is issued
    (limits.tokens.issue_token). It acts as its user, with that user's permissions."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="limits_api_tokens")
    name = models.CharField(max_length=100, blank=True, default="", help_text="What the token is for.")
    prefix = models.CharField(max_length=16, editable=False, help_text="The token's first characters.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class SweepState(models.Model):
    """One row: when the sweep last ran and what it did (for /healthz and operators)."""

    last_run_at = models.DateTimeField()
    last_report = models.JSONField(default=dict)
    last_duration_ms = models.FloatField(null=True, blank=True, help_text="How long the last pass took.")
    sampled_minute = models.DateTimeField(
        null=True, blank=True, help_text="The latest minute whose counters were sampled (limits.insights)."
    )
    rolled_until = models.DateTimeField(
        null=True, blank=True, help_text="Every minute before this one is rolled up (limits.insights)."
    )

    def __str__(self) -> str:
        return f"sweep at {self.last_run_at:%Y-%m-%d %H:%M:%S}"
