"""A worker that dies while it advances a run (SIGKILL, a lost machine) must not strand the run.

Found by the chaos run (python -m tests.chaos): the lease a worker takes on the run it advances
lasted 5 minutes, so every advance a SIGKILL interrupted left its run stalled for 5 minutes. Now
the lease is short (runtime.LEASE, 30 s) and a heartbeat renews it while the worker is alive,
so a long step keeps its lease and a dead worker's run is dispatched again within about a lease
plus one recovery pass.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from stackbone.models import Run
from stackbone.runs import runtime
from stackbone.runs.runtime import advance, recover
from studio.workflows import start_run, step, workflow
from tests.conftest import use_broker

pytestmark = pytest.mark.django_db(transaction=True)


class WorkerKilled(BaseException):  # noqa: N818 - stands for a SIGKILL: nothing after it runs
    pass


_kills: list[str] = []


@step
def crash_once(run_tag: str) -> str:
    if run_tag not in _kills:
        _kills.append(run_tag)
        raise WorkerKilled
    return "done"


@workflow(name="test_crash_once")
def crash_once_workflow(input: dict) -> dict:
    return {"result": crash_once(input["tag"])}


def test_a_run_whose_worker_died_mid_advance_moves_again_after_the_lease(no_worker, clock) -> None:
    run = start_run(crash_once_workflow, {"tag": "r1"})
    with pytest.raises(WorkerKilled):
        advance(run.id)  # the worker dies holding the lease
    run.refresh_from_db()
    assert run.status == "running" and run.lease_owner
    clock.advance(seconds=20)
    assert recover() == 0  # the lease still protects it: the worker might be alive
    clock.advance(seconds=11)  # 31 s: the lease (30 s) is over, not renewed by a dead worker
    use_broker("memory://", eager=True)
    assert recover() == 1
    run.refresh_from_db()
    assert (run.status, run.output) == ("completed", {"result": "done"})
    assert dt.timedelta(seconds=30) >= runtime.LEASE  # not minutes of stall after a crash


def test_the_heartbeat_renews_the_lease_of_a_live_worker_and_not_a_lost_one(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "HEARTBEAT_SECONDS", 0.05)
    before = timezone.now()
    now = timezone.now()
    mine = Run.objects.create(
        workflow="x", status="running", lease_owner="me", lease_until=before, created_at=now, updated_at=now
    )
    lost = Run.objects.create(
        workflow="x", status="running", lease_owner="other", lease_until=before, created_at=now, updated_at=now
    )
    beats = [runtime._Heartbeat(mine.id, "me"), runtime._Heartbeat(lost.id, "me")]
    deadline = time.monotonic() + 10
    while Run.objects.get(id=mine.id).lease_until == before and time.monotonic() < deadline:
        time.sleep(0.05)
    for beat in beats:
        beat.stop()
    assert Run.objects.get(id=mine.id).lease_until > before + runtime.LEASE - dt.timedelta(seconds=1)
    assert Run.objects.get(id=lost.id).lease_until == before
