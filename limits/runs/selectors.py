"""Reads for a run's page (limits.runs.views), and get_run, the one guard of a run id."""

from __future__ import annotations

import datetime as dt

from limits import eta
from limits.models import QueueEntry, is_storable_text
from limits.services import OWED_AFTER_MS, why_waiting
from limits.workflow import KEYLESS_HOOK_NAME, LIMITS_SHOWN_JOIN, hook_name_parts, waits_on
from stackbone.plumbing import clock
from stackbone.runs.models import Run, Step
from stackbone.runs.runtime import DEFERRED

# Names limits.run_selectors had before issue 48's replay key (the old path is this module): kept
# for one release; the run page reads a wait's limits from its key now (limits.workflow.waits_on).
WAIT_STEP_PREFIX = KEYLESS_HOOK_NAME.partition("{limit}")[0]
GROUP_JOIN = LIMITS_SHOWN_JOIN

RUN_ID_MAX_LENGTH = 64  # Run.id's max_length


def get_run(run_id: str) -> Run | None:
    """The run with that id, or None: the one guard of a run id that a user typed or sent (a run's
    page and its Cancel, the Runs screen's Cancel, `stackbone runs show|cancel`, /api/runs/<id>/,
    the API's `before`). An id no run can have (longer than a run id, a NUL, which PostgreSQL
    cannot even compare, a lone surrogate, which no database can encode) is None without a query."""
    if not is_storable_text(run_id) or len(run_id) > RUN_ID_MAX_LENGTH:
        return None
    return Run.objects.filter(id=run_id).first()


def deferred_start(run: Run) -> dt.datetime | None:
    """When a deferred run (runtime.start_run_at: django.tasks' run_after, SPEC 15.4) starts:
    its start time while it waits for it, None for any other run. Read from the row: no query."""
    if run.status == Run.Status.QUEUED and run.suspended and run.waiting_for == DEFERRED:
        return run.wait_deadline
    return None


def run_steps(run: Run) -> list[Step]:
    """The run's steps in order; a wait for slots carries `waits_on`, the limits it waits for (one,
    or several: SPEC 10.5), read from its key (limits.workflow.waits_on), never from the text
    users see, and `shown_parts`, that text in pieces that each name a limit or none
    (limits.workflow.hook_name_parts)."""
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    for step in steps:  # for the template, not fields
        step.waits_on = waits_on(step)  # type: ignore[attr-defined]
        step.shown_parts = hook_name_parts(step.waits_on)  # type: ignore[attr-defined]
    return steps


def describe_waits(entries: list[QueueEntry]) -> list[QueueEntry]:
    """For a run's waits (limits.selectors.waits_of_run, which reads their places and estimates):
    the other limits of the same acquisition (`partners`, SPEC 10.5), whether the run is owed
    (SPEC 10.4: passed over and waiting longer than 2 minutes, so the free capacity of its limits
    is held for it), and the figures in words: `place_text` ("3rd of 41"), `key_place_text`
    ("2nd of 5 for key acme", "" without a key) and `eta_text` ("about 4 min", "unknown"); and
    why it waits, `reason` (SPEC 6.5, limits.engine.waiting.why_waiting: a few queries, whatever the
    number of waits)."""
    now = clock.now()
    owed_before = now - dt.timedelta(milliseconds=OWED_AFTER_MS)
    reasons = why_waiting(entries, now)
    for entry in entries:  # for the template, not fields
        entry.reason = reasons.get(entry.id)  # type: ignore[attr-defined]
        entry.partners = [  # type: ignore[attr-defined]
            other.limit.name for other in entries if other.request == entry.request and other.id != entry.id
        ]
        entry.owed = entry.passed_over_at is not None and entry.enqueued_at < owed_before  # type: ignore[attr-defined]
        place: int = entry.place  # type: ignore[attr-defined]
        approximate: bool = entry.place_approximate  # type: ignore[attr-defined]
        entry.place_text = eta.place_words(place, entry.limit.waiting_count, approximate=approximate)  # type: ignore[attr-defined]
        key_place: int | None = entry.key_place  # type: ignore[attr-defined]
        entry.key_place_text = (  # type: ignore[attr-defined]
            ""
            if key_place is None
            else eta.place_words(key_place, entry.key_waiting or 0, approximate=entry.key_place_approximate)  # type: ignore[attr-defined]
        )
        entry.eta_text = eta.eta_words(entry.eta_seconds)  # type: ignore[attr-defined]
    return entries


def run_eta_text(entries: list[QueueEntry]) -> str:
    """The estimate of a run waiting for several limits at once: the longest of theirs (limits.eta
    .run_eta_seconds), in words; "" when it waits for one limit or none (its row says it all)."""
    if len(entries) < 2:
        return ""
    return eta.eta_words(eta.run_eta_seconds(entry.eta_seconds for entry in entries))  # type: ignore[attr-defined]
