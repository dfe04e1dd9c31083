"""The sweep and run recovery have a queue of their own, which every worker reads first
(studio/settings.py, studio/plumbing/broker.py): a sweep sent while a real worker works through a
backlog of 1,000 runs runs next, not after them. On the filesystem broker with SQLite and on Redis
with PostgreSQL (CI runs both). Held by order, never by wall time: the runs only ever finish, so
the runs still unfinished once the sweep's pass is recorded were unfinished when it ran."""

from __future__ import annotations

import pytest

import tests.runs.paced  # noqa: F401 - registers test_paced_step in this process too
from limits.models import SweepState
from limits.tasks import sweep
from stackbone.models import Run
from studio.celery import app
from studio.workflows import start_run
from tests.runs.conftest import Worker, wait_for
from tests.runs.paced import PACED

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 1_000
STEP_MS = 20  # each run keeps the worker busy for at least this: 1,000 runs, 20 s at the very least
FINISHED = [Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.CANCELLED]


def last_sweep() -> object:
    return SweepState.objects.filter(id=1).values_list("last_run_at", flat=True).first()


def test_a_sweep_sent_behind_1000_queued_runs_runs_before_them(workers) -> None:
    for i in range(RUNS):  # no worker yet: 1,000 messages wait in the runs' queue
        start_run(PACED, {"ms": STEP_MS, "i": i})
    worker = Worker(env={"STACKBONE_WORKFLOWS": "studio.workflows,tests.runs.paced"})
    workers.append(worker)
    finished = Run.objects.filter(status__in=FINISHED)
    wait_for(lambda: finished.count() >= 5, what="the worker to work through the runs", worker=worker)
    before = last_sweep()

    sweep.delay()
    # Today's order would take the sweep after the 1,000 runs, a minute or more on a loaded machine:
    # wait that long, so a regression fails on the count below, not on this wait.
    wait_for(lambda: last_sweep() != before, what="the sweep to run", worker=worker, timeout=600)
    unfinished = Run.objects.exclude(status__in=FINISHED).count()

    worker.stop()
    app.control.purge()  # the runs left in the queue are nobody's business after this test
    assert unfinished >= 900, f"the sweep ran after {RUNS - unfinished} of the {RUNS} queued runs had finished"
    print(f"the sweep ran with {unfinished} of {RUNS} runs still queued or running")
