"""A workflow under its own bound with on_full 'cancel_running' (SPEC 14.4) whose guarded step
writes down when it really runs, for the real-worker test of cancel_running
(tests/runs/test_cancel_running_worker.py). The worker imports this module through
STACKBONE_WORKFLOWS; the test process imports it to start the runs. Each execution of the step
appends one JSON line to the log: run, pid, start and end."""

from __future__ import annotations

import json
import os
import time

from django.utils import timezone

from studio.workflows import step, workflow


@step
def deploy_step(run: str, seconds: float, log: str) -> dict:
    started = timezone.now()
    with open(log + ".started", "a") as file:
        file.write(run + "\n")
    time.sleep(seconds)
    ended = timezone.now()
    line = {"run": run, "pid": os.getpid(), "start": started.isoformat(), "end": ended.isoformat()}
    with open(log, "a") as file:
        file.write(json.dumps(line) + "\n")
    return {"run": run}


@step
def after_deploy(run: str, log: str) -> None:
    with open(log + ".after", "a") as file:
        file.write(run + "\n")


@workflow(name="test_cancelling_deploy", concurrency={"per_key": 1, "on_full": "cancel_running"})
def cancelling_deploy(input: dict) -> dict:
    done = deploy_step(input["run"], float(input["seconds"]), input["log"])
    after_deploy(input["run"], input["log"])
    return done
