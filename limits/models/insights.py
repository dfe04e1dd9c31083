"""The per-minute rollup the sweep writes (limits.insights)."""

from __future__ import annotations

from django.db import models

from limits.config import KEY_MAX_LENGTH
from limits.models.limit import Limit
from limits.printable import printable

# --- insights: the per-minute rollup the sweep writes (limits.insights) -------------------------

# Upper bounds (seconds) of the time-to-grant buckets: each rollup row counts the grants whose
# wait was <= each bound and > the one before; the rest (> the last bound) is `grants` minus
# their sum. 0 holds the grants made at once (no wait). limits.insights explains the choice.
WAIT_BUCKETS_S = (0, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


def _bucket_fields() -> dict[str, models.PositiveIntegerField[int, int]]:
    return {f"wait_le_{bound}": models.PositiveIntegerField(default=0, db_default=0) for bound in WAIT_BUCKETS_S}


class LimitMinute(models.Model):
    """One limit's minute (UTC, its start in `minute`): the counters sampled once at the minute's
    first sweep (null: no sweep ran in it), the most waiting and in use at any instant of it
    (set by the next minute's sample, limits.insights.record_peaks), and what happened in it,
    counted from the history rows once the minute is over (limits.insights.roll_up). Kept 7 days
    (INSIGHTS_RETENTION)."""

    pk = models.CompositePrimaryKey("limit_id", "minute")
    limit = models.ForeignKey(Limit, on_delete=models.CASCADE, related_name="minutes", db_index=False)
    minute = models.DateTimeField()
    busy = models.PositiveIntegerField(null=True)
    reserved = models.PositiveIntegerField(null=True)
    waiting = models.PositiveIntegerField(null=True)
    capacity = models.PositiveIntegerField(null=True)
    waiting_peak = models.PositiveIntegerField(
        null=True, help_text="The most runs waiting at any instant of the minute (set by the next minute's sample)."
    )
    in_use_peak = models.PositiveIntegerField(
        null=True, help_text="The most slots in use (busy + reserved) at any instant of the minute (idem)."
    )
    next_position = models.BigIntegerField(
        null=True, help_text="The limit's next queue position at the sample: where a later peak looks for new runs."
    )
    grants = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Slots handed out (at once or from the queue)."
    )
    queue_grants = models.PositiveIntegerField(default=0, db_default=0, help_text="Of those, granted from the queue.")
    released_by_workflow = models.PositiveIntegerField(default=0, db_default=0)
    released_by_operator = models.PositiveIntegerField(default=0, db_default=0)
    released_by_max_hold = models.PositiveIntegerField(default=0, db_default=0)
    released_by_run_end = models.PositiveIntegerField(default=0, db_default=0)
    lapses = models.PositiveIntegerField(default=0, db_default=0)
    timeouts = models.PositiveIntegerField(default=0, db_default=0)
    wait_ms_sum = models.BigIntegerField(default=0, db_default=0, help_text="Sum of the waits of `grants`, in ms.")
    locals().update(_bucket_fields())

    class Meta:
        indexes = [models.Index(fields=["minute"], name="limitminute_age")]

    def __str__(self) -> str:
        return f"{self.limit_id}@{self.minute:%Y-%m-%d %H:%M}"


class LimitTotals(models.Model):
    """Each limit's running totals since insights began counting (Prometheus counters): the sum
    of every rolled-up minute, added once per minute in the transaction that marks the minute
    rolled up, so they never go back, even when old minutes are purged."""

    limit = models.OneToOneField(Limit, on_delete=models.CASCADE, primary_key=True, related_name="totals")
    grants = models.BigIntegerField(default=0, db_default=0)
    queue_grants = models.BigIntegerField(default=0, db_default=0)
    released_by_workflow = models.BigIntegerField(default=0, db_default=0)
    released_by_operator = models.BigIntegerField(default=0, db_default=0)
    released_by_max_hold = models.BigIntegerField(default=0, db_default=0)
    released_by_run_end = models.BigIntegerField(default=0, db_default=0)
    lapses = models.BigIntegerField(default=0, db_default=0)
    timeouts = models.BigIntegerField(default=0, db_default=0)
    wait_ms_sum = models.BigIntegerField(default=0, db_default=0)
    locals().update({f"wait_le_{bound}": models.BigIntegerField(default=0, db_default=0) for bound in WAIT_BUCKETS_S})

    class Meta:
        verbose_name_plural = "limit totals"

    def __str__(self) -> str:
        return f"totals of {self.limit_id}"


class LimitKeySpan(models.Model):
    """One key's grants under a limit over 10 minutes (`span`, its start), added minute by minute
    by the rollup in the transaction that claims each minute (limits.insights). Only keys that
    were granted a slot have rows; kept 25 hours (the per-key figures cover the last 24)."""

    pk = models.CompositePrimaryKey("limit_id", "key", "span")
    limit = models.ForeignKey(Limit, on_delete=models.CASCADE, related_name="key_spans", db_index=False)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    span = models.DateTimeField()
    grants = models.PositiveIntegerField(default=0, db_default=0)
    queue_grants = models.PositiveIntegerField(default=0, db_default=0)
    wait_ms_sum = models.BigIntegerField(default=0, db_default=0)
    locals().update(_bucket_fields())

    class Meta:
        indexes = [models.Index(fields=["span"], name="limitkeyspan_age")]

    def __str__(self) -> str:
        return f"{self.limit_id}:{self.key}@{self.span:%Y-%m-%d %H:%M}"


class ForgottenLimit(models.Model):
    """The record of `stackbone limits forget` (limits.forget): a limit that had left the config,
    with no slot in use and no run waiting, removed with its history. Written in the transaction
    that removes it, so the removal is audited although the limit's own audit rows go with it."""

    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)
    at = models.DateTimeField()
    actor = models.CharField(max_length=150)
    declared_capacity = models.PositiveIntegerField()
    declared_max_hold_ms = models.BigIntegerField(null=True, blank=True, help_text="Null for a workflow's bound.")
    removed = models.JSONField(default=dict, help_text="How many rows of each kind of its history were removed.")

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:  # the admin's titles: user text escaped (limits.printable)
        return f"{printable(self.name)} forgotten by {printable(self.actor)} at {self.at:%Y-%m-%d %H:%M:%S}"
