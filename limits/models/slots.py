"""The slot and queue rows: what holds a limit's capacity, and who waits for it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from limits.config import KEY_MAX_LENGTH
from limits.models.limit import Limit
from limits.models.values import LABEL_MAX_LENGTH, REQUEST_MAX_LENGTH, RUN_ID_MAX_LENGTH, new_slot_id
from limits.printable import printable


class QueueEntry(models.Model):
    """A run waiting for a slot of a limit. Finished entries stay as history.

    On PostgreSQL the table is partitioned by state (migration 0034): the waiting entries in
    limits_queueentry_live, the others in limits_queueentry_history, each with the indexes below
    that serve it; the constraints below are unique within each partition there."""

    class State(models.TextChoices):
        WAITING = "waiting"
        GRANTED = "granted"
        TIMED_OUT = "timed_out", "timed out"
        CANCELLED = "cancelled"
        REPLACED = "replaced"  # SPEC 14.3: a newer acquisition of its key took its place

    # No index of its own: queue_position_unique (limit, position) leads with it.
    limit = models.ForeignKey(Limit, on_delete=models.PROTECT, related_name="queue_entries", db_index=False)
    run_id = models.CharField(max_length=RUN_ID_MAX_LENGTH)
    request = models.CharField(max_length=REQUEST_MAX_LENGTH, help_text="The acquire call this entry serves.")
    label = models.CharField(max_length=LABEL_MAX_LENGTH, blank=True, default="")
    position = models.BigIntegerField(help_text="Queue ticket: the queue is ordered by it.")
    key = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="", db_default="")
    group_size = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,
        help_text="How many limits the acquisition takes (SPEC 10); its entries share `request`.",
    )
    passed_over_at = models.DateTimeField(
        null=True, blank=True, help_text="When a younger run was first granted a slot this run could have used (10.4)."
    )
    fair_pass = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="On a fair limit, its key's pass when it joined (SPEC 13.2); limits verify replays the turns.",
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.WAITING)
    enqueued_at = models.DateTimeField()
    deadline = models.DateTimeField()
    timeout_ms = models.BigIntegerField()
    finished_at = models.DateTimeField(null=True, blank=True)
    replaced_by = models.CharField(
        max_length=REQUEST_MAX_LENGTH,
        blank=True,
        default="",
        db_default="",
        help_text="SPEC 14.3: the request of the acquisition that replaced it (state 'replaced').",
    )
    replacing = models.BooleanField(
        default=False,
        db_default=False,
        help_text="SPEC 14.3: joined with on_full 'replace' in force: no other entry of its key waiting for "
        "the same limits stayed (limits verify, check n).",
    )

    class Meta:
        verbose_name_plural = "queue entries"
        constraints = [
            models.UniqueConstraint(fields=["limit", "position"], name="queue_position_unique"),
            models.UniqueConstraint(
                fields=["request", "limit"], condition=Q(state="waiting"), name="queue_one_waiting_entry_per_request"
            ),
        ]
        indexes = [
            models.Index(fields=["limit", "position"], condition=Q(state="waiting"), name="queue_waiting_order"),
            models.Index(fields=["deadline"], condition=Q(state="waiting"), name="queue_waiting_deadline"),
            models.Index(fields=["run_id"], condition=Q(state="waiting"), name="queue_waiting_run"),
            models.Index(
                fields=["limit", "key", "position"],
                condition=Q(state="waiting") & ~Q(key=""),
                name="queue_waiting_by_key",
            ),
            models.Index(
                fields=["limit", "position"],
                condition=Q(state="waiting", passed_over_at__isnull=False),
                name="queue_waiting_passed_over",
            ),
            models.Index(
                fields=["limit", "position"],
                condition=Q(state="waiting", group_size__gt=1),
                name="queue_waiting_groups",
            ),
            models.Index(fields=["request"], name="queue_request"),
            models.Index(fields=["finished_at"], condition=~Q(state="waiting"), name="queue_history_age"),
        ]

    def __str__(self) -> str:  # the admin's titles and history: user text escaped (limits.printable)
        return f"{self.limit_id}#{self.position} {printable(self.run_id)}"


LIVE_SLOT_STATES = ("reserved", "busy")


class Slot(models.Model):
    """One unit of a limit's capacity held by some work. Freed slots stay as history.

    On PostgreSQL the table is partitioned by state (migration 0034): the reserved and busy slots
    in limits_slot_live, the freed ones in limits_slot_history, each with the indexes below that
    serve it; `queue_entry` is no foreign key there (`limits verify` checks it, check d)."""

    class State(models.TextChoices):
        RESERVED = "reserved"
        BUSY = "busy"
        RELEASED = "released"
        EXPIRED = "expired", "expired (max hold)"
        LAPSED = "lapsed", "reservation lapsed"
        RUN_ENDED = "run_ended", "run ended"

    id = models.CharField(primary_key=True, max_length=40, default=new_slot_id, editable=False)
    limit = models.ForeignKey(Limit, on_delete=models.PROTECT, related_name="slots")
    run_id = models.CharField(max_length=RUN_ID_MAX_LENGTH)
    request = models.CharField(max_length=REQUEST_MAX_LENGTH)
    label = models.CharField(max_length=LABEL_MAX_LENGTH, blank=True, default="")
    key = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="", db_default="")
    group_size = models.PositiveSmallIntegerField(
        default=1, db_default=1, help_text="How many limits its acquisition took; its slots share `request`."
    )
    state = models.CharField(max_length=16, choices=State.choices)
    queue_entry = models.OneToOneField(QueueEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="slot")
    granted_at = models.DateTimeField()
    reserved_until = models.DateTimeField(null=True, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(help_text="Grant time + the max hold in force then; never changes.")
    freed_at = models.DateTimeField(null=True, blank=True)
    freed_by = models.CharField(max_length=150, blank=True, default="")
    fair_pass = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="On a fair limit, its key's pass the grant was ranked at, before the grant's stride (SPEC 13.2).",
    )
    ends_with_run = models.BooleanField(
        db_default=False,  # the engine's SQL inserts slots without naming it
        help_text="Held by with_limit for work inside its run (SPEC 2.5): freed when the run ends.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["request", "limit"], condition=Q(state__in=LIVE_SLOT_STATES), name="slot_one_live_per_request"
            ),
            models.CheckConstraint(
                condition=~Q(state="reserved") | Q(reserved_until__isnull=False), name="slot_reserved_has_deadline"
            ),
        ]
        indexes = [
            models.Index(
                fields=["limit", "state", "granted_at"],
                condition=Q(state__in=LIVE_SLOT_STATES),
                name="slot_live_by_limit",
            ),
            models.Index(fields=["expires_at"], condition=Q(state="busy"), name="slot_busy_expiry"),
            models.Index(fields=["reserved_until"], condition=Q(state="reserved"), name="slot_reservation_expiry"),
            models.Index(fields=["run_id"], condition=Q(state__in=LIVE_SLOT_STATES), name="slot_live_by_run"),
            models.Index(
                fields=["limit", "key", "granted_at"],
                condition=Q(state__in=LIVE_SLOT_STATES) & ~Q(key=""),
                name="slot_live_by_key",
            ),
            models.Index(fields=["request"], name="slot_request"),
            models.Index(  # SPEC 12.3: the whole runs a limit serves (keys.whole_run_room)
                fields=["limit"],
                condition=Q(state__in=LIVE_SLOT_STATES) & Q(request__endswith=":start"),
                name="slot_live_whole_run",
            ),
            models.Index(fields=["freed_at"], condition=Q(freed_at__isnull=False), name="slot_history_age"),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_SLOT_STATES
