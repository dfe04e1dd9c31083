"""Issue 45, item 3: the Workers panel, `stackbone workers` and GET /api/limits/-/workers/ said
`busy 0 of 8` for a threads-pool worker running 4 tasks, and a solo worker vanished from them while
it ran one: the figures came from asking the workers over the broker. Each worker now reports
itself (stackbone.plumbing.worker_beat), counted where Celery keeps the tasks it runs.

Must never happen: a worker shown with another number of busy processes than the tasks it runs,
a busy worker missing, or a run a worker may move and none holds left out of the runs waiting for
a worker (or one a worker runs counted in). Real worker processes, one per pool, on the test
run's broker (the filesystem broker with SQLite, Redis with PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import threading

import pytest
from django.db import connections
from django.utils import timezone

import tests.runs.held  # noqa: F401 - registers test_held_until_released in this process too
from limits import workers
from limits.cli import Streams
from limits.cli import workers as workers_cli
from limits.runs import start_run
from stackbone.models import Run
from stackbone.plumbing import worker_beat
from stackbone.plumbing.models import WorkerBeat
from tests.runs.conftest import Worker, wait_for
from tests.runs.held import HELD

RUNS = 3


def cli_json() -> dict:
    out, err = io.StringIO(), io.StringIO()
    workers_cli.main(["--json"], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return json.loads(out.getvalue())


def figures() -> tuple[list[tuple[str, int, int]], int]:
    """(each worker's (pool, concurrency, busy), the runs waiting for a worker), as the CLI's JSON
    (the API's and the panel's figures: limits.workers.report) has them."""
    answer = cli_json()
    return [(w["pool"], w["concurrency"], w["busy"]) for w in answer["workers"]], answer["pending"]["runs"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("pool", "concurrency"), [("prefork", 2), ("threads", 2), ("solo", 1)])
def test_a_worker_reports_the_tasks_it_runs_whatever_its_pool(workers, tmp_path, pool, concurrency) -> None:  # noqa: F811
    flag = tmp_path / "release"
    worker = Worker(env={"STACKBONE_WORKFLOWS": "studio.workflows,tests.runs.held"}, pool=pool, concurrency=concurrency)
    workers.append(worker)
    wait_for(lambda: figures() == ([(pool, concurrency, 0)], 0), what="the worker's first report", worker=worker)

    run_ids = [start_run(HELD, {"flag": str(flag), "n": n}).id for n in range(RUNS)]
    # Every process busy, the other runs waiting for one (a solo worker too, which cannot answer
    # the broker while it runs a task).
    expected = ([(pool, concurrency, concurrency)], RUNS - concurrency)
    wait_for(lambda: figures() == expected, what=f"{expected}, not {figures()}", worker=worker, timeout=30)
    running = Run.objects.filter(id__in=run_ids, status="running", lease_until__isnull=False).count()
    assert running == concurrency

    flag.touch()
    done = Run.objects.filter(id__in=run_ids, status="completed")
    wait_for(lambda: done.count() == RUNS, what="the runs to complete", worker=worker, timeout=60)
    wait_for(lambda: figures() == ([(pool, concurrency, 0)], 0), what="the worker idle again", worker=worker)

    worker.stop(timeout=60)  # a warm shutdown takes its report with it (slow under load: not killed)
    assert not WorkerBeat.objects.exists()
    assert cli_json()["workers"] == []


# --- the figures, without a worker -----------------------------------------------------------------


@pytest.fixture
def real_broker_conf(real_broker) -> None:  # noqa: F811 - tests.runs.conftest's
    """Tasks go to the test run's broker (neither eager nor in-process): workers are read."""


def make_run(status: str, *, suspended: bool = False, lease_seconds: float | None = None, ago: float = 0) -> Run:
    now = timezone.now()
    created = now - dt.timedelta(seconds=ago)
    lease = None if lease_seconds is None else now + dt.timedelta(seconds=lease_seconds)
    return Run.objects.create(
        workflow="place_call", status=status, suspended=suspended, lease_owner="w" if lease else "",
        lease_until=lease, created_at=created, updated_at=created, dispatched_at=created,
    )  # fmt: skip


@pytest.mark.django_db
def test_the_runs_waiting_for_a_worker_are_those_a_worker_may_move_and_none_holds() -> None:
    """Pending, woken from a wait (running, no longer suspended) and let through by its bounds
    (queued, not suspended): waiting for a worker until one holds its lease. Not: a run a worker
    holds, one suspended on a wait, one finished."""
    make_run("pending", ago=30)
    make_run("running", ago=20)  # woken: sent to the workers again, not taken up yet
    make_run("queued", ago=10)  # its bounds had room: sent, not started yet
    make_run("running", lease_seconds=-5, ago=5)  # its worker died: its lease ran out
    make_run("running", lease_seconds=20)  # a worker runs it
    make_run("running", suspended=True)  # waits for a slot
    make_run("queued", suspended=True)  # waits for its bounds
    make_run("completed")
    found = workers.pending(timezone.now())
    assert found.runs == 4
    assert found.oldest_seconds == pytest.approx(30, abs=2)


def report_from_a_thread(me: worker_beat.Identity, pool: object, *, first: bool = False) -> bool:
    """As the worker's own thread writes it, with a connection of its own (closed after here: the
    test database is dropped at the end of the run)."""
    done: list[bool] = []

    def report() -> None:
        try:
            done.append(worker_beat.report(me, pool, first=first))
        finally:
            connections.close_all()

    thread = threading.Thread(target=report)
    thread.start()
    thread.join(30)
    return done == [True]


@pytest.mark.django_db(transaction=True)
def test_a_report_is_alive_for_a_while_then_the_note_names_the_last_one(real_broker_conf, monkeypatch) -> None:
    me = worker_beat.Identity(name="celery@box-a", host="box-a", pid=os.getpid(), pool="threads")

    class Pool:
        info = {"max-concurrency": 8}

    monkeypatch.setattr(worker_beat, "busy", lambda: 4)
    assert report_from_a_thread(me, Pool(), first=True)
    assert [(w.name, w.pool, w.concurrency, w.busy) for w in workers.alive().workers] == [
        ("celery@box-a", "threads", 8, 4)
    ]
    monkeypatch.setattr(worker_beat, "busy", lambda: 3)
    assert report_from_a_thread(me, Pool())
    assert workers.alive().busy == 3

    WorkerBeat.objects.update(beat_at=timezone.now() - dt.timedelta(seconds=worker_beat.ALIVE_SECONDS + 1))
    gone = workers.alive()
    assert gone.workers == ()
    assert gone.note.startswith(workers.NO_ANSWER.format(seconds=worker_beat.ALIVE_SECONDS))
    assert "the last, celery@box-a, 16s ago" in gone.note
