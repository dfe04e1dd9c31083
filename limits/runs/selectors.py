"""Reads for a run's page (limits.runs.views), and get_run, the one guard of a run id."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from limits import eta
from limits.models import is_storable_text
from limits.selectors import Wait
from limits.services import OWED_AFTER_MS, Reason, why_waiting
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


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended when another rule than its own work ended it (SPEC 14.6): skipped, replaced,
    or cancelled by a newer run. Read from the row: no query."""

    status: str
    reason: str  # the code (limits.engine.results.REASONS), "" for none
    reason_text: str
    limit: str
    caused_by: str

    def as_json(self) -> dict[str, str]:
        return {"reason": self.reason, "text": self.reason_text, "limit": self.limit, "caused_by": self.caused_by}


def run_outcome(run: Run) -> Outcome | None:
    """A run's recorded cause of its end (Run.end_reason, end_limit, caused_by), or None."""
    from limits.engine.results import REASONS

    if not (run.end_reason or run.end_limit or run.caused_by):
        return None
    reason = run.end_reason or ""
    return Outcome(run.status, reason, REASONS.get(reason, reason), run.end_limit or "", run.caused_by or "")


def deferred_start(run: Run) -> dt.datetime | None:
    """When a deferred run (runtime.start_run_at: django.tasks' run_after, SPEC 15.4) starts:
    its start time while it waits for it, None for any other run. Read from the row: no query."""
    if run.status == Run.Status.QUEUED and run.suspended and run.waiting_for == DEFERRED:
        return run.wait_deadline
    return None


@dataclass(frozen=True, slots=True)
class StepRow:
    """A step as a run's page lists it: the step and, for a wait for slots, the limits it waits for
    (`waits_on`: one, or several, SPEC 10.5; [] for any other step), read from its key
    (limits.workflow.waits_on), never from the text users see, and that text in pieces that each
    name a limit or none (`shown_parts`, limits.workflow.hook_name_parts)."""

    step: Step
    waits_on: list[str]
    shown_parts: list[tuple[str, str | None]]


def run_steps(run: Run) -> list[StepRow]:
    """The run's steps in order, as its page lists them (StepRow)."""
    rows = []
    for step in Step.objects.filter(run=run).order_by("seq"):
        limits = waits_on(step)
        rows.append(StepRow(step, limits, hook_name_parts(limits)))
    return rows


@dataclass(frozen=True, slots=True)
class WaitRow:
    """A run's wait as its page shows it (describe_waits): its place and estimate, with its queue
    entry (`wait`, limits.selectors.waits_of_run); why it waits (`reason`, SPEC 6.5); the other
    limits of the same acquisition (`partners`, SPEC 10.5); whether the run is owed (`owed`, SPEC
    10.4: passed over and waiting longer than 2 minutes, so the free capacity of its limits is
    held for it); and the figures in words: `place_text` ("3rd of 41"), `key_place_text` ("2nd of
    5" among its key's runs, "" without a key's pool) and `eta_text` ("about 4 min", "unknown")."""

    wait: Wait
    reason: Reason | None
    partners: tuple[str, ...]
    owed: bool
    place_text: str
    key_place_text: str
    eta_text: str


def describe_waits(waits: Sequence[Wait]) -> list[WaitRow]:
    """A run's waits (limits.selectors.waits_of_run, which reads their places and estimates) as its
    page shows them (WaitRow); why each waits comes from limits.engine.waiting.why_waiting: a few
    queries, whatever the number of waits."""
    now = clock.now()
    owed_before = now - dt.timedelta(milliseconds=OWED_AFTER_MS)
    reasons = why_waiting([wait.entry for wait in waits], now)
    rows = []
    for wait in waits:
        entry = wait.entry
        key_place_text = (
            ""
            if wait.key_place is None
            else eta.place_words(wait.key_place, wait.key_waiting or 0, approximate=wait.key_place_approximate)
        )
        rows.append(
            WaitRow(
                wait=wait,
                reason=reasons.get(entry.id),
                partners=tuple(
                    other.entry.limit.name
                    for other in waits
                    if other.entry.request == entry.request and other.entry.id != entry.id
                ),
                owed=entry.passed_over_at is not None and entry.enqueued_at < owed_before,
                place_text=eta.place_words(wait.place, entry.limit.waiting_count, approximate=wait.place_approximate),
                key_place_text=key_place_text,
                eta_text=eta.eta_words(wait.eta_seconds),
            )
        )
    return rows


def run_eta_text(waits: Sequence[Wait]) -> str:
    """The estimate of a run waiting for several limits at once: the longest of theirs (limits.eta
    .run_eta_seconds), in words; "" when it waits for one limit or none (its row says it all)."""
    if len(waits) < 2:
        return ""
    return eta.eta_words(eta.run_eta_seconds(wait.eta_seconds for wait in waits))
