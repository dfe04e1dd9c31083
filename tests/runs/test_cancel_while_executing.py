"""SPEC 2.5 and 11.4: a run cancelled while it executes keeps what it holds until its work has
stopped. The cancel is recorded at once (status cancelled, no finished_at yet); the worker finds
it at its next step boundary and stops, and only then does the run end and free its slots (its
workflow's own bound and a with_limit slot); a worker that died leaves a lease that runs out, and
recovery ends the run then. A run not executing is cancelled at once, as before.

The advance runs in a thread of this process (its own database connection), inside a step that
waits for the test: the worker path is the real one (lease, heartbeat, step recording)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connections

from limits.runs import bounds as run_bounds
from limits.verify import verify
from limits.workflow import with_limit
from stackbone.models import Run
from stackbone.plumbing import clock as box_clock
from stackbone.runs import statements
from stackbone.runs.runtime import advance, recover
from stackbone.runs.steps import LEASE
from studio.workflows import cancel_run, start_run, step, workflow
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

BOUND = "workflow.test_cancel_busy"
INSIDE = threading.Event()  # the blocking step has begun
GO_ON = threading.Event()  # the test lets it finish
DONE: list[str] = []


@step
def work(label: str) -> str:
    if label == "blocks":
        INSIDE.set()
        assert GO_ON.wait(60), "the test never let the step finish"
    DONE.append(f"work:{label}")
    return label


@step
def after(label: str) -> str:
    DONE.append(f"after:{label}")
    return label


@workflow(name="test_cancel_busy", concurrency={"total": 1})
def busy(input: dict) -> str:
    with_limit("partner-api", lambda: work(input["label"]))
    return after(input["label"])


@pytest.fixture
def bound(clock) -> Iterator[None]:
    declare(partner_api={"capacity": 1, "max_hold": "1h"})
    run_bounds.sync(["test_cancel_busy"])
    INSIDE.clear()
    GO_ON.clear()
    DONE.clear()
    yield
    GO_ON.set()


class InThread:
    """advance(run_id) in a thread, as a worker runs it; `result` once it returned."""

    def __init__(self, run_id: str) -> None:
        self.result: str | None = None
        self.thread = threading.Thread(target=self._advance, args=(run_id,), daemon=True)
        self.thread.start()

    def _advance(self, run_id: str) -> None:
        try:
            self.result = advance(run_id)
        finally:
            connections.close_all()  # this thread's connections only

    def join(self) -> str | None:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the advance did not return"
        return self.result


def fresh(run: Run) -> Run:
    return Run.objects.get(id=run.id)


def test_a_cancelled_executing_run_keeps_its_slots_until_its_step_has_finished(bound, no_worker) -> None:
    first = start_run(busy, {"label": "blocks"})
    second = start_run(busy, {"label": "next"})
    assert (fresh(first).status, fresh(second).status) == ("pending", "queued")
    worker = InThread(first.id)
    assert INSIDE.wait(60), "the first run never reached its step"

    assert cancel_run(first.id) is True
    cancelled = fresh(first)
    assert cancelled.status == "cancelled" and cancelled.finished_at is None  # recorded, still stopping
    assert cancelled.is_finished  # every surface shows it cancelled; cancelling again changes nothing
    assert cancel_run(first.id) is False
    # Its step still runs: the whole-run slot and the with_limit slot stay its own, and the next
    # run stays queued (its advance finds nothing to start).
    assert holders(BOUND) == [(first.id, "busy")]
    assert holders("partner-api") == [(first.id, "busy")]
    assert queue(BOUND) == [second.id]
    assert advance(second.id) == "skipped" and fresh(second).status == "queued"
    recover()  # a live lease: recovery leaves the stopping run alone
    assert holders(BOUND) == [(first.id, "busy")] and fresh(first).finished_at is None
    assert verify().ok, verify().violations

    GO_ON.set()
    assert worker.join() == "cancelled"
    assert DONE == ["work:blocks"]  # it stopped at the step boundary: no step after the cancel
    stopped = fresh(first)
    assert stopped.status == "cancelled" and stopped.finished_at is not None and stopped.lease_owner == ""
    assert holders("partner-api") == []
    assert holders(BOUND) == [(second.id, "reserved")]  # freed once it stopped, to the next run
    assert advance(second.id) == "completed" and DONE[-2:] == ["work:next", "after:next"]
    assert verify().ok, verify().violations
    assert_counters_match_rows(BOUND)
    assert_counters_match_rows("partner-api")


def test_a_cancelled_run_whose_worker_died_ends_when_its_lease_runs_out(bound, no_worker, clock) -> None:
    first = start_run(busy, {"label": "quick"})
    second = start_run(busy, {"label": "next"})
    # A worker took the lease and started the run, then died inside its step (nothing beats).
    assert statements.take_lease(first.id, "dead-worker", LEASE, box_clock.param())
    assert fresh(first).status == "running"

    assert cancel_run(first.id) is True
    assert fresh(first).status == "cancelled" and fresh(first).finished_at is None
    recover()
    assert holders(BOUND) == [(first.id, "busy")], "the lease is live: its step may still run"
    assert queue(BOUND) == [second.id]

    clock.advance(seconds=LEASE.total_seconds() + 1)
    recover()  # the sweep's recovery: the lease ran out, the worker is gone
    ended = fresh(first)
    assert ended.status == "cancelled" and ended.finished_at is not None and ended.lease_owner == ""
    assert holders(BOUND) == [(second.id, "reserved")]
    assert advance(first.id) == "skipped"  # nothing to take over: it ended
    assert advance(second.id) == "completed"
    assert verify().ok, verify().violations
    assert_counters_match_rows(BOUND)


def test_a_run_that_is_not_executing_is_cancelled_at_once(bound, no_worker) -> None:
    """11.4: a pending run (its slot granted, no worker yet), a queued one, and a running run
    whose lease was given back end at once and free what they hold in the same transaction."""
    pending = start_run(busy, {"label": "quick"})
    queued = start_run(busy, {"label": "q"})
    assert cancel_run(queued.id) is True
    assert fresh(queued).finished_at is not None and queue(BOUND) == []
    assert cancel_run(pending.id) is True
    assert fresh(pending).finished_at is not None and holders(BOUND) == []

    running = start_run(busy, {"label": "quick"})
    assert statements.take_lease(running.id, "gone", LEASE, box_clock.param())
    Run.objects.filter(id=running.id).update(lease_owner="", lease_until=None)  # gave its lease back
    assert cancel_run(running.id) is True
    assert fresh(running).finished_at is not None and holders(BOUND) == []
    assert verify().ok, verify().violations
