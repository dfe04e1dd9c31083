"""Scenario 9: runs/s of a one-step workflow through real Celery workers over Redis, with and
without a bound on the whole run (SPEC 11: `@workflow(concurrency={"total": 4})`).

The same body is registered twice (tests/bench/workflows.py): `bench_run_plain` and
`bench_run_bounded`. For each, the bench process starts N runs one after the other with
`studio.workflows.start_run` (each its own transaction; a bounded run past the bound is created
`queued` and starts when a run of the bound ends) and waits until every one has completed; two
`celery -A studio worker --pool=solo` run them. runs/s = N / (the last run's finished_at - the
moment just before the first start_run), so it includes starting the runs.
"""

from __future__ import annotations

import time
from typing import Any

from tests.bench.common import log, percentile
from tests.bench.handoff import Worker, wait_for

POLL = 0.02  # s between two counts of the completed runs


def sync_bound(workflow_name: str) -> None:
    """The bound `workflow.<name>` in the bench database (migrate syncs it too, as the bench's
    workflows are in STACKBONE_WORKFLOWS; this makes sure)."""
    from limits import run_bounds

    run_bounds.sync([workflow_name])


def measure(workflow_name: str, n: int, workers: list[Worker]) -> dict[str, Any]:
    from django.utils import timezone

    from studio.runs.models import Run
    from studio.workflows import start_run

    t0 = timezone.now()
    started = time.monotonic()
    runs = [start_run(workflow_name, {"n": i}) for i in range(n)]
    enqueue_s = time.monotonic() - started
    queued_at_start = sum(1 for run in runs if run.status == Run.Status.QUEUED)
    ids = [run.id for run in runs]
    ended = Run.objects.filter(id__in=ids, status__in=[Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.CANCELLED])

    def all_ended() -> bool:
        return ended.count() == n

    wait_for(all_ended, f"{n} runs of {workflow_name} to end", workers[0], timeout=max(300, n))
    rows = list(Run.objects.filter(id__in=ids).values_list("status", "created_at", "started_at", "finished_at"))
    not_completed = sum(1 for status, *_ in rows if status != Run.Status.COMPLETED)
    if not_completed:
        raise RuntimeError(f"{not_completed} of {n} runs of {workflow_name} did not complete")
    last = max(finished for *_, finished in rows)
    seconds = (last - t0).total_seconds()
    latency = [(finished - created).total_seconds() * 1000 for _, created, _, finished in rows]
    return {
        "n": n,
        "seconds": seconds,
        "per_s": n / seconds,
        "enqueue_s": enqueue_s,
        "queued_at_start": queued_at_start,
        "p50_ms": percentile(latency, 50),
        "p95_ms": percentile(latency, 95),
        "max_running": _max_overlap([(s, f) for _, _, s, f in rows if s is not None]),
    }


def _max_overlap(intervals: list[tuple[Any, Any]]) -> int:
    """The most runs between started_at and finished_at at one moment (an end before a start at
    the same instant)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def run(n: int, workers_count: int = 2) -> dict[str, Any]:
    """Both loads in one sitting (warm-up first), then the checks: every run completed (measure
    raises otherwise) and limits.verify over every limit."""
    from limits import verify
    from tests.bench.handoff import purge_broker
    from tests.bench.workflows import RUN_BOUNDED, RUN_PLAIN

    sync_bound(RUN_BOUNDED)
    purge_broker()
    workers = [Worker() for _ in range(workers_count)]
    try:
        for name in (RUN_PLAIN, RUN_BOUNDED):
            measure(name, 20, workers)  # warm-up: imports, connections, the bound's rows
        result = {}
        for name in (RUN_PLAIN, RUN_BOUNDED):
            log(f"  {n} runs of {name}")
            figures = measure(name, n, workers)
            log(
                f"    {figures['per_s']:.1f} runs/s ({figures['seconds']:.1f} s; starting them took "
                f"{figures['enqueue_s']:.1f} s, {figures['queued_at_start']} queued at start); created → finished "
                f"p50 {figures['p50_ms']:.0f} / p95 {figures['p95_ms']:.0f} ms; "
                f"at most {figures['max_running']} running"
            )
            result[name] = figures
        rss = max(worker.peak_rss_mb() for worker in workers)
    finally:
        for worker in workers:
            worker.stop()
    checked = verify.verify()
    log(f"  limits verify: {checked.summary()}")
    for violation in checked.violations[:10]:
        log(f"    {violation}")
    return {"plain": result[RUN_PLAIN], "bounded": result[RUN_BOUNDED], "verify": checked, "peak_rss_mb": rss}
