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

from tests.bench.common import cpu_split, cpu_split_text, log, percentile
from tests.bench.handoff import Worker, wait_for

POLL = 0.02  # s between two counts of the completed runs


def sync_bound(workflow_name: str) -> None:
    """The bound `workflow.<name>` in the bench database (migrate syncs it too, as the bench's
    workflows are in STACKBONE_WORKFLOWS; this makes sure)."""
    from limits.runs import bounds as run_bounds

    run_bounds.sync([workflow_name])


def measure(workflow_name: str, n: int, workers: list[Worker], make_input: Any = lambda i: {"n": i}) -> dict[str, Any]:
    from django.utils import timezone

    from stackbone.runs.models import Run
    from studio.workflows import start_run

    cpu0 = cpu_split()
    t0 = timezone.now()
    started = time.monotonic()
    runs = [start_run(workflow_name, make_input(i)) for i in range(n)]
    enqueue_s = time.monotonic() - started
    queued_at_start = sum(1 for run in runs if run.status == Run.Status.QUEUED)
    ids = [run.id for run in runs]
    finished = [Run.Status.COMPLETED, Run.Status.FAILED, Run.Status.CANCELLED]
    ended = Run.objects.filter(id__in=ids, status__in=finished)
    last_ended = Run.objects.filter(id=ids[-1], status__in=finished)

    def all_ended() -> bool:
        # A primary-key read every POLL until the last run started has ended, then the count: the
        # bench's own polling stays out of the machine's CPU per run.
        return last_ended.exists() and ended.count() == n

    wait_for(all_ended, f"{n} runs of {workflow_name} to end", workers[0], timeout=max(300, n))
    cpu_ms, cpu_text = cpu_split_text(cpu0, cpu_split(), n, "run")
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
        "cpu_ms": cpu_ms,
        "cpu_text": cpu_text,
        "ids": ids,
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


# --- the run scenario of issue 17: a shipped workflow through a limit, beside DBOS's queue --------

LIMITED_WORKFLOW = "sync_partner"  # studio/workflows/timeouts.py: acquire_slot -> one step -> release_slot
LIMITED_STEP = "call_partner"


def limited(n: int, workers_count: int = 2, threads: int = 0) -> dict[str, Any]:
    """`n` runs of the shipped `sync_partner` on `partner-api` (capacity 4 in the bench's
    workspace), started one after the other by this process, through `workers_count` Celery
    workers (solo pool; with `threads`, the threads pool with that many runs at once in each
    worker process): runs/s from just before the first start to the last finish, and, for each
    release (its `release_slot` step recorded), the time until the next `call_partner` step
    started (tests.bench.dbos_queue.release_to_next_start, the same measure as DBOS's side)."""
    from django.db.models import F

    from limits import verify
    from stackbone.runs.models import Step
    from tests.bench.dbos_queue import release_to_next_start
    from tests.bench.handoff import purge_broker

    def make_input(i: int) -> dict[str, Any]:
        return {"label": f"bench-{i}", "timeout": "1h"}

    purge_broker()
    workers = [Worker(threads=threads) for _ in range(workers_count)]
    try:
        measure(LIMITED_WORKFLOW, 20, workers, make_input)  # warm-up
        log(f"  {n} runs of {LIMITED_WORKFLOW} (acquire_slot partner-api -> {LIMITED_STEP} -> release_slot)")
        figures = measure(LIMITED_WORKFLOW, n, workers, make_input)
    finally:
        for worker in workers:
            worker.stop()
    ids = figures.pop("ids")
    steps = Step.objects.filter(run_id__in=ids)
    figures["in_flight"] = workers_count * max(threads, 1)
    figures["phases"] = _phases(ids, figures["in_flight"], figures["seconds"])
    starts = [
        s.timestamp() * 1000 for s in steps.filter(name__endswith=LIMITED_STEP).values_list("started_at", flat=True)
    ]
    releases = [
        f.timestamp() * 1000 for f in steps.filter(name__endswith="release_slot").values_list("finished_at", flat=True)
    ]
    if len(starts) != n or len(releases) != n:
        raise RuntimeError(f"{len(starts)} {LIMITED_STEP} and {len(releases)} release_slot steps for {n} runs")
    gaps = release_to_next_start(releases, starts)
    figures["handoff_p50"] = percentile(gaps, 50)
    figures["handoff_p95"] = percentile(gaps, 95)
    # A run granted at once records its hook step closed in one instant; one that waited, later.
    figures["waited"] = steps.filter(kind=Step.Kind.HOOK, finished_at__gt=F("started_at")).count()
    figures["verify"] = verify.verify()
    log(
        f"    {figures['per_s']:.1f} runs/s ({figures['seconds']:.1f} s; "
        f"starting them took {figures['enqueue_s']:.1f} s); "
        f"release -> next step start p50 {figures['handoff_p50']:.1f} / p95 {figures['handoff_p95']:.1f} ms; "
        f"{figures['waited']} runs waited for a slot; at most {figures['max_running']} running; "
        f"{figures['cpu_text']}; verify {figures['verify'].summary()}"
    )
    return figures


def _phases(ids: list[str], in_flight: int, seconds: float) -> dict[str, float]:
    """Where a run of sync_partner spends its time, p50 over the runs in ms, from its rows: the
    worker's span (started → finished) and its parts; and how busy the workers were (the sum of
    the spans ÷ (runs the workers can hold at once × the load's seconds)): the rest is the workers
    between two runs (taking the next task from the broker, loading the run)."""
    from stackbone.runs.models import Run, Step

    runs = {r.id: r for r in Run.objects.filter(id__in=ids).only("id", "started_at", "finished_at")}
    by_run: dict[str, dict[str, Step]] = {}
    for step in Step.objects.filter(run_id__in=ids).only("run_id", "name", "kind", "started_at", "finished_at"):
        kind = "hook" if step.kind == Step.Kind.HOOK else step.name.rsplit(".", 1)[-1]
        by_run.setdefault(step.run_id, {})[kind] = step
    parts: dict[str, list[float]] = {}

    def add(name: str, start: Any, end: Any) -> None:
        if start is not None and end is not None:
            parts.setdefault(name, []).append((end - start).total_seconds() * 1000)

    spans = []
    for run_id, run in runs.items():
        got = by_run.get(run_id, {})
        hook, work, release = got.get("hook"), got.get(LIMITED_STEP), got.get("release_slot")
        if run.started_at and run.finished_at:
            spans.append((run.finished_at - run.started_at).total_seconds())
        if hook is None or work is None or release is None:
            continue
        add("run started → acquire_slot recorded", run.started_at, hook.finished_at)
        add(f"acquire_slot → {LIMITED_STEP} started", hook.finished_at, work.started_at)
        add(f"{LIMITED_STEP}", work.started_at, work.finished_at)
        add(f"{LIMITED_STEP} → release_slot recorded", work.finished_at, release.finished_at)
        add("release_slot → run finished", release.finished_at, run.finished_at)
        add("the run in the worker (started → finished)", run.started_at, run.finished_at)
    phases = {name: percentile(values, 50) for name, values in parts.items()}
    phases["workers busy (share of the load's time)"] = sum(spans) / (in_flight * seconds) if seconds else 0.0
    return phases


# --- the box's run concurrency (issue 27, SPEC 12): runs/s with a box of base 4 and without ------

BOX_BASE, BOX_BURST = 4, 2.0


def declare_box(on: bool) -> None:
    """The bench's workspace with the box's run concurrency (base 4, burst 2.0: one workflow runs
    at most 4 at once, the box 8) or without it (the box bound stays, undeclared: runs started then
    take no box slot), as a deploy would sync it (services.sync_workspace)."""
    import dataclasses

    from limits import services
    from limits.config import RunConcurrency, load_workspace

    workspace = load_workspace()
    box = RunConcurrency(BOX_BASE, BOX_BURST) if on else None
    services.sync_workspace(dataclasses.replace(workspace, run_concurrency=box))


def box(n: int, workers_count: int = 2, rounds: int = 2) -> dict[str, Any]:
    """`n` runs of the one-step `bench_run_plain` without the box, then `n` with a box of base 4,
    `rounds` times in turn (without, with, without, with: drift on a loaded machine shows as a
    spread, not as a difference), through `workers_count` Celery workers (solo pool), as scenario
    9. Under the box every run takes a box slot of its workflow's pool in its start acquisition
    (the box row and the workflow's key row locked at start_run), a run past the base is created
    `queued` and is started by the end of another (its box slot handed over, the run woken, its
    worker confirming the reservation at the start gate), and every run's end frees its box slot.
    Then every run completed (measure raises otherwise) and limits.verify over every limit (the
    box's check k included); the box is left undeclared for the scenarios after this one."""
    from limits import verify
    from tests.bench.handoff import purge_broker
    from tests.bench.workflows import RUN_PLAIN

    purge_broker()
    workers = [Worker() for _ in range(workers_count)]
    result: dict[str, list[dict[str, Any]]] = {"none": [], "box": []}
    try:
        for on in (False, True):
            declare_box(on)
            measure(RUN_PLAIN, 20, workers)  # warm-up: imports, connections, the box's rows
        for _ in range(rounds):
            for on in (False, True):
                declare_box(on)
                log(f"  {n} runs of {RUN_PLAIN} {'under a box of base 4' if on else 'without a box'}")
                figures = measure(RUN_PLAIN, n, workers)
                figures.pop("ids")
                log(
                    f"    {figures['per_s']:.1f} runs/s ({figures['seconds']:.1f} s; starting them took "
                    f"{figures['enqueue_s']:.1f} s, {figures['queued_at_start']} queued at start); created → "
                    f"finished p50 {figures['p50_ms']:.0f} / p95 {figures['p95_ms']:.0f} ms; "
                    f"at most {figures['max_running']} running; {figures['cpu_text']}"
                )
                result["box" if on else "none"].append(figures)
    finally:
        declare_box(False)
        for worker in workers:
            worker.stop()
    checked = verify.verify()
    log(f"  limits verify: {checked.summary()}")
    for violation in checked.violations[:10]:
        log(f"    {violation}")
    return {**result, "verify": checked}
