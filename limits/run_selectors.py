"""Reads for the Studio run pages."""

from __future__ import annotations

import datetime as dt

from limits import eta
from limits.models import QueueEntry
from limits.services import OWED_AFTER_MS, why_waiting
from stackbone.plumbing import clock
from stackbone.runs.models import Run, Step

WAIT_STEP_PREFIX = "Esperando hueco · "
GROUP_JOIN = " + "  # several limits in one wait (SPEC 10.5)


def get_run(run_id: str) -> Run | None:
    if "\x00" in run_id:
        return None  # no run has that id, and PostgreSQL cannot even compare it
    return Run.objects.filter(id=run_id).first()


def run_steps(run: Run) -> list[Step]:
    """The run's steps in order; a wait for slots carries `waits_on` (the limit names it waits
    for: one, or several joined by ' + ')."""
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    for step in steps:
        waits_on = (
            step.name.removeprefix(WAIT_STEP_PREFIX)
            if step.kind == Step.Kind.HOOK and step.name.startswith(WAIT_STEP_PREFIX)
            else ""
        )
        step.waits_on = waits_on.split(GROUP_JOIN) if waits_on else []  # type: ignore[attr-defined]  # for the template
    return steps


def describe_waits(entries: list[QueueEntry]) -> list[QueueEntry]:
    """For a run's waits (limits.selectors.waits_of_run, which reads their places and estimates):
    the other limits of the same acquisition (`partners`, SPEC 10.5), whether the run is owed
    (SPEC 10.4: passed over and waiting longer than 2 minutes, so the free capacity of its limits
    is held for it), and the figures in words: `place_text` ("3rd of 41"), `key_place_text`
    ("2nd of 5 for key acme", "" without a key) and `eta_text` ("about 4 min", "unknown"); and
    why it waits, `reason` (SPEC 6.5, limits.engine.keys.why_waiting: a few queries, whatever the
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
