from __future__ import annotations

import secrets
from typing import TypeGuard

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce

from limits.config import KEY_MAX_LENGTH, MAX_CAPACITY, MIN_CAPACITY
from limits.durations import MAX_DURATION_MS
from limits.printable import printable

LABEL_MAX_LENGTH = 200
RUN_ID_MAX_LENGTH = 64
REQUEST_MAX_LENGTH = 128


def is_storable_text(value: object) -> TypeGuard[str]:
    """A string every database backend can store and compare: PostgreSQL refuses NUL characters,
    and no backend can encode a lone surrogate (what a non-UTF-8 command-line argument becomes)."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


SLOT_ID_FORMAT = r"^slot_[0-9a-f]{32}$"


def new_slot_id() -> str:
    """Slot ids travel to outside providers and come back in webhooks: opaque and unguessable,
    'slot_' and 128 random bits as 32 hex digits. The engine's SQL mints the same format where
    it inserts slots set-based (grant.SQLITE_NEW_SLOT_ID, engine.sql's gen_random_uuid();
    tests/services/test_slot_ids.py holds them to SLOT_ID_FORMAT)."""
    return "slot_" + secrets.token_hex(16)


# The capacity in force (SPEC 5.2): an operator's override wins over the declared value until it
# is reset. One home in each dialect, held to one another and to engine.sql's limits_capacity by
# tests/services/test_sql_file.py: `capacity_in_force` for values (Limit.capacity, /metrics),
# CAPACITY_IN_FORCE in a query (the sweep's work, the workers' panel), CAPACITY_IN_FORCE_SQL in
# raw SQL (the insights sample, on both databases).
def capacity_in_force(override: int | None, declared: int) -> int:
    return declared if override is None else override


CAPACITY_IN_FORCE = Coalesce("capacity_override", "declared_capacity")
CAPACITY_IN_FORCE_SQL = "coalesce(capacity_override, declared_capacity)"


def pool_size(pool_override: int | None, per_key: int | None) -> int | None:
    """A key's pool size in force (SPEC 9.1, 9.4): its own (LimitKey.pool_override), else its
    limit's per_key; None when only the total applies. engine.sql: limits_pool_size."""
    return per_key if pool_override is None else pool_override


class LimitQuerySet(models.QuerySet["Limit"]):
    def locked(self) -> LimitQuerySet:
        """These limits, each row locked for an engine change until the transaction ends: the
        one home of the engine's lock mode on limit rows in Python (the PL/pgSQL functions in
        limits/sql/engine.sql take the same; tests/concurrency/test_lock_modes.py holds both).

        `FOR NO KEY UPDATE`: it excludes every other engine transaction on the row, and never
        blocks the foreign-key check (`FOR KEY SHARE`) that a commit makes for a slot, queue entry
        or insights row referencing the limit. `FOR UPDATE` would, and that deadlocked the
        sweep's insights rollup against acquisitions (docs/engine.md). Must never happen: two
        engine transactions changing one limit's rows at once. Lock several in id order."""
        return self.select_for_update(no_key=True)


class Limit(models.Model):
    """One named limit. The counters are kept in step with the slot and queue rows in the same
    transaction, under this row's lock, so reading a count never scans the slots.

    The integer fields are plain IntegerFields on purpose: their bounds are the CheckConstraints
    in Meta, one per rule. A PositiveIntegerField would add a second `>= 0` CHECK each, and
    PostgreSQL evaluates every CHECK of a row at each of the hot path's UPDATEs
    (docs/performance.md, "The CHECK diet")."""

    class Kind(models.TextChoices):
        LIMIT = "limit"  # declared in the workspace config
        WORKFLOW = "workflow"  # a workflow's own bound (SPEC 11.5): synced from its @workflow
        BOX = "box"  # the box's own run concurrency (SPEC 12): capacity floor(base x burst), per_key base

    name = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LIMIT, db_default=Kind.LIMIT)
    declared = models.BooleanField(default=True, help_text="False once the limit left the workspace config.")
    declared_capacity = models.IntegerField()
    declared_max_hold_ms = models.BigIntegerField()
    capacity_override = models.IntegerField(null=True, blank=True)
    max_hold_override_ms = models.BigIntegerField(null=True, blank=True)
    busy_count = models.IntegerField(default=0, help_text="Confirmed slots.")
    reserved_count = models.IntegerField(default=0, help_text="Slots handed to a waiting run, unconfirmed.")
    waiting_count = models.IntegerField(default=0)
    declared_per_key = models.IntegerField(
        null=True, blank=True, help_text="Each key's pool size from the config (SPEC 9.1); empty: no per-key pools."
    )
    per_key_override = models.IntegerField(null=True, blank=True)
    # The keyed part of the counters above (the no-key pool is the rest), and the waiting group
    # entries: on a limit with none of these and no per_key, the plain rules (and the PostgreSQL
    # fast path) apply; otherwise limits.engine.grant's do.
    keyed_busy_count = models.IntegerField(db_default=0, default=0)
    keyed_reserved_count = models.IntegerField(db_default=0, default=0)
    keyed_waiting_count = models.IntegerField(db_default=0, default=0)
    group_waiting_count = models.IntegerField(
        db_default=0, default=0, help_text="Waiting entries of acquisitions of several limits."
    )
    declared_share = models.CharField(
        max_length=8,
        default="fifo",
        db_default="fifo",
        help_text="SPEC 13.1: 'fifo' (first come, first served) or 'fair' (fair shares between keys).",
    )
    share_override = models.CharField(
        max_length=8, blank=True, default="", db_default="", help_text="An operator's share; empty: the declared one."
    )
    # SPEC 14: what an acquisition (or a start under a workflow's bound) that cannot be granted at
    # once does instead of waiting, and the caps on the queue. Declared in the config, an
    # operator's override wins until reset (SPEC 14.6, 5.2).
    declared_on_full = models.CharField(
        max_length=16,
        default="wait",
        db_default="wait",
        help_text="SPEC 14.1: 'wait' (the default: queue), 'skip' (answer at once, queue nothing), or "
        "'replace' (take the place of its key's runs waiting).",
    )
    on_full_override = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text="An operator's on_full; empty: the declared one.",
    )
    declared_max_waiting = models.IntegerField(
        null=True, blank=True, help_text="SPEC 14.5: the most runs its queue holds; empty: no cap."
    )
    max_waiting_override = models.IntegerField(null=True, blank=True, help_text="An operator's max_waiting.")
    declared_max_waiting_per_key = models.IntegerField(
        null=True, blank=True, help_text="SPEC 14.5: the most runs of one key its queue holds; empty: no cap."
    )
    max_waiting_per_key_override = models.IntegerField(
        null=True, blank=True, help_text="An operator's max_waiting_per_key."
    )
    skipped_count = models.BigIntegerField(
        default=0, db_default=0, editable=False, help_text="Acquisitions answered 'skip' (SPEC 14.2, 14.6)."
    )
    refused_count = models.BigIntegerField(
        default=0, db_default=0, editable=False, help_text="Acquisitions refused: the queue was full (SPEC 14.5)."
    )
    replaced_count = models.BigIntegerField(
        default=0,
        db_default=0,
        editable=False,
        help_text="Entries of its queue a newer acquisition of their key replaced (SPEC 14.3, 14.6).",
    )
    cancelled_count = models.BigIntegerField(
        default=0,
        db_default=0,
        editable=False,
        help_text="Runs holding it that a newer run of their key cancelled (cancel_running, SPEC 14.4, 14.6).",
    )
    declared_burst = models.FloatField(
        null=True, blank=True, help_text="The box bound only (SPEC 12.1): its burst factor from the config."
    )
    burst_override = models.FloatField(null=True, blank=True, help_text="The box bound only: an operator's burst.")
    paused_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When an operator paused it (SPEC 5.6): it grants nothing until resumed; empty: running.",
    )
    next_position = models.BigIntegerField(default=1, help_text="Queue ticket counter.")
    nokey_fair_pass = models.BigIntegerField(
        default=0,
        db_default=0,
        editable=False,
        help_text="On a fair limit, the no-key runs' pass: their place in the limit's turns (SPEC 13.2).",
    )
    last_event_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="The latest time written under this limit's lock; later changes never write an earlier one.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = LimitQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        permissions = [("operate_limit", "Can release slots and change limits")]
        # On PostgreSQL the configuration's ranges below (limits.sql.bounds.CONFIG_BOUNDS) are not
        # CHECKs but a trigger generated from them (migration 0019): a migration that changes one
        # changes it in the state only and runs bounds.install again (limits/sql/bounds.py).
        constraints = [
            models.CheckConstraint(
                condition=Q(declared_capacity__gte=MIN_CAPACITY, declared_capacity__lte=MAX_CAPACITY),
                name="limit_declared_capacity_range",
            ),
            models.CheckConstraint(
                condition=Q(capacity_override__isnull=True)
                | Q(capacity_override__gte=MIN_CAPACITY, capacity_override__lte=MAX_CAPACITY),
                name="limit_capacity_override_range",
            ),
            models.CheckConstraint(
                condition=Q(declared_max_hold_ms__gt=0, declared_max_hold_ms__lte=MAX_DURATION_MS),
                name="limit_declared_max_hold_range",
            ),
            models.CheckConstraint(
                condition=Q(max_hold_override_ms__isnull=True)
                | Q(max_hold_override_ms__gt=0, max_hold_override_ms__lte=MAX_DURATION_MS),
                name="limit_max_hold_override_range",
            ),
            models.CheckConstraint(
                condition=Q(
                    busy_count__gte=0,
                    reserved_count__gte=0,
                    waiting_count__gte=0,
                    keyed_busy_count__gte=0,
                    keyed_reserved_count__gte=0,
                    keyed_waiting_count__gte=0,
                    group_waiting_count__gte=0,
                ),
                name="limit_counters_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(declared_per_key__isnull=True) | Q(declared_per_key__gte=MIN_CAPACITY),
                name="limit_declared_per_key_range",
            ),
            models.CheckConstraint(
                condition=Q(per_key_override__isnull=True) | Q(per_key_override__gte=MIN_CAPACITY),
                name="limit_per_key_override_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def capacity(self) -> int:
        """The capacity in force (SPEC 5.2; engine.sql: limits_capacity)."""
        return capacity_in_force(self.capacity_override, self.declared_capacity)

    @property
    def max_hold_ms(self) -> int:
        return self.max_hold_override_ms if self.max_hold_override_ms is not None else self.declared_max_hold_ms

    @property
    def is_workflow_bound(self) -> bool:
        return self.kind == self.Kind.WORKFLOW

    @property
    def share(self) -> str:
        """How its capacity is shared between keys (SPEC 13): 'fifo' or 'fair'."""
        return self.share_override or self.declared_share

    @property
    def on_full(self) -> str:
        """What an acquisition that cannot be granted at once does (SPEC 14.1): 'wait', 'skip' or
        'replace' (engine.sql: limits_on_full)."""
        return self.on_full_override or self.declared_on_full

    @property
    def max_waiting(self) -> int | None:
        """The most runs its queue holds (SPEC 14.5), or None: no cap (engine.sql: limits_max_waiting)."""
        return self.max_waiting_override if self.max_waiting_override is not None else self.declared_max_waiting

    @property
    def max_waiting_per_key(self) -> int | None:
        """The most runs of one key its queue holds (SPEC 14.5), or None (engine.sql: limits_max_waiting_per_key)."""
        if self.max_waiting_per_key_override is not None:
            return self.max_waiting_per_key_override
        return self.declared_max_waiting_per_key

    @property
    def is_fair(self) -> bool:
        return self.share == "fair"

    @property
    def is_box(self) -> bool:
        return self.kind == self.Kind.BOX

    @property
    def burst(self) -> float | None:
        """The box bound's burst factor in force (SPEC 12.1, 12.5); None for any other limit. Its
        base is its per_key, its capacity floor(base x burst), kept so by the box's writers
        (sync_workspace, set_box), so every reader of capacity reads the box like any limit."""
        return self.burst_override if self.burst_override is not None else self.declared_burst

    @property
    def per_key(self) -> int | None:
        """Each key's pool size in force (SPEC 9.1, 9.4), or None: the total alone applies
        (engine.sql: limits_per_key; a key's own size over it: `pool_size`)."""
        return self.per_key_override if self.per_key_override is not None else self.declared_per_key

    @property
    def per_key_overridden(self) -> bool:
        return self.per_key_override is not None

    @property
    def is_plain(self) -> bool:
        """No per-key pools in force, not fair, and no keyed or group entry waiting: the one-queue
        rules (and the PostgreSQL fast path) hand out its capacity. A fair limit keeps its keys'
        turns at every grant (SPEC 13.2), so it is never plain."""
        return (
            self.per_key is None
            and self.keyed_waiting_count == 0
            and self.group_waiting_count == 0
            and not self.is_fair
        )

    @property
    def in_use(self) -> int:
        """Slots that count against capacity: busy and reserved."""
        return self.busy_count + self.reserved_count

    @property
    def free(self) -> int:
        return max(self.capacity - self.in_use, 0)

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def room(self) -> int:
        """The slots a grant may hand out now: none while paused (SPEC 5.6), else the free
        capacity. Every grant asks this, and only this (engine.sql: limits_room)."""
        return 0 if self.paused_at is not None else self.free

    @property
    def capacity_overridden(self) -> bool:
        return self.capacity_override is not None

    @property
    def max_hold_overridden(self) -> bool:
        return self.max_hold_override_ms is not None


class LimitKey(models.Model):
    """One key's pool under a limit (SPEC 9): its counters, kept in step with the slot and queue
    rows under the limit's lock, and an operator's pool size for this key. Created the first
    time the key is used or overridden; runs without a key share the limit's no-key pool, whose
    figures are the limit's counters minus its keyed_* counters. Plain IntegerFields, bounded
    by the CheckConstraints in Meta, as on Limit."""

    limit = models.ForeignKey(Limit, on_delete=models.PROTECT, related_name="keys", db_index=False)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    busy_count = models.IntegerField(default=0)
    reserved_count = models.IntegerField(default=0)
    waiting_count = models.IntegerField(default=0)
    pool_override = models.IntegerField(null=True, blank=True, help_text="This key's pool size (SPEC 9.4).")
    weight = models.IntegerField(default=1, db_default=1, help_text="Its weight on a fair limit (SPEC 13.1): 1-100.")
    minimum = models.IntegerField(
        default=0, db_default=0, help_text="On a fair limit, slots it is served first below (SPEC 13.1)."
    )
    head = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The position of its oldest waiting entry, none when none waits: where a fair grant "
        "finds the key in the order of SPEC 13.2 (limits_fair_next's index).",
    )
    fair_pass = models.BigIntegerField(
        default=0,
        db_default=0,
        editable=False,
        help_text="On a fair limit, the key's pass: its place in the limit's turns (SPEC 13.2, stride "
        "scheduling): each grant adds PASS_STRIDE // weight; in turns, pass / PASS_STRIDE.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["limit", "key"], name="limitkey_one_per_key"),
            models.CheckConstraint(
                condition=Q(busy_count__gte=0, reserved_count__gte=0, waiting_count__gte=0),
                name="limitkey_counters_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(pool_override__isnull=True) | Q(pool_override__gte=MIN_CAPACITY),
                name="limitkey_pool_override_range",
            ),
        ]
        indexes = [
            models.Index(fields=["limit", "-busy_count", "key"], name="limitkey_busiest"),
            # SPEC 13.2: the keys with runs waiting, which a fair grant chooses between
            models.Index(fields=["limit", "key"], condition=Q(waiting_count__gt=0), name="limitkey_waiting"),
            # SPEC 13.2: the smallest pass among the keys holding or waiting, where a key enters
            models.Index(
                fields=["limit", "fair_pass"],
                condition=Q(busy_count__gt=0) | Q(reserved_count__gt=0) | Q(waiting_count__gt=0),
                name="limitkey_active_pass",
            ),
        ]

    def __str__(self) -> str:  # the admin's titles and history: user text escaped (limits.printable)
        return f"{self.limit_id}:{printable(self.key)}"

    @property
    def in_use(self) -> int:
        return self.busy_count + self.reserved_count


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
