"""Scenario 3: one sweep pass over 100,000 busy slots past expiry and 100,000 waiting runs (with
their Run rows, so the wake after commit is the real work), and idle sweeps over 1,000 limits."""

from __future__ import annotations

import time
from typing import Any

from tests.bench import data
from tests.bench.common import log, median
from tests.bench.workspace import SWEEP

TAG = "sw"
WAKE_CAP = 150  # s: past this the wake is reported as a lower bound ("> N s"); --whole-wake waits it out


def prepare(rows: int) -> int:
    limit = data.limit_id(SWEEP)
    data.clear(limit, tag=TAG)
    log(f"  generating {rows:,} busy slots past expiry and {rows:,} waiting runs")
    data.busy_slots(limit, rows, tag=TAG, expired=True)
    data.waiting_entries(limit, rows, tag=TAG, with_runs=True)
    data.analyze()
    return limit


def worker_pass(rows: int, worker: Any, *, whole_wake: bool = False) -> dict[str, Any]:
    """One pass as the Celery task `limits.tasks.sweep` in the worker, as beat runs it.

    1. Send the task; the locked section starts when the worker stamps the expired slots
       (freed_at, read under the lock) and ends when its commit shows (the limit's counters).
    2. After commit the run layer wakes the granted runs (Celery messages published to the Redis
       list the worker reads, counted). The pass's time is the task's own ("succeeded in"); if it
       has not ended WAKE_CAP seconds after the commit (unless whole_wake), the figure is a lower
       bound.
    3. Read the worker's peak RSS and kill it, so it never runs the advance tasks the pass
       dispatched; purge them.
    """
    from datetime import timedelta

    import redis
    from django.conf import settings
    from django.db.models.functions import Now

    from limits.models import Limit, Slot, SweepState
    from limits.tasks import sweep
    from tests.bench.handoff import POLL, purge_broker, wait_for

    limit = prepare(rows)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    purge_broker()
    seen = len(worker.lines)
    # The task skips a sweep within 5 s of the last pass (limits/tasks.py); the idle sweeps may
    # have just run one.
    SweepState.objects.filter(id=1).update(last_run_at=Now() - timedelta(hours=1))

    def finished() -> str | None:
        return next((x for x in worker.lines[seen:] if "limits.tasks.sweep" in x and "succeeded in" in x), None)

    sweep.delay()
    wait_for(
        lambda: any("limits.tasks.sweep" in x and "received" in x.lower() for x in worker.lines[seen:]),
        "the worker to receive the sweep task",
        worker,
        timeout=60,
    )
    wait_for(lambda: Limit.objects.get(id=limit).reserved_count > 0, "the sweep to commit", worker, timeout=900)
    committed = time.time()
    locked_at = Slot.objects.filter(limit_id=limit, state=Slot.State.EXPIRED).values_list("freed_at", flat=True)[:1][0]
    locked = committed - locked_at.timestamp()
    sampled_from = time.monotonic()
    while not finished() and (whole_wake or time.monotonic() - sampled_from < WAKE_CAP):
        time.sleep(POLL * 10)
    published = broker.llen("celery")  # the worker is busy with the sweep: nothing is consumed yet
    rate = published / max(time.monotonic() - sampled_from, 1e-9)
    line = finished()
    peak = worker.peak_rss_mb()
    worker.process.kill()
    worker.process.wait(timeout=30)
    purge_broker()
    # Reserved, or already confirmed by a run the worker advanced before it was killed.
    granted = sum(Limit.objects.values_list("reserved_count", "busy_count").get(id=limit))
    data.clear(limit, tag=TAG)
    if line is not None:
        seconds = float(line.split("succeeded in ")[1].split("s")[0])
    else:
        seconds = locked + (time.monotonic() - sampled_from)  # a lower bound: the wake was still publishing
    return {
        "seconds": seconds,
        "locked": locked,
        "wake": seconds - locked,
        "rate": rate,
        "messages": published,
        "measured": line is not None,
        "granted": granted,
        "peak_rss_mb": peak,
    }


def lapse_pass(rows: int) -> dict[str, Any]:
    """Scenario 3, lapses (SPEC 3.6): `rows` waiting runs granted by one pass and left unconfirmed
    past their 2 minutes (their runs suspended again, as runs that never resumed), then one pass
    in this process (`services.sweep`, to its end, the wake included): each reservation lapses,
    its run goes back to the end of the queue and is granted again."""
    from datetime import timedelta

    from django.db import connection
    from django.db.models.functions import Now

    from limits import services
    from limits.models import Slot
    from tests.bench.handoff import purge_broker

    limit = data.limit_id(SWEEP)
    data.clear(limit, tag=TAG)
    log(f"  granting {rows:,} waiting runs, then letting their reservations lapse")
    data.waiting_entries(limit, rows, tag=TAG, with_runs=True)
    services.sweep()
    Slot.objects.filter(limit_id=limit, state=Slot.State.RESERVED).update(reserved_until=Now() - timedelta(minutes=1))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE studio_run SET suspended = true WHERE id LIKE %s", [f"run_{TAG}_%"])
    data.analyze()
    purge_broker()
    started = time.perf_counter()
    report = services.sweep()
    seconds = time.perf_counter() - started
    purge_broker()
    data.clear(limit, tag=TAG)
    return {"seconds": seconds, "lapsed": report.lapsed, "granted": report.granted}


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


# --- scenario 12: a sweep sent behind a backlog of runs ------------------------------------------


def delay_beside_runs(pending: int, samples: int = 5) -> dict[str, Any]:
    """Scenario 12: seconds from sending `limits.tasks.sweep` to the worker taking it ("received"
    in its log: a solo worker runs what it takes at once) and to the end of its pass ("succeeded"),
    through one `celery -A studio worker --pool=solo`, `samples` times each:

    - with nothing else queued;
    - with `pending` runs of a one-step workflow queued ahead of it (started while no worker ran,
      then a worker started and let finish 5 of them); the sweep goes to the maintenance queue,
      which the worker reads first;
    - the reference, once, behind what is left of those runs: the same sweep sent to the runs'
      queue, where every task went before the maintenance queue.

    With each, the runs still unfinished once the worker took the sweep (counted after, so at most
    what was left when it did). Every sample is a whole pass: the last pass is first moved an hour
    back (limits/tasks.py skips a sweep within 5 s of the last one)."""
    from datetime import timedelta

    from django.conf import settings
    from django.db.models.functions import Now

    from limits.models import SweepState
    from limits.tasks import sweep
    from stackbone.runs.models import Run
    from studio.workflows import start_run
    from tests.bench.handoff import Worker, purge_broker, wait_for
    from tests.bench.workflows import RUN_PLAIN

    ended = [Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.CANCELLED]
    ids: list[str] = []

    def unfinished() -> int:
        return Run.objects.filter(id__in=ids).exclude(status__in=ended).count()

    def one(worker: Worker, queue: str | None = None) -> tuple[float, float, int]:
        SweepState.objects.filter(id=1).update(last_run_at=Now() - timedelta(hours=1))
        seen = len(worker.lines)

        def logged(word: str) -> bool:
            return any(task_id in line and word in line for line in worker.lines[seen:])

        sent = time.monotonic()
        task_id = sweep.apply_async(queue=queue).id
        wait_for(lambda: logged("received"), "the worker to take the sweep", worker, timeout=900)
        taken = time.monotonic() - sent
        left = unfinished()
        wait_for(lambda: logged("succeeded"), "the sweep to end", worker, timeout=900)
        return taken, time.monotonic() - sent, left

    purge_broker()
    worker = Worker()
    try:
        one(worker)  # warm-up: imports, connections, the sweep state's row
        empty = [one(worker) for _ in range(samples)]
    finally:
        worker.stop()
    started = time.monotonic()
    ids = [start_run(RUN_PLAIN, {"n": i}).id for i in range(pending)]
    enqueue_s = time.monotonic() - started
    worker = Worker()
    try:
        wait_for(lambda: len(ids) - unfinished() >= 5, "the worker to take the runs", worker, timeout=300)
        behind = [one(worker) for _ in range(samples)]
        reference = one(worker, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    finally:
        worker.stop()
        purge_broker()
    return {"empty": empty, "behind": behind, "reference": reference, "pending": pending, "enqueue_s": enqueue_s}
