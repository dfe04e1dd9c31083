"""python -m tests.bench.django_tasks [--quick] [--runs N] [--enqueues N] [--workers 2] [--keep-db]

Django's task API through the box (issue 46, limits.django_tasks) beside start_run, in one sitting,
on PostgreSQL + Redis (DATABASE_URL, CELERY_BROKER_URL) in a database of its own
(<name>_tasks_bench, created, migrated and dropped). Prints one markdown table; progress goes to
stderr.

1. The cost of starting one: `task.enqueue(n)` against `start_run(workflow, {"n": n})` of a
   workflow with the same one-step body, each its own transaction, with no worker running (the
   run row, its place in its bounds' queue, the message to Redis), for a task without bounds and
   for one whose run holds `partner-api` (capacity 4 in the bench's workspace, so most of them
   queue). Interleaved, so both see the same machine.
2. Runs through that limit: N tasks of `@task(limits=["partner-api"])` against N runs of
   `@workflow(limits=["partner-api"])`, each started one after the other, through the same Celery
   workers (solo pool); runs/s from just before the first start to the last finish, and at most how
   many ran at once (never more than 4). Then `limits verify` over every limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.bench.common import (
    REFUSE_BROKER,
    REFUSE_DATABASE,
    configure_environment,
    create_database,
    drop_database,
    log,
    machine,
    percentile,
)

PARTNER = "partner-api"  # capacity 4 in tests.bench.workspace
LIMITED_WORKFLOW = "bench_tasks_limited"
PLAIN_WORKFLOW = "bench_tasks_plain"
LIMITED_TASK = "tests.bench.django_tasks.limited_task"
PLAIN_TASK = "tests.bench.django_tasks.plain_task"

if __name__ != "__main__":  # imported once Django is set up: by main(), and by the workers (STACKBONE_WORKFLOWS)
    from django.tasks import task

    from limits.runs import step, workflow

    @task
    def plain_task(n: int) -> int:
        return n + 1

    @task(limits=[PARTNER])  # type: ignore[call-overload]  # django-stubs' @task takes no backend options
    def limited_task(n: int) -> int:
        return n + 1

    @step
    def plain_step(n: int) -> int:
        return n + 1

    @workflow(name=PLAIN_WORKFLOW)
    def plain_workflow(input: dict[str, Any]) -> int:
        return int(plain_step(int(input["n"])))

    @workflow(name=LIMITED_WORKFLOW, limits=[PARTNER])
    def limited_workflow(input: dict[str, Any]) -> int:
        return int(plain_step(int(input["n"])))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.django_tasks", description=__doc__.splitlines()[2])
    parser.add_argument("--quick", action="store_true", help="200 enqueues and 200 runs of each")
    parser.add_argument("--enqueues", type=int, default=None, help="starts timed of each kind (default 1000)")
    parser.add_argument("--runs", type=int, default=None, help="runs of each through the limit (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes, solo pool (default 2)")
    parser.add_argument("--keep-db", action="store_true", help="keep the bench database afterwards")
    args = parser.parse_args(argv)
    args.enqueues = args.enqueues or (200 if args.quick else 1000)
    args.runs = args.runs or (200 if args.quick else 1000)
    return args


def tasks_bench_url(url: str) -> str:
    """<name>_tasks_bench: not the main bench's database, which may run beside this one."""
    parts = urlsplit(url)
    name = (parts.path.lstrip("/") or "stackbone").removesuffix("_bench")
    return urlunsplit(parts._replace(path=f"/{name}_tasks_bench"))


# --- 1. the cost of starting one ---------------------------------------------------------------------


def starters() -> dict[str, Callable[[int], str]]:
    from limits.runs import start_run
    from tests.bench import django_tasks as bench

    return {
        "start_run": lambda n: start_run(PLAIN_WORKFLOW, {"n": n}).id,
        "enqueue": lambda n: bench.plain_task.enqueue(n).id,
        "start_run, limited": lambda n: start_run(LIMITED_WORKFLOW, {"n": n}).id,
        "enqueue, limited": lambda n: bench.limited_task.enqueue(n).id,
    }


def start_cost(n: int) -> dict[str, dict[str, float]]:
    """ms per start of each kind, interleaved (one of each in turn), no worker running; the runs
    are cancelled afterwards (their places in the queue too)."""
    from stackbone.runs.runtime import cancel_run
    from tests.bench.handoff import purge_broker

    kinds = starters()
    for start in kinds.values():  # warm-up: imports, plans, the limit's row in cache
        for i in range(20):
            start(i)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for i in range(n):
        for kind, start in kinds.items():
            began = time.perf_counter()
            start(i)
            times[kind].append((time.perf_counter() - began) * 1000)
    _cancel_unfinished(cancel_run)
    purge_broker()
    return {
        kind: {"mean": sum(ms) / len(ms), "p50": percentile(ms, 50), "p95": percentile(ms, 95)}
        for kind, ms in times.items()
    }


def _cancel_unfinished(cancel: Callable[[str], bool]) -> None:
    from stackbone.runs.models import Run

    for run_id in Run.objects.filter(status__in=["queued", "pending", "running"]).values_list("id", flat=True):
        cancel(run_id)


# --- 2. runs through a limit ------------------------------------------------------------------------


def through_the_limit(n: int, workers_count: int) -> dict[str, Any]:
    from limits import verify
    from tests.bench.handoff import Worker, purge_broker

    purge_broker()
    kinds = starters()
    workers = [Worker() for _ in range(workers_count)]
    try:
        for kind in ("start_run, limited", "enqueue, limited"):
            _measure(kinds[kind], 20, workers[0])  # warm-up: the workers import the tasks' module
        figures = {}
        for kind in ("start_run, limited", "enqueue, limited"):
            log(f"  {n} runs: {kind}")
            figures[kind] = _measure(kinds[kind], n, workers[0])
            log(f"    {figures[kind]['per_s']:.1f} runs/s, at most {figures[kind]['max_running']} at once")
    finally:
        for worker in workers:
            worker.stop()
    checked = verify.verify()
    log(f"  limits verify: {checked.summary()}")
    return {"figures": figures, "verify": checked}


def _measure(start: Callable[[int], str], n: int, worker: Any) -> dict[str, Any]:
    from django.utils import timezone

    from stackbone.runs.models import Run
    from tests.bench.handoff import wait_for

    t0 = timezone.now()
    ids = [start(i) for i in range(n)]
    finished = ["completed", "failed", "cancelled"]
    last = Run.objects.filter(id=ids[-1], status__in=finished)
    ended = Run.objects.filter(id__in=ids, status__in=finished)
    wait_for(lambda: last.exists() and ended.count() == n, f"{n} runs to end", worker, timeout=max(300, n))
    rows = list(Run.objects.filter(id__in=ids).values_list("status", "started_at", "finished_at"))
    if any(status != "completed" for status, *_ in rows):
        raise RuntimeError(f"{sum(status != 'completed' for status, *_ in rows)} of {n} runs did not complete")
    seconds = (max(end for *_, end in rows) - t0).total_seconds()
    events = sorted([(s, 1) for _, s, _ in rows] + [(f, -1) for *_, f in rows], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return {"n": n, "seconds": seconds, "per_s": n / seconds, "max_running": peak}


def table(box: dict[str, str], costs: dict[str, dict[str, float]], limit: dict[str, Any], args: Any) -> str:
    lines = [
        f"Machine: {box['cores']} cores, PostgreSQL {box['postgres']} (synchronous_commit="
        f"{box['synchronous_commit']}, fsync={box['fsync']}), Python {box['python']}; {args.enqueues} starts "
        f"of each kind, {args.runs} runs of each through {PARTNER} (capacity 4), {args.workers} solo workers.",
        "",
        "| measure | start_run | django.tasks enqueue | enqueue / start_run |",
        "|---|---|---|---|",
    ]
    for label, plain, task in (
        ("start one, no bounds: ms mean (p50 / p95)", "start_run", "enqueue"),
        (f"start one holding {PARTNER}: ms mean (p50 / p95)", "start_run, limited", "enqueue, limited"),
    ):
        a, b = costs[plain], costs[task]
        lines.append(
            f"| {label} | {a['mean']:.2f} ({a['p50']:.2f} / {a['p95']:.2f}) | "
            f"{b['mean']:.2f} ({b['p50']:.2f} / {b['p95']:.2f}) | {b['mean'] / a['mean']:.2f} |"
        )
    a, b = limit["figures"]["start_run, limited"], limit["figures"]["enqueue, limited"]
    lines.append(
        f"| runs/s through {PARTNER} (at most at once) | {a['per_s']:.1f} ({a['max_running']}) | "
        f"{b['per_s']:.1f} ({b['max_running']}) | {b['per_s'] / a['per_s']:.2f} |"
    )
    lines.append(f"| limits verify | {limit['verify'].summary()} | | |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print(REFUSE_DATABASE, file=sys.stderr)
        return 2
    if not os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://")):
        print(REFUSE_BROKER, file=sys.stderr)
        return 2
    bench_url = tasks_bench_url(url)
    var_dir = tempfile.mkdtemp(prefix="stackbone-tasks-bench-")
    configure_environment(bench_url, var_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.django_tasks.settings"  # the box's, with TASKS on LimitsBackend
    os.environ["STACKBONE_WORKFLOWS"] += ",tests.bench.django_tasks"
    started = time.monotonic()
    log(f"creating {bench_url.rsplit('/', 1)[-1]} and migrating")
    create_database(bench_url)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        log(f"1. {args.enqueues} starts of each kind, interleaved, no worker")
        costs = start_cost(args.enqueues)
        for kind, ms in costs.items():
            log(f"    {kind}: {ms['mean']:.2f} ms (p50 {ms['p50']:.2f}, p95 {ms['p95']:.2f})")
        log(f"2. runs through {PARTNER}, {args.workers} workers")
        limit = through_the_limit(args.runs, args.workers)
        print(table(machine(bench_url), costs, limit, args))
    finally:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(var_dir, ignore_errors=True)
        if args.keep_db:
            log(f"kept {bench_url}")
        else:
            drop_database(bench_url)
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
