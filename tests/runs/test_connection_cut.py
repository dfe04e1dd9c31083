"""SPEC 2.5 under a cut database connection, with a real Celery worker on PostgreSQL.

Must never happen: an execution of the work `with_limit` guards lies outside the granted
interval [granted_at, freed_at] of its slot, or more executions overlap than the capacity.

Found by an independent fault run (issue 11): the worker's connection was killed while the
guarded step ran; recording the step's result raised OperationalError; `hold_slot` released the
slot on a fresh connection; the task retried, and the replay ran the step again after the slot
had gone to the next run.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from django.db import connection

import tests.runs.guarded  # noqa: F401 - registers test_guarded_step in this process too
from limits.models import Slot
from stackbone.models import Run
from studio.workflows import start_run
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare
from tests.runs.conftest import Worker, status, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres]

WORKFLOWS = {"STACKBONE_WORKFLOWS": "studio.workflows,tests.runs.guarded"}


def kill_other_backends() -> int:
    """What a PostgreSQL restart, an idle-connection killer or a failover does to a worker."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def executions(log: Path) -> list[dict]:
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line]
    for line in lines:
        line["start"], line["end"] = dt.datetime.fromisoformat(line["start"]), dt.datetime.fromisoformat(line["end"])
    return lines


def started(log: Path) -> list[str]:
    marks = Path(f"{log}.started")
    return marks.read_text().split() if marks.exists() else []


def test_a_cut_connection_during_a_with_limit_step_never_runs_the_step_outside_its_slot(workers, tmp_path) -> None:
    declare(partner_api={"capacity": 1, "max_hold": "1h"})
    log = tmp_path / "executions.jsonl"
    workers.extend([Worker(env=WORKFLOWS), Worker(env=WORKFLOWS)])  # one is busy in the step
    worker = workers[0]
    first = start_run("test_guarded_step", {"limit": "partner-api", "run": "first", "seconds": 3, "log": str(log)})
    wait_for(lambda: started(log) == ["first"], what="the guarded step to start", worker=worker)
    second = start_run("test_guarded_step", {"limit": "partner-api", "run": "second", "seconds": 0.2, "log": str(log)})
    wait_for(lambda: Run.objects.get(id=second.id).suspended, what="the second run to wait", worker=worker)
    time.sleep(0.5)
    assert kill_other_backends() >= 1

    for run in (first, second):

        def ended(run: Run = run) -> bool:
            return status(run) in ("completed", "failed")

        wait_for(ended, what="both runs", worker=worker, timeout=90)
    assert (status(first), status(second)) == ("completed", "completed")

    ran = executions(log)
    slots = {slot.id: slot for slot in Slot.objects.filter(limit__name="partner-api")}
    assert {line["run"] for line in ran} == {"first", "second"}
    assert len([line for line in ran if line["run"] == "first"]) == 2, "the cut step runs again on replay"
    for line in ran:
        slot = slots[line["slot"]]
        assert slot.freed_at is not None
        assert slot.granted_at <= line["start"] and line["end"] <= slot.freed_at, (
            f"{line['run']} ran {line['start']:%T.%f}-{line['end']:%T.%f} outside its slot "
            f"{slot.granted_at:%T.%f}-{slot.freed_at:%T.%f} ({slot.state})"
        )
    ordered = sorted(ran, key=lambda line: line["start"])
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        assert earlier["end"] <= later["start"], "two guarded steps ran at once on a capacity of 1"
    assert_counters_match_rows("partner-api")
