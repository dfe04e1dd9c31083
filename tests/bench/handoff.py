"""Scenario 2: hand-off latency through a real Celery worker over Redis.

A limit of capacity 1 is held; N runs of `bench_take_slot` wait in its queue, suspended. Each
hand-off releases the busy slot (services.release: the engine reserves the slot for the head run
in the releasing transaction and, after commit, the run layer dispatches the run's advance task);
the worker resumes the run, whose acquire_slot confirms the reservation and records the hook step;
the run ends. The next release waits until that run has finished, so hand-offs do not overlap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench.common import log, peak_rss_mb

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.002  # s between two looks at the rows while a hand-off is in flight


class Worker:
    """`celery -A studio worker --pool=solo` on the bench database and the configured Redis; with
    `threads`, `--pool=threads --concurrency=<threads>` (one process, that many runs at once)."""

    def __init__(self, threads: int = 0) -> None:
        self.lines: list[str] = []
        pool = ["--pool=threads", f"--concurrency={threads}"] if threads else ["--pool=solo"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "studio", "worker", *pool, "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"bench-{uuid.uuid4().hex[:8]}@%h"],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: any("ready." in line for line in self.lines), "the Celery worker to start", self, 120)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def wait_for(condition: Callable[[], bool], what: str, worker: Worker | None = None, timeout: float = 60) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            tail = "".join(worker.lines[-30:]) if worker else ""
            raise RuntimeError(f"timed out waiting for {what}\n{tail}")
        time.sleep(POLL)
    return time.monotonic() - started


def purge_broker() -> None:
    from studio.celery import app

    app.control.purge()


def measure(limit_name: str, handoffs: int, worker: Worker, warmup: int = 5) -> dict[str, Any]:
    """Queue warmup + handoffs runs behind one holder, then hand the slot over that many times.
    Latencies are in ms, from the moment just before release() is called, on this host's clock
    (the worker runs on the same host): woken = the run's dispatched_at, stamped by the run
    layer's wake right after the releasing transaction (which reserved the slot for the run)
    committed, before it publishes the advance task; returned = release() returned, the task
    published; resumed = the hook step's finished_at (the run confirmed its reservation in the
    worker); completed = the run's finished_at. (The new slot's granted_at is the time the caller
    passed to the engine, read before the call, so it measures nothing here.)"""
    from limits import services
    from limits.models import Limit, Slot
    from stackbone.models import Run, Step
    from studio.workflows import start_run

    total = 1 + warmup + handoffs
    log(f"  queueing {total} runs of bench_take_slot on {limit_name}")
    first = start_run("bench_take_slot", {"limit": limit_name, "label": "holder"})
    wait_for(lambda: Run.objects.get(id=first.id).status == Run.Status.COMPLETED, "the first run", worker)
    runs = [start_run("bench_take_slot", {"limit": limit_name, "label": f"h{n}"}) for n in range(total - 1)]
    limit = Limit.objects.get(name=limit_name)
    wait_for(
        lambda: (
            Limit.objects.get(id=limit.id).waiting_count == total - 1
            and Run.objects.filter(id__in=[r.id for r in runs], suspended=True).count() == total - 1
        ),
        "every run to wait in the queue",
        worker,
        timeout=300,
    )
    returned, woken, resumed, completed = [], [], [], []
    holder = Slot.objects.get(limit=limit, state=Slot.State.BUSY)
    for number, run in enumerate(runs):
        from django.utils import timezone

        t0 = timezone.now()
        if not services.release(holder.id):
            raise RuntimeError(f"release of {holder.id} changed nothing")
        t1 = timezone.now()

        def is_completed(run: Run = run) -> bool:
            return Run.objects.filter(id=run.id, status=Run.Status.COMPLETED).exists()

        wait_for(is_completed, "a hand-off", worker)
        holder = Slot.objects.get(limit=limit, run_id=run.id)
        hook = Step.objects.get(run_id=run.id, kind=Step.Kind.HOOK)
        dispatched, finished = Run.objects.values_list("dispatched_at", "finished_at").get(id=run.id)
        if number < warmup:
            continue
        returned.append((t1 - t0).total_seconds() * 1000)
        woken.append((dispatched - t0).total_seconds() * 1000)
        resumed.append((hook.finished_at - t0).total_seconds() * 1000)
        completed.append((finished - t0).total_seconds() * 1000)
    return {"returned": returned, "woken": woken, "resumed": resumed, "completed": completed}
