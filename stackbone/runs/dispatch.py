"""Getting runs to a worker: a run's advance task published after commit, in chunks for a mass
wake (dispatch); suspended runs made runnable (wake); deferred starts counted down to their time
(start_if_due); and what recovery picks up when a worker, a wake or a message was lost (recover).

Nothing here raises for a broker that is down: the change that woke a run is committed, and
recovery sends what was not sent. Every "due" is the database's time (stackbone.plumbing.clock).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from stackbone.plumbing import clock
from stackbone.runs import statements
from stackbone.runs.endings import stop_cancelled
from stackbone.runs.models import Run
from stackbone.runs.signals import find_stuck_waits

logger = logging.getLogger(__name__)

ZERO = timedelta(0)
UNFINISHED = [Run.Status.QUEUED, Run.Status.PENDING, Run.Status.RUNNING]
WAITING_STATUSES = [Run.Status.RUNNING, Run.Status.QUEUED]  # suspended on a hook, or queued (SPEC 11)
STALE_DISPATCH = timedelta(seconds=30)
RECOVER_BATCH = 1_000
WAKE_BATCH = 1_000
DISPATCH_CHUNK = 50
DISPATCH_TASKS = 200
ADVANCE_RUN = "studio.tasks.advance_run"  # the tasks by their names (stackbone.runs.tasks)
ADVANCE_RUNS = "studio.tasks.advance_runs"

START_GATE = "start"  # what a queued run waits on: its bounds (SPEC 11.3)
# Deferred starts (django.tasks' run_after, SPEC 15.4: starts.start_run_at):
DEFERRED = "run_after"  # what a deferred run waits on: its start time, kept as its wait_deadline
START_DEFERRED = "studio.tasks.start_deferred_run"
COUNTDOWN_WITHIN = timedelta(minutes=10)  # nearer starts get a countdown message; later ones wait for recovery


def dispatch_on_commit(run_ids: list[str]) -> None:
    """Publish these runs' advance tasks once the transaction commits (at once outside one)."""
    if run_ids:
        _dispatch_on_commit(run_ids)


def advanced_inline() -> bool:
    """Whether a dispatch runs the advance in this process before it returns (Celery's eager
    mode, as tests use it): a start then returns its runs as read after that advance."""
    from celery import current_app

    return bool(current_app.conf.task_always_eager)


def wake(run_ids: list[str]) -> int:
    """Make suspended runs runnable, WAKE_BATCH runs per UPDATE, and dispatch them after commit.
    Idempotent: a run that is not suspended any more is left alone (its dispatch, if any, finds
    nothing to do). One batch is one statement (a hand-off's wake: no BEGIN and COMMIT of its
    own); several are one transaction, so a sweep's wake of 100,000 runs waits for one commit, not
    100 (issue 44). A crash before the commit leaves them suspended, and recover() wakes those a
    layer above says are due (find_stuck_waits); one after it and before the dispatch leaves
    runnable runs that recover() sends."""
    now = clock.param()
    woken = 0
    with transaction.atomic() if len(run_ids) > WAKE_BATCH else contextlib.nullcontext():
        for start in range(0, len(run_ids), WAKE_BATCH):
            woken += statements.wake(run_ids[start : start + WAKE_BATCH], now)
        if woken:
            _dispatch_on_commit(run_ids)
    return woken


def recover() -> int:
    """Pick up runs that should be moving but have no task in flight (a worker died, a wake or a
    task was lost): at worker start and by the 15-second sweep. A lost wake delays a run by at
    most one pass.

    1. Runnable runs (pending, or running and not suspended) with no live lease whose last
       dispatch is older than 30 s: dispatch again.
    2. Suspended runs whose wait is over but were not woken: their deadline passed more than
       30 s ago (the sweep has timed the wait out), or a layer above says so (find_stuck_waits:
       the limits engine reserved a slot for them), or a deferred run's time has come
       (start_run_at; its countdown message was lost, or never sent): wake them.
    3. Runs cancelled while they executed whose worker died (its lease ran out): end them, which
       frees what they held (end_stopped_cancels).

    Every "due" here is in the database's time (stackbone.plumbing.clock), read once.
    """
    now = clock.now()
    stale = now - STALE_DISPATCH
    ids = list(
        Run.objects.filter(status__in=UNFINISHED, suspended=False, dispatched_at__lt=stale)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .order_by("dispatched_at")
        .values_list("id", flat=True)[:RECOVER_BATCH]
    )
    if ids:
        Run.objects.filter(id__in=ids).update(dispatched_at=now)
        dispatch(ids)
    over = Q(wait_deadline__lt=stale) | Q(waiting_for=DEFERRED, wait_deadline__lte=now)  # start_run_at: due now
    for _receiver, run_ids in find_stuck_waits.send(sender=Run, now=now):
        over |= Q(id__in=run_ids)
    stuck = list(
        Run.objects.filter(status__in=WAITING_STATUSES, suspended=True)
        .filter(over)
        .values_list("id", flat=True)[:RECOVER_BATCH]
    )
    woken = wake(stuck) if stuck else 0
    return len(ids) + woken + end_stopped_cancels(now)


def end_stopped_cancels(now: datetime) -> int:
    """End runs cancelled while they executed whose worker is gone (SPEC 2.5, 11.4): cancelled,
    not yet ended (no finished_at), and no live lease left (the worker died and its heartbeat
    stopped, or it gave the lease back without ending the run). Each ends in its own transaction
    (endings.stop_cancelled: run_ended frees what it held). A run whose worker still beats is
    left alone: its step may still run. The partial index run_stopping holds only such runs."""
    ids = list(
        Run.objects.filter(status=Run.Status.CANCELLED, finished_at__isnull=True)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .values_list("id", flat=True)[:RECOVER_BATCH]
    )
    return sum(stop_cancelled(run_id) for run_id in ids)


def start_if_due(run_id: str) -> bool:
    """The countdown message of a deferred run: wake it if its time has come on the database's
    clock. One that arrives early (the sending host's clock ahead of the database's) counts down
    again for the rest. False for a run already started, cancelled or gone."""
    due = (
        Run.objects.filter(id=run_id, status=Run.Status.QUEUED, suspended=True, waiting_for=DEFERRED)
        .values_list("wait_deadline", flat=True)
        .first()
    )
    if due is None:
        return False
    if due > clock.now():
        count_down_to(run_id, due)
        return False
    return wake([run_id]) == 1


def count_down_to(run_id: str, moment: datetime) -> None:
    """Send start_deferred_run for `moment` (counted on the database's clock) if it is within
    COUNTDOWN_WITHIN. Never raises: recovery starts the run if no message does. In Celery's eager
    mode (no worker; a countdown would run at once, and again) only a start already due is sent."""
    from celery import current_app

    left = moment - clock.now()
    if left > COUNTDOWN_WITHIN or (left > ZERO and current_app.conf.task_always_eager):
        return
    try:
        _task(START_DEFERRED).apply_async((run_id,), countdown=max(left.total_seconds(), 0.0))
    except Exception as error:
        logger.warning(
            "could not send the start of %s (%s: %s); recovery starts it", run_id, type(error).__name__, error
        )


def _dispatch_on_commit(run_ids: list[str]) -> None:
    transaction.on_commit(lambda: dispatch(run_ids))


def dispatch(run_ids: list[str]) -> None:
    """One task per run; a mass wake (a sweep granting thousands) goes out in chunks of at least
    DISPATCH_CHUNK runs per task and at most DISPATCH_TASKS tasks (100,000 runs: 200 messages of
    500), so publishing does not dominate the wake, and a pool of up to DISPATCH_TASKS workers
    still shares it.

    Never raises: it runs after the commit of the change that woke the runs (a release, a
    grant), and a broker that is down must not turn that committed change into an error for
    the caller (found by the chaos run: a release_slot step whose wake could not be published
    while Redis restarted was recorded as failed, and its run failed, although the release had
    committed). The runs stay dispatched-but-unsent; recover() sends them again after
    STALE_DISPATCH."""
    advance_run, advance_runs = _task(ADVANCE_RUN), _task(ADVANCE_RUNS)
    try:
        if len(run_ids) <= DISPATCH_CHUNK:
            for run_id in run_ids:
                advance_run.delay(run_id)
            return
        chunk = max(DISPATCH_CHUNK, -(-len(run_ids) // DISPATCH_TASKS))
        for start in range(0, len(run_ids), chunk):
            advance_runs.delay(run_ids[start : start + chunk])
    except Exception as error:
        logger.warning(
            "could not dispatch %d run(s) (%s: %s); recovery sends them again",
            len(run_ids),
            type(error).__name__,
            error,
        )


def _task(name: str) -> Any:
    """A task of stackbone.runs.tasks by its name, from the Celery app's registry (the tasks module
    imports this one; this one finds the tasks without importing it back)."""
    from celery import current_app

    return current_app.tasks[name]
