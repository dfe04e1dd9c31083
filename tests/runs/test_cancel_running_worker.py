"""SPEC 14.4 with a real Celery worker (two processes, so the new run could start at once if the
slot were free): a run under a bound with on_full 'cancel_running' started while the key's run is
inside its guarded step cancels that run, which keeps its slot until the worker has finished the
step and stopped it (no step after the cancel); only then does the new run begin its step. The
side file of the real work shows the two never overlapped (tests/runs/cancelling.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

import tests.runs.cancelling  # noqa: F401 - registers test_cancelling_deploy in this process too
from limits.runs import bounds as run_bounds
from limits.runs import start_run
from limits.verify import verify
from stackbone.models import Run
from tests.factories import assert_counters_match_rows, holders
from tests.runs.conftest import Worker, status, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

BOUND = "workflow.test_cancelling_deploy"
WORKFLOWS = {"STACKBONE_WORKFLOWS": "studio.workflows,tests.runs.cancelling"}


def started(log: Path) -> list[str]:
    path = Path(f"{log}.started")
    return path.read_text().split() if path.exists() else []


def test_the_cancelled_run_s_guarded_work_never_overlaps_the_new_run_s(workers, tmp_path) -> None:
    run_bounds.sync(["test_cancelling_deploy"])
    worker = Worker(WORKFLOWS, pool="threads", concurrency=2)
    workers.append(worker)
    log = tmp_path / "work.jsonl"
    first = start_run("test_cancelling_deploy", {"run": "first", "seconds": 3, "log": str(log)}, concurrency_key="main")
    wait_for(lambda: started(log) == ["first"], what="the first run to begin its step", worker=worker)

    newer = start_run("test_cancelling_deploy", {"run": "newer", "seconds": 0, "log": str(log)}, concurrency_key="main")
    cancelled = Run.objects.get(id=first.id)
    assert (cancelled.status, cancelled.end_reason, cancelled.caused_by) == ("cancelled", "cancel_running", newer.id)
    assert cancelled.finished_at is None and holders(BOUND) == [(first.id, "busy")], "its step still runs"
    assert status(newer) == "queued"

    wait_for(lambda: status(newer) == "completed", what="the new run to start and complete", worker=worker)
    stopped = Run.objects.get(id=first.id)
    assert stopped.status == "cancelled" and stopped.finished_at is not None and stopped.lease_owner == ""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["run"] for line in lines] == ["first", "newer"]
    first_work, newer_work = lines
    assert dt.datetime.fromisoformat(newer_work["start"]) >= dt.datetime.fromisoformat(first_work["end"])
    assert not Path(f"{log}.after").read_text().split().count("first"), "the cancelled run took no step after"
    assert verify().ok, verify().violations
    assert_counters_match_rows(BOUND)
