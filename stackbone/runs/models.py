"""The run layer's rows: runs and their recorded steps (tables studio_run, studio_step)."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q


def new_run_id() -> str:
    return "run_" + uuid.uuid4().hex[:24]


# A run's finished states: it will never run again. Skipped and replaced runs never started (SPEC 14).
FINISHED_STATUSES = ("completed", "failed", "cancelled", "skipped", "replaced")


class Run(models.Model):
    """One execution of a workflow. Durable by replay: the body is called again on every
    advance, and each step returns its recorded result instead of running twice."""

    class Status(models.TextChoices):
        QUEUED = "queued"  # its bounds are full: it waits before its first step (SPEC 11.3)
        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        # SPEC 14: ended before it started, by its bounds' on_full (never started, in no queue)
        SKIPPED = "skipped"  # a bound that skips was full, or a queue at its cap (end_reason says which)
        REPLACED = "replaced"  # a newer run of its key took its place in the queue (caused_by names it)

    id = models.CharField(primary_key=True, max_length=64, default=new_run_id, editable=False)
    workflow = models.CharField(max_length=200)
    input = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    suspended = models.BooleanField(default=False, help_text="Waiting on a hook; the body is not running.")
    waiting_for = models.CharField(max_length=128, blank=True, default="", help_text="The hook it waits on.")
    wait_deadline = models.DateTimeField(null=True, blank=True, help_text="When the wait it is suspended on ends.")
    bounds = models.JSONField(
        default=list, blank=True, help_text="The limits the whole run holds a slot of, granted before it starts."
    )
    concurrency_key = models.CharField(max_length=128, blank=True, default="")
    reference = models.CharField(
        max_length=128,
        blank=True,
        default="",
        db_default="",
        help_text="The value of the input field its workflow names as reference (@workflow(reference=...)).",
    )
    # SPEC 14.6: why a run ended skipped, replaced or cancelled by another run: the 6.5 reason code
    # (limits.engine.results.REASONS: 'limit_full', 'queue_full', ...), the limit that stopped it,
    # and the run that caused it (the run that replaced it, or that cancelled it by cancel_running).
    # NULL (None) for every other run, not "": a NULL takes no room in the row, and most runs never
    # have a cause (three empty texts widened every run row enough to change the Runs screen's
    # plans: tests/views/test_runs_screen.py). An older release's INSERT names none of them.
    end_reason = models.CharField(  # noqa: DJ001 - NULL: no cause (see above)
        max_length=32, null=True, blank=True, default=None, help_text="Why it ended so (SPEC 14.6): a reason code."
    )
    end_limit = models.CharField(  # noqa: DJ001
        max_length=64, null=True, blank=True, default=None, help_text="The limit that stopped it (SPEC 14.6)."
    )
    caused_by = models.CharField(  # noqa: DJ001
        max_length=64,
        null=True,
        blank=True,
        default=None,
        help_text="The run that replaced it or cancelled it (SPEC 14.3, 14.4).",
    )
    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        app_label = "studio"  # the run layer's tables belong to the studio app (studio_run)
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["dispatched_at"],
                condition=Q(status__in=["pending", "running", "queued"], suspended=False),
                name="run_runnable",
            ),
            models.Index(
                fields=["wait_deadline"],
                condition=Q(status__in=["running", "queued"], suspended=True),
                name="run_suspended",
            ),
            # The Runs screen and `stackbone runs list`: newest first, by status, by workflow
            # (limits/runs/listing.py: keyset pages in each index's order, never OFFSET or COUNT).
            models.Index(fields=["created_at", "id"], name="run_newest"),
            models.Index(fields=["status", "created_at", "id"], name="run_by_status"),
            models.Index(fields=["workflow", "created_at", "id"], name="run_by_workflow"),
            # ?key= / runs list --key: a tenant's runs in page order. Only keyed runs: most runs of
            # a box may have no key, and each index is one more entry per run row written.
            models.Index(
                fields=["concurrency_key", "created_at", "id"], condition=~Q(concurrency_key=""), name="run_by_key"
            ),
            # A search matches a run's reference exactly (limits/runs/listing.py search_matches): only
            # runs that have one, newest first.
            models.Index(fields=["reference", "created_at", "id"], condition=~Q(reference=""), name="run_by_reference"),
            # A limit's activity: the runs it skipped or replaced, newest first (SPEC 14.6). Only
            # runs ended so have an end_limit.
            models.Index(
                fields=["end_limit", "finished_at"], condition=Q(end_limit__isnull=False), name="run_ended_by_limit"
            ),
            # Runs cancelled while they executed that have not stopped yet (SPEC 2.5, 11.4: they
            # keep what they hold until their worker stops): recovery ends those whose lease ran
            # out (stackbone.runs.dispatch.end_stopped_cancels). A handful at any time.
            models.Index(
                fields=["lease_until"], condition=Q(status="cancelled", finished_at__isnull=True), name="run_stopping"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.workflow}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def steps(self) -> list[Step]:
        """The run's steps in order."""
        return list(self.step_records.order_by("seq"))


class Step(models.Model):
    """A recorded step (kind 'step') or a wait (kind 'hook').

    Two names: `name` is what users see (a @step's name; a wait's, given by the layer that
    records it, e.g. 'Esperando hueco · voice-calls'), and `key` is what a replay compares
    (runtime.recorded_step): the name itself for a @step, a stable key of the call for a wait
    (e.g. 'acquire:voice-calls'), so the text users see may change without breaking the runs
    already recorded. A row without a key was recorded before keys (migration 0010) or by a
    worker of an older release during a rolling deploy: it is matched by the name that release
    gave the call."""

    class Kind(models.TextChoices):
        STEP = "step"
        HOOK = "hook"

    class Status(models.TextChoices):
        WAITING = "waiting"
        COMPLETED = "completed"
        FAILED = "failed"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_records")
    seq = models.PositiveIntegerField(help_text="Position of the call in the workflow body.")
    name = models.CharField(max_length=255)  # a wait for three limits of 64: 216
    key = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",  # an older release's INSERT names no key: its rows get "" (matched by name)
        help_text="What a replay compares: the call's stable identity, never display text.",
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.STEP)
    status = models.CharField(max_length=16, choices=Status.choices)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "studio"
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="step_unique_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.name}"


class RunKey(models.Model):
    """A key a run took a slot under inside its body (`with_limit(..., key=...)`, `acquire_slot`,
    `acquire_slots`), kept with the run after the slot is freed and the run has ended, so a
    tenant's runs are found by key for as long as the runs are kept (the Runs screen's Key filter,
    `stackbone runs list --key`, `/api/runs/?key=`). One row per run and key, written in the
    transaction that grants the slot (limits.workflow); a run's concurrency key is its own column.
    The run layer knows nothing of limits: to it a key is a name a run is found by."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="taken_keys", db_index=False)
    key = models.CharField(max_length=128)

    class Meta:
        app_label = "studio"
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="runkey_one_per_run")]
        # ?key=: the runs of a key (its rows, then the runs by primary key).
        indexes = [models.Index(fields=["key", "run"], name="runkey_by_key")]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.key}"
