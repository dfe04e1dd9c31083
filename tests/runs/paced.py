"""A workflow of one step that takes `ms` milliseconds (a sleep): a backlog of runs that keeps a
worker busy for a known while (tests/runs/test_maintenance_queue.py). The worker imports this
module through STACKBONE_WORKFLOWS; the test process imports it to start the runs."""

from __future__ import annotations

import time

from studio.workflows import step, workflow

PACED = "test_paced_step"


@step
def paced_work(ms: int) -> int:
    time.sleep(ms / 1000)
    return ms


@workflow(name=PACED)
def paced(input: dict) -> dict:
    return {"slept_ms": paced_work(int(input["ms"]))}
