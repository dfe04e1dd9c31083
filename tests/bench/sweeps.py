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


def big_pass(rows: int) -> dict[str, Any]:
    """One services.sweep() in this process: its seconds, the part before the commit (the locked
    section) and after (waking the runs: one UPDATE, one Celery message per run), and the queries."""
    from django.db import connection

    from limits import services
    from limits.signals import runs_woken
    from studio.apps import _wake_runs
    from tests.bench.handoff import purge_broker

    limit = prepare(rows)
    committed: list[float] = []

    def stamp(sender: object, run_ids: list[str], **kwargs: object) -> None:
        committed.append(time.perf_counter())

    # The stamp must run before the run layer's wake: reconnect the wake after it.
    runs_woken.disconnect(dispatch_uid="studio-wake-runs")
    runs_woken.connect(stamp, weak=False, dispatch_uid="bench-stamp")
    runs_woken.connect(_wake_runs, dispatch_uid="studio-wake-runs")
    queries = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries[0] += 1
        return execute(sql, params, many, context)

    purge_broker()
    try:
        with connection.execute_wrapper(count):
            started = time.perf_counter()
            report = services.sweep()
            ended = time.perf_counter()
    finally:
        runs_woken.disconnect(dispatch_uid="bench-stamp")
    purge_broker()  # the 100,000 advance tasks: no worker runs them
    seconds = ended - started
    locked = (committed[0] - started) if committed else seconds
    data.clear(limit, tag=TAG)
    return {
        "seconds": seconds,
        "locked": locked,
        "wake": seconds - locked,
        "queries": queries[0],
        "expired": report.expired,
        "granted": report.granted,
    }


def worker_pass(rows: int, worker: Any) -> dict[str, Any]:
    """The same pass as the Celery task `limits.tasks.sweep` in the worker (as beat runs it): the
    worker's own task time (from its log) and its peak RSS. The worker is stopped right after, so
    it never runs the advance tasks the pass dispatched; they are purged."""
    from limits.tasks import sweep
    from tests.bench.handoff import purge_broker, wait_for

    limit = prepare(rows)
    purge_broker()
    seen = len(worker.lines)
    sweep.delay()
    wait_for(
        lambda: any("limits.tasks.sweep" in line and "succeeded in" in line for line in worker.lines[seen:]),
        "the sweep task in the worker",
        worker,
        timeout=600,
    )
    peak = worker.peak_rss_mb()
    worker.stop()
    purge_broker()
    line = next(line for line in worker.lines[seen:] if "limits.tasks.sweep" in line and "succeeded in" in line)
    task_seconds = float(line.split("succeeded in ")[1].split("s")[0])
    data.clear(limit, tag=TAG)
    return {"seconds": task_seconds, "peak_rss_mb": peak}


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
