"""SPEC 2.5 and 11.4 with a real Celery worker: a run cancelled while the worker is inside its step
keeps its slot of the workflow's own bound until the worker has stopped it, and the next run of
its key starts only after that; a worker SIGKILLed inside the step leaves the cancelled run
holding its slot until its lease has run out, and then recovery ends it
(studio/workflows/tenants.py: sync_tenant, one run at a time per tenant)."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.utils import timezone

from limits.runs import bounds as run_bounds
from limits.verify import verify
from stackbone.models import Run
from stackbone.runs.runtime import recover
from studio.workflows import cancel_run, start_run
from tests.factories import assert_counters_match_rows, holders, queue
from tests.runs.conftest import Worker, status, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

BOUND = "workflow.sync_tenant"


def executing(run: Run) -> bool:
    row = Run.objects.get(id=run.id)
    return row.status == "running" and row.lease_owner != ""


def test_a_cancelled_run_frees_its_slot_only_once_the_worker_stopped_it(workers) -> None:
    run_bounds.sync()
    worker = Worker()
    workers.append(worker)
    first = start_run("sync_tenant", {"tenant": "acme", "seconds": 5}, concurrency_key="acme")
    second = start_run("sync_tenant", {"tenant": "acme", "seconds": 0}, concurrency_key="acme")
    wait_for(lambda: executing(first), what="the worker to take the first run", worker=worker)

    assert cancel_run(first.id) is True
    assert status(first) == "cancelled" and Run.objects.get(id=first.id).finished_at is None
    assert holders(BOUND) == [(first.id, "busy")], "its step still runs"
    assert status(second) == "queued" and queue(BOUND) == [second.id]

    wait_for(lambda: status(second) == "completed", what="the next run to start and complete", worker=worker)
    stopped = Run.objects.get(id=first.id)
    assert stopped.status == "cancelled" and stopped.finished_at is not None and stopped.steps == []
    (step,) = Run.objects.get(id=second.id).steps
    assert step.started_at >= stopped.finished_at, "the next run began after the cancelled one stopped"
    assert verify().ok, verify().violations
    assert_counters_match_rows(BOUND)


def test_a_cancelled_run_whose_worker_was_killed_ends_when_its_lease_runs_out(workers) -> None:
    run_bounds.sync()
    worker = Worker()
    workers.append(worker)
    first = start_run("sync_tenant", {"tenant": "zeta", "seconds": 600}, concurrency_key="zeta")
    second = start_run("sync_tenant", {"tenant": "zeta", "seconds": 0}, concurrency_key="zeta")
    wait_for(lambda: executing(first), what="the worker to take the first run", worker=worker)

    assert cancel_run(first.id) is True
    worker.kill()  # inside the step: nothing stops the run, nothing renews its lease
    recover()
    assert holders(BOUND) == [(first.id, "busy")], "the lease is live: the step may still run"
    assert status(second) == "queued"

    lease_until = Run.objects.get(id=first.id).lease_until
    assert lease_until is not None
    with time_machine.travel(max(timezone.now(), lease_until) + dt.timedelta(seconds=1), tick=False):
        recover()  # the sweep's recovery, once the lease has run out
        ended = Run.objects.get(id=first.id)
        assert ended.status == "cancelled" and ended.finished_at is not None and ended.lease_owner == ""
        assert holders(BOUND) == [(second.id, "reserved")]
        assert verify().ok, verify().violations  # read at the travelled time: what it wrote is not ahead
        assert_counters_match_rows(BOUND)
