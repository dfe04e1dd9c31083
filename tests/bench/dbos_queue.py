"""DBOS's queue, the peer the run scenario is measured against (issue 17; `dbos` is in the optional
`bench` extra, never a runtime dependency).

`python -m tests.bench.dbos_queue '{"url": ..., "n": 2000, "polling": 1.0, "concurrency": 4}'`, in a
process of its own (DBOS is a process-wide singleton): launches DBOS on the system database `url`
(PostgreSQL; the caller creates and drops it), with one queue of `concurrency` polled every
`polling` seconds, warms up, enqueues `n` workflows of one step each (the shape of our run
scenario: take a place under the cap → one step → give it back, here by ending), waits for every
one to succeed, and prints one JSON line: runs/s from just before the first enqueue to the last
completion, created → completed p50/p95, and the time from a workflow's completion (its place
under the cap freed) to the next step starting, p50/p95, all from DBOS's own rows
(workflow_status, operation_outputs; ms on the database host's clock, this host).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.bench.common import cpu_split, cpu_split_text, percentile

ROOT = Path(__file__).resolve().parents[2]


def available() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def release_to_next_start(releases: list[float], starts: list[float]) -> list[float]:
    """For each release (a place freed), the time until the next step start after it, in the
    units given; releases after the last start are left out. When the cap binds (every run queued
    up front) that next start is the run admitted to the freed place: the hand-off."""
    import bisect

    ordered = sorted(starts)
    gaps = []
    for released in releases:
        index = bisect.bisect_right(ordered, released)
        if index < len(ordered):
            gaps.append(ordered[index] - released)
    return gaps


def measure(url: str, n: int, polling: float, concurrency: int = 4, warmup: int = 8) -> dict[str, Any]:
    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID

    DBOS(config={"name": "stackbone-bench", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.step()
    def one_step(i: int) -> int:
        return i + 1

    @DBOS.workflow()
    def one_step_workflow(i: int) -> int:
        return one_step(i)

    DBOS.launch()
    try:
        # A queue is declared after launch (DBOS 3.4 keeps its settings in the system database).
        queue = DBOS.register_queue(
            "bench", global_concurrency=concurrency, polling_interval_sec=polling, on_conflict="always_update"
        )
        handles = [queue.enqueue(one_step_workflow, i) for i in range(warmup)]
        for handle in handles:
            handle.get_result()
        tag = uuid.uuid4().hex[:8]
        cpu0 = cpu_split()
        t0 = time.time() * 1000
        handles = []
        for i in range(n):
            with SetWorkflowID(f"{tag}-{i}"):
                handles.append(queue.enqueue(one_step_workflow, i))
        enqueue_ms = time.time() * 1000 - t0
        for handle in handles:
            handle.get_result()
        cpu1 = cpu_split()
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1).replace(
            "postgres://", "postgresql+psycopg://", 1))  # fmt: skip
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT w.created_at, w.started_at_epoch_ms, coalesce(w.completed_at, w.updated_at), "
                    "o.started_at_epoch_ms, w.status FROM dbos.workflow_status w "
                    "JOIN dbos.operation_outputs o ON o.workflow_uuid = w.workflow_uuid "
                    "WHERE w.workflow_uuid LIKE :tag"
                ),
                {"tag": f"{tag}-%"},
            ).all()
        engine.dispose()
    finally:
        DBOS.destroy()
    if len(rows) != n or any(r[4] != "SUCCESS" for r in rows):
        raise RuntimeError(f"{len(rows)} of {n} DBOS workflows found, not all SUCCESS")
    last = max(float(r[2]) for r in rows)
    seconds = (last - t0) / 1000
    handoff = release_to_next_start([float(r[2]) for r in rows], [float(r[3]) for r in rows])
    latency = [float(r[2]) - float(r[0]) for r in rows]
    return {
        "n": n,
        "polling": polling,
        "seconds": seconds,
        "per_s": n / seconds,
        "enqueue_s": enqueue_ms / 1000,
        "p50_ms": percentile(latency, 50),
        "p95_ms": percentile(latency, 95),
        "handoff_p50": percentile(handoff, 50),
        "handoff_p95": percentile(handoff, 95),
        "max_running": _max_overlap([(float(r[1]), float(r[2])) for r in rows]),
        "cpu_ms": cpu_split_text(cpu0, cpu1, n, "workflow")[0],
        "cpu_text": cpu_split_text(cpu0, cpu1, n, "workflow")[1],
    }


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def run(url: str, n: int, polling: float, concurrency: int = 4) -> dict[str, Any]:
    """measure() in a fresh process (DBOS keeps process-wide state); its figures, or an error."""
    import os
    import subprocess

    params = json.dumps({"url": url, "n": n, "polling": polling, "concurrency": concurrency})
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.dbos_queue", params],
        env=dict(os.environ), capture_output=True, text=True, check=False, timeout=max(600, 3 * n), cwd=ROOT,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the DBOS process failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    print(json.dumps(measure(given["url"], int(given["n"]), float(given["polling"]), int(given["concurrency"]))))
