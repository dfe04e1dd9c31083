"""Runs that end before they start (SPEC 14): a layer above (limits) found, in the transaction that
creates or starts the run, that it must not run: its bound skips and is full, a queue is at its
cap (`skipped`), or a newer run took its place (`replaced`). The run never started and holds
nothing: it is ended here at once, with the cause it was given (Run.end_reason, end_limit,
caused_by). The run layer knows nothing of limits: to it these are a status and three texts."""

from __future__ import annotations

from stackbone.plumbing import clock
from stackbone.runs.models import Run

ENDED = "ended"  # run_queued / run_starting's answer: the receiver ended the run itself (end_unstarted)
UNSTARTED_ENDINGS = (Run.Status.SKIPPED, Run.Status.REPLACED)


def end_unstarted(run_id: str, status: str, *, reason: str, limit: str = "", caused_by: str = "") -> bool:
    """End a queued run that never started with `status` (skipped or replaced) and its cause, now
    (the database's time); an empty limit or cause is kept as none (NULL). False when the run is
    not queued any more (it started, or ended)."""
    if status not in UNSTARTED_ENDINGS:
        raise ValueError(f"a run that never started ends skipped or replaced, not {status!r}")
    now = clock.expression()
    return bool(
        Run.objects.filter(id=run_id, status=Run.Status.QUEUED).update(
            status=status,
            end_reason=reason,
            end_limit=limit or None,
            caused_by=caused_by or None,
            suspended=False,
            waiting_for="",
            wait_deadline=None,
            lease_owner="",
            lease_until=None,
            finished_at=now,
            updated_at=now,
        )
    )
