"""SPEC 11 with a real Celery worker over the configured broker: runs of a workflow capped per key
start one at a time per key, in trigger order, and a run holding a named limit for its whole run
shares that limit's pool with acquire_slot (studio/workflows/tenants.py)."""

from __future__ import annotations

import pytest

from limits import services
from limits.runs import bounds as run_bounds
from stackbone.models import Run
from studio.workflows import start_run
from tests.factories import assert_counters_match_rows, declare
from tests.runs.conftest import Worker, status, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_runs_capped_per_key_start_one_at_a_time_in_trigger_order(workers) -> None:
    run_bounds.sync()
    worker = Worker()
    workers.append(worker)
    acme = [start_run("sync_tenant", {"tenant": "acme", "seconds": 0.3}, concurrency_key="acme") for _ in range(3)]
    zeta = start_run("sync_tenant", {"tenant": "zeta", "seconds": 0.3}, concurrency_key="zeta")
    # As start_run returned them (a worker may already have taken the first ones since).
    assert acme[0].status in ("pending", "running") and [run.status for run in acme[1:]] == ["queued", "queued"]
    assert zeta.status in ("pending", "running")  # another key's pool: not held back by acme's
    for run in (*acme, zeta):
        wait_for(lambda run=run: status(run) == "completed", what=f"{run.id} to complete", worker=worker, timeout=90)  # type: ignore[misc]  # bound per loop
    spans = []
    for run in acme:
        (step,) = [s for s in Run.objects.get(id=run.id).steps if s.name == "pull_changes"]
        spans.append((step.started_at, step.finished_at))
    assert spans == sorted(spans), "acme's runs ran in trigger order"
    for earlier, later in zip(spans, spans[1:], strict=False):
        assert earlier[1] <= later[0], "one acme run at a time"
    assert_counters_match_rows("workflow.sync_tenant")


def test_a_run_holding_a_named_limit_shares_its_pool_with_acquire_slot(workers) -> None:
    declare(partner_api={"capacity": 1, "max_hold": "10m"})
    holder = services.acquire("partner-api", run_id="someone-inside-a-run").slot_id
    worker = Worker()
    workers.append(worker)
    export = start_run("partner_export", {"name": "daily", "seconds": 0})
    assert status(export) == "queued"
    services.release(holder)
    wait_for(lambda: status(export) == "completed", what="the export to start and complete", worker=worker)
    assert_counters_match_rows("partner-api")
