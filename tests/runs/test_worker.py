"""The run layer with a real Celery worker process over the configured broker (Redis in CI's
PostgreSQL run, the filesystem broker on SQLite): a run waits, another run releases, the first
resumes; a worker killed with SIGKILL while a run holds a reservation loses nothing."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import time_machine
from django.conf import settings
from django.db import connection

from limits import services
from studio.models import Run
from studio.workflows import start_run
from tests.conftest import use_broker
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)


class Worker:
    def __init__(self) -> None:
        self.lines: list[str] = []
        db = connection.settings_dict
        if connection.vendor == "sqlite":
            database_url = f"sqlite:///{db['NAME']}"
        else:
            database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        env = {**os.environ, "DATABASE_URL": database_url, "CELERY_BROKER_URL": settings.CELERY_BROKER_URL}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=solo", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"test-{uuid.uuid4().hex[:8]}@%h"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=settings.BASE_DIR,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: any("ready." in line for line in self.lines), what="the worker to start", worker=self)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(condition: Callable[[], bool], *, what: str, worker: Worker | None = None, timeout: float = 60) -> float:
    """Poll until condition holds; return the seconds it took (reported, never asserted)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            log = "".join(worker.lines[-40:]) if worker else ""
            raise AssertionError(f"timed out waiting for {what}\n{log}")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.fixture
def real_broker() -> Iterator[None]:
    from studio.celery import app

    use_broker(settings.CELERY_BROKER_URL, eager=False)
    app.control.purge()
    yield
    use_broker("memory://", eager=True)


@pytest.fixture
def workers(real_broker) -> Iterator[list[Worker]]:  # type: ignore[no-untyped-def]
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def status(run: Run) -> str:
    run.refresh_from_db()
    return run.status


def test_a_waiting_run_resumes_when_another_run_releases(workers) -> None:  # type: ignore[no-untyped-def]
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


def test_a_worker_killed_while_a_run_is_reserved_loses_nothing(workers) -> None:  # type: ignore[no-untyped-def]
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
