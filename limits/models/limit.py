"""A limit and its keys' pools: the rows the engine locks, with their counters."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from limits.config import KEY_MAX_LENGTH, MAX_CAPACITY, MIN_CAPACITY
from limits.durations import MAX_DURATION_MS
from limits.models.values import capacity_in_force
from limits.printable import printable


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
