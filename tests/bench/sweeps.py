"""Scenario 3: one sweep pass over 100,000 busy slots past expiry and 100,000 waiting runs (with
their Run rows, so the wake after commit is the real work), and idle sweeps over 1,000 limits."""

from __future__ import annotations

import time
from typing import Any

from tests.bench import data
from tests.bench.common import log, median
from tests.bench.workspace import SWEEP

TAG = "sw"


def prepare(rows: int) -> int:
    limit = data.limit_id(SWEEP)
    data.clear(limit, tag=TAG)
    log(f"  generating {rows:,} busy slots past expiry and {rows:,} waiting runs")
    data.busy_slots(limit, rows, tag=TAG, expired=True)
    data.waiting_entries(limit, rows, tag=TAG, with_runs=True)
    data.analyze()
    return limit


def worker_pass(rows: int, worker: Any) -> dict[str, Any]:
    """One pass as the Celery task `limits.tasks.sweep` in the worker, as beat runs it. Its time is
    the worker's own ("succeeded in N s"), split from the rows: the locked section starts when the
    expired slots were stamped (freed_at, read under the lock) and the wake after commit when the
    first woken run was stamped (dispatched_at); the wake publishes one Celery message per run.
    The worker is stopped right after (its peak RSS read first), so it never runs the advance
    tasks the pass dispatched; they are purged."""
    from django.db.models import Max, Min

    from limits.models import Slot
    from limits.tasks import sweep
    from studio.models import Run
    from tests.bench.handoff import purge_broker, wait_for

    limit = prepare(rows)
    purge_broker()
    seen = len(worker.lines)
    sent = time.monotonic()
    sweep.delay()

    def finished() -> str | None:
        return next((x for x in worker.lines[seen:] if "limits.tasks.sweep" in x and "succeeded in" in x), None)

    wait_for(lambda: finished() is not None, "the sweep task in the worker", worker, timeout=900)
    observed = time.monotonic() - sent
    peak = worker.peak_rss_mb()
    worker.stop()
    purge_broker()
    task_seconds = float(str(finished()).split("succeeded in ")[1].split("s")[0])
    locked_at = Slot.objects.filter(limit_id=limit, state=Slot.State.EXPIRED).aggregate(at=Min("freed_at"))["at"]
    woken = Run.objects.filter(id__startswith=f"run_{TAG}_w", suspended=False).aggregate(
        first=Min("dispatched_at"), last=Max("dispatched_at")
    )
    granted = Slot.objects.filter(limit_id=limit, state=Slot.State.RESERVED).count()
    expired = Slot.objects.filter(limit_id=limit, state=Slot.State.EXPIRED).count()
    data.clear(limit, tag=TAG)
    to_commit = (woken["first"] - locked_at).total_seconds() if woken["first"] and locked_at else float("nan")
    return {
        "seconds": task_seconds,
        "observed": observed,
        "locked": to_commit,
        "wake": task_seconds - to_commit,
        "expired": expired,
        "granted": granted,
        "peak_rss_mb": peak,
    }


def idle(times: int = 20) -> dict[str, Any]:
    """Sweeps with nothing to do: median ms and the queries of one pass."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from limits import services

    services.sweep()  # warm
    durations = []
    for _ in range(times):
        started = time.perf_counter()
        report = services.sweep()
        durations.append((time.perf_counter() - started) * 1000)
        if report.found_work():
            raise RuntimeError(f"the idle sweep found work: {report}")
    with CaptureQueriesContext(connection) as captured:
        services.sweep()
    return {"ms": median(durations), "queries": len(captured.captured_queries), "sql": captured.captured_queries}
