"""Runs that end outside an advance's own finish.

A run cancelled while it executed ends once its work has stopped (stop_cancelled, SPEC 2.5, 11.4).

Runs that end before they start (SPEC 14): a layer above (limits) found, in the transaction that
creates or starts the run, that it must not run: its bound skips and is full, a queue is at its
cap (`skipped`), or a newer run took its place (`replaced`). The run never started and holds
nothing: it is ended here at once, with the cause it was given (Run.end_reason, end_limit,
caused_by). The run layer knows nothing of limits: to it these are a status and three texts."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from stackbone.plumbing import clock
from stackbone.runs.models import Run
from stackbone.runs.signals import run_ended

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


def stop_cancelled(run_id: str, owner: str | None = None) -> bool:
    """End a run that was cancelled while it executed, now that its work has stopped (SPEC 2.5,
    11.4: starts.cancel_run left it its lease and everything it holds): its finished_at is set,
    its lease cleared, and run_ended frees what it holds, in one transaction. With `owner`, only
    under that worker's lease (the advance that stops); without, only once no live lease is left
    (recovery: the worker died, or gave its lease back without ending the run). False when there
    is nothing to end (another worker holds it, or it ended already)."""
    now = clock.expression()
    stopping = Run.objects.filter(id=run_id, status=Run.Status.CANCELLED, finished_at__isnull=True)
    if owner is not None:
        stopping = stopping.filter(lease_owner=owner)
    else:
        stopping = stopping.filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
    with transaction.atomic():
        if not stopping.update(finished_at=now, updated_at=now, lease_owner="", lease_until=None):
            return False
        run_ended.send(sender=Run, run_id=run_id, status=Run.Status.CANCELLED)
    return True
