"""A workflow of one step that holds its worker process until a file exists (or 60 s pass): runs
that keep a known number of a worker's processes busy for as long as a test needs
(tests/runs/test_worker_reports.py). The worker imports this module through STACKBONE_WORKFLOWS;
the test process imports it to start the runs."""

from __future__ import annotations

import time
from pathlib import Path

from limits.runs import step, workflow

HELD = "test_held_until_released"


@step
def hold_until(flag: str) -> bool:
    deadline = time.monotonic() + 60
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return Path(flag).exists()


@workflow(name=HELD)
def held(input: dict) -> dict:
    return {"released": hold_until(input["flag"])}
