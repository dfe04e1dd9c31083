"""The run layer with a real Celery worker process over the configured broker (Redis in CI's
PostgreSQL run, the filesystem broker on SQLite): a run waits, another run releases, the first
resumes; a worker killed with SIGKILL while a run holds a reservation loses nothing."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine

import tests.runs.guarded  # noqa: F401 - registers test_database_backend in this process too
from limits import services
from stackbone.models import Run
from studio.workflows import start_run
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare, holders, queue
from tests.runs.conftest import Worker, status, wait_for

WORKFLOWS = {"STACKBONE_WORKFLOWS": "studio.workflows,tests.runs.guarded"}

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_waiting_run_resumes_when_another_run_releases(workers) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})
    worker = Worker()
    workers.append(worker)
    first = start_run("place_call", {"call_id": "c1"})
    wait_for(lambda: status(first) == "completed", what="the first call", worker=worker)
    first.refresh_from_db()
    second = start_run("place_call", {"call_id": "c2"})
    wait_for(lambda: Run.objects.get(id=second.id).suspended, what="the second call to wait", worker=worker)
    assert [s.name for s in Run.objects.get(id=second.id).steps] == ["Esperando hueco · voice-calls"]
    start_run("call_ended", {"slot_id": first.output["slot_id"]})
    took = wait_for(lambda: status(second) == "completed", what="the second call to resume", worker=worker)
    print(f"release -> waiting run completed through a real worker: {took * 1000:.0f} ms")
    assert holders("voice-calls") == [(second.id, "busy")]
    assert_counters_match_rows("voice-calls")


def test_a_worker_killed_while_a_run_is_reserved_loses_nothing(workers) -> None:
    """Invariant: whatever dies, no run is stranded and no slot is granted twice. B is reserved
    while no worker lives; past 2 minutes the sweep gives the slot to C and re-queues B (inside
    its timeout); a new worker resumes both, and B completes once C's call ends."""
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})
    first_worker = Worker()
    workers.append(first_worker)
    a = start_run("place_call", {"call_id": "a"})
    wait_for(lambda: status(a) == "completed", what="A", worker=first_worker)
    b = start_run("place_call", {"call_id": "b", "timeout": "1h"})
    wait_for(lambda: Run.objects.get(id=b.id).suspended, what="B to wait", worker=first_worker)
    c = start_run("place_call", {"call_id": "c"})
    wait_for(lambda: Run.objects.get(id=c.id).suspended, what="C to wait", worker=first_worker)
    first_worker.kill()

    a.refresh_from_db()
    services.release(a.output["slot_id"], actor="test")
    assert holders("voice-calls") == [(b.id, "reserved")]
    with time_machine.travel(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2, seconds=5), tick=True):
        report = services.sweep()
    assert (report.lapsed, report.granted) == (1, 1)
    assert holders("voice-calls") == [(c.id, "reserved")]
    assert queue("voice-calls") == [b.id]

    second_worker = Worker()
    workers.append(second_worker)
    wait_for(lambda: status(c) == "completed", what="C to confirm and complete", worker=second_worker)
    assert holders("voice-calls") == [(c.id, "busy")]
    c.refresh_from_db()
    start_run("call_ended", {"slot_id": c.output["slot_id"]})
    wait_for(lambda: status(b) == "completed", what="B to finally complete", worker=second_worker)
    b.refresh_from_db()
    assert b.output["slot_id"]
    assert holders("voice-calls") == [(b.id, "busy")]
    assert queue("voice-calls") == []
    assert_counters_match_rows("voice-calls")


@requires_postgres
def test_a_worker_keeps_its_database_connection_from_one_task_to_the_next(workers) -> None:
    """Celery's Django fixup closes every connection before and after each task; on PostgreSQL
    that made every run a new server process, with every plan and PL/pgSQL function compiled
    again (most of a short run's time in the worker: docs/performance.md, scenario 11). A worker
    keeps its connection between tasks as a web process does between requests (stackbone/celery_signals.py),
    and a connection that breaks is still replaced (tests/runs/test_connection_cut.py)."""
    worker = Worker(env=WORKFLOWS)
    workers.append(worker)
    runs: list[Run] = []
    for _ in range(4):  # one after the other: four tasks of the same worker process
        run = start_run("test_database_backend")

        def completed(run: Run = run) -> bool:
            return status(run) == "completed"

        wait_for(completed, what="a run", worker=worker)
        runs.append(run)
    backends = {Run.objects.get(id=run.id).output["backend"] for run in runs}
    assert len(backends) == 1, f"a new database connection for every task: server processes {sorted(backends)}"
