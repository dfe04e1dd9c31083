"""A workflow whose guarded step writes down when it really runs, for the tests that cut the
database connection under a real worker (the worker imports this module through
STACKBONE_WORKFLOWS). Each execution appends one JSON line: run, slot, start and end."""

from __future__ import annotations

import json
import os
import time

from django.utils import timezone

from limits.workflow import hold_slot
from studio.workflows import step, workflow


@step
def guarded_work(run: str, slot_id: str, seconds: float, log: str) -> dict:
    started = timezone.now()
    time.sleep(seconds)
    ended = timezone.now()
    line = {"run": run, "slot": slot_id, "pid": os.getpid(), "start": started.isoformat(), "end": ended.isoformat()}
    with open(log, "a") as file:
        file.write(json.dumps(line) + "\n")
    return {"slot": slot_id}


@step
def mark_started(log: str, run: str) -> None:
    with open(log + ".started", "a") as file:
        file.write(run + "\n")


@workflow(name="test_guarded_step")
def guarded_step(input: dict) -> dict:
    with hold_slot(input["limit"], label=input["run"]) as slot:
        mark_started(input["log"], input["run"])
        return guarded_work(input["run"], slot.id, float(input["seconds"]), input["log"])


@step
def database_backend() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@workflow(name="test_database_backend")
def database_backend_of_run(input: dict) -> dict:
    """The PostgreSQL server process that ran this run's step (which connection the worker used)."""
    return {"backend": database_backend()}
