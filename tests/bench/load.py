"""Scenarios 1 and 5: OS processes looping acquire -> hold ~0 ms -> release for a fixed time,
through the engine, and the bare two-statement semaphore on one hot row as the reference.

Each function here is the body of one child process (multiprocessing, spawn): it sets Django up
against the bench database, waits at the barrier, loops until the shared deadline, and puts
its counts on the result queue.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from typing import Any

from tests.bench.common import log, median, psycopg_dsn

SEMAPHORE_TABLE = "bench_semaphore"
# s: a lost notification costs at most this much before the process looks again. Runs are never
# polled (they are woken, or recovered within 15 s); a short timeout here would make every waiting
# process call acquire 20 times a second for nothing (at 32 processes that was most of the CPU).
WAKE_TIMEOUT = 1.0


@dataclass(frozen=True)
class Load:
    kind: str  # "engine" | "reference"
    limits: tuple[str, ...]  # processes are spread evenly over these (or over semaphore rows 1..n)
    processes: int  # per limit
    seconds: float
    capacity: int = 4


def repeat(load: Load, runs: int) -> dict[str, Any]:
    """`runs` timed runs of a load with the same processes (started once, connected and warm):
    median, min and max cycles/s. Each run opens the barrier, then sums the processes' cycles."""
    if load.kind == "reference":
        reset_semaphore(len(load.limits))
    ctx = multiprocessing.get_context("spawn")
    total = load.processes * len(load.limits)
    barrier = ctx.Barrier(total + 1)
    results = ctx.Queue()
    target = _engine_child if load.kind == "engine" else _reference_child
    children = [
        ctx.Process(
            target=target,
            args=(
                index,
                load.limits[index % len(load.limits)],
                index % len(load.limits) + 1,
                load,
                runs,
                barrier,
                results,
            ),
        )
        for index in range(total)
    ]
    for child in children:
        child.start()
    figures = []
    try:
        for number in range(runs):
            barrier.wait(timeout=180)  # every child is connected and warm, and done with the last run
            outcomes = [results.get(timeout=load.seconds + 180) for _ in children]
            errors = [o["error"] for o in outcomes if "error" in o]
            if errors:
                raise RuntimeError(f"a {load.kind} process failed: {errors[0]}")
            cycles = sum(o["cycles"] for o in outcomes)
            figures.append(cycles / load.seconds)
            log(
                f"  {load.kind} x{len(load.limits)} limit(s), {load.processes} proc each, run {number + 1}: "
                f"{figures[-1]:.0f} cycles/s (queued {sum(o.get('queued', 0) for o in outcomes)}, "
                f"waited {sum(o.get('wait_s', 0.0) for o in outcomes):.1f} process-s, "
                f"retries {sum(o.get('retries', 0) for o in outcomes)})"
            )
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    return {"median": median(figures), "min": min(figures), "max": max(figures), "runs": figures}


# --- the reference -------------------------------------------------------------------------------


def create_semaphore() -> None:
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {SEMAPHORE_TABLE} (id int PRIMARY KEY, busy int NOT NULL)")


def reset_semaphore(rows: int) -> None:
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {SEMAPHORE_TABLE}")
        for row in range(1, rows + 1):
            conn.execute(f"INSERT INTO {SEMAPHORE_TABLE} (id, busy) VALUES (%s, 0)", [row])


def _reference_child(index: int, limit: str, row: int, load: Load, runs: int, barrier: Any, results: Any) -> None:
    """The bare semaphore: two autocommit UPDATEs on one hot row per cycle, each a durable commit;
    a process that finds the row full retries at once."""
    import psycopg

    try:
        conn = psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True)
        take = f"UPDATE {SEMAPHORE_TABLE} SET busy = busy + 1 WHERE id = %s AND busy < %s"
        give = f"UPDATE {SEMAPHORE_TABLE} SET busy = busy - 1 WHERE id = %s"
        for _ in range(runs):
            cycles = retries = 0
            barrier.wait(timeout=180)
            deadline = time.monotonic() + load.seconds
            with conn.cursor() as cur:
                while time.monotonic() < deadline:
                    cur.execute(take, [row, load.capacity], prepare=True)
                    if cur.rowcount == 0:
                        retries += 1
                        continue
                    cur.execute(give, [row], prepare=True)
                    cycles += 1
            results.put({"cycles": cycles, "retries": retries})
        conn.close()
    except Exception as error:  # noqa: BLE001 - reported to the parent
        results.put({"error": repr(error)})


# --- the engine ----------------------------------------------------------------------------------


def _engine_child(index: int, limit: str, row: int, load: Load, runs: int, barrier: Any, results: Any) -> None:
    """The engine, the way runs use it: acquire (a busy slot at once, or join the queue); a queued
    request waits to be woken and calls acquire again with the same request, which confirms the
    reservation; then release. Waking is LISTEN/NOTIFY: every process listens on its own channel
    and announces the runs the engine woke (the `runs_woken` signal, after commit) with
    pg_notify on a side connection whose commits are not flushed (a wake is not durable state),
    in place of the run layer's wake (a Celery task per run).
    """
    try:
        import django

        django.setup()
        import psycopg
        from django.db import connection

        from limits import services
        from limits.signals import runs_woken

        run_id = f"bench-p{index}"
        side = psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True)
        side.execute("SET synchronous_commit = off")
        side.execute(f"LISTEN {_channel(run_id)}")

        def announce(sender: object, run_ids: list[str], **kwargs: object) -> None:
            side.execute("SELECT pg_notify(c, '') FROM unnest(%s::text[]) AS c", [[_channel(r) for r in run_ids]])

        # These processes are not workflow runs: the run layer's receiver would look their ids up
        # in studio_run and find nothing (one UPDATE per hand-off, ~30 % of this figure). Its
        # wake is measured where it belongs, in scenario 2 (hand-off through a real worker).
        runs_woken.disconnect(dispatch_uid="limits-wake-runs")
        runs_woken.connect(announce, weak=False, dispatch_uid="bench-announce")
        connection.ensure_connection()
        number = 0
        for _ in range(runs):
            cycles = queued = wakes = 0
            wait_s = 0.0
            barrier.wait(timeout=180)
            deadline = time.monotonic() + load.seconds
            while time.monotonic() < deadline:
                number += 1
                request = f"{run_id}:{number}"
                got = services.acquire(limit, run_id=run_id, request=request)
                if got.state == "waiting":
                    queued += 1
                    waited = time.monotonic()
                    while got.state == "waiting":
                        # Collect the notifications first, then query (psycopg: no query inside
                        # the notifies() loop). A stale one only costs one extra acquire call.
                        list(side.notifies(timeout=WAKE_TIMEOUT, stop_after=1))
                        wakes += 1
                        got = services.acquire(limit, run_id=run_id, request=request)
                    wait_s += time.monotonic() - waited
                if got.state != "busy":
                    raise RuntimeError(f"acquire ended {got.state}")
                services.release(got.slot_id)
                if time.monotonic() < deadline:
                    cycles += 1
            results.put({"cycles": cycles, "queued": queued, "wakes": wakes, "wait_s": wait_s})
        side.close()
    except Exception as error:  # noqa: BLE001 - reported to the parent
        import traceback

        results.put({"error": traceback.format_exc() or repr(error)})


def _channel(run_id: str) -> str:
    return run_id.replace("-", "_")
