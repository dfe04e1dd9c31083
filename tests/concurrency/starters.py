"""The ``starter`` role of tests/concurrency/worker.py: one process's runs of a workflow whose own
bound skips and caps its queue (SPEC 14.2, 14.5 for a run's start). It starts runs (a random key
of a few, on_full its bound's 'skip', or 'wait' or 'replace' for the call), advances its runs as a Celery worker
would (a woken queued run passes the start gate, then its body runs and ends, freeing its slot for
the next), and cancels one now and then; at the end it drains what it started. It reports each
start's answer: the run's status, its reason and limit. A start that replaces (SPEC 14.3) ends
its key's runs queued to start 'replaced'."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from limits.runs import workflow

WORKFLOW = "stress_start_skips"
BOUND = f"workflow.{WORKFLOW}"
KEYS = ["acme", "globex", "initech", None]
# total 3, per_key 2: keys fill their pools and the bound; the queue holds at most 4 runs, a key 2.
CONCURRENCY = {"total": 3, "per_key": 2, "on_full": "skip", "max_waiting": 4, "max_waiting_per_key": 2}


@workflow(name=WORKFLOW, concurrency=CONCURRENCY)
def stress_start_skips(input: dict[str, Any]) -> dict[str, Any]:
    return input


def starter(params: dict[str, Any]) -> dict[str, Any]:
    from tests.conftest import use_broker

    use_broker("memory://", eager=False)  # nobody consumes: this process advances its own runs
    from django.db import DatabaseError

    from limits.runs import start_run
    from stackbone.runs.models import Run
    from stackbone.runs.runtime import advance, cancel_run

    rng = random.Random(params["seed"])
    deadline = time.monotonic() + params["seconds"]
    mine: list[str] = []
    started: list[dict[str, Any]] = []
    stats = {"advanced": 0, "cancelled": 0, "errors": 0}

    def unfinished() -> list[str]:
        return list(
            Run.objects.filter(id__in=mine, status__in=["queued", "pending", "running"]).values_list("id", flat=True)
        )

    ops = 0
    while ops < params["ops"] and (ops < params["min_ops"] or time.monotonic() < deadline):
        ops += 1
        roll = rng.random()
        try:
            if roll < 0.55:
                run = start_run(
                    WORKFLOW,
                    {"n": ops},
                    concurrency_key=rng.choice(KEYS),
                    on_full=rng.choice([None, None, "wait", "replace"]),
                )
                mine.append(run.id)
                started.append({"id": run.id, "status": run.status, "reason": run.end_reason, "limit": run.end_limit})
            elif roll < 0.95:
                live = unfinished()
                if live:
                    advance(rng.choice(live))
                    stats["advanced"] += 1
            else:
                live = unfinished()
                if live and cancel_run(rng.choice(live)):
                    stats["cancelled"] += 1
        except DatabaseError:
            stats["errors"] += 1
    drain_until = time.monotonic() + params.get("drain", 30)
    while (live := unfinished()) and time.monotonic() < drain_until:
        for run_id in live:
            advance(run_id)
        time.sleep(0.01)
    for run_id in unfinished():  # still queued after the drain: leave every queue
        cancel_run(run_id)
    stop = params.get("stop_file")
    return {"started": started, "stats": stats, "ops": ops, "stopped": bool(stop and Path(stop).exists())}
