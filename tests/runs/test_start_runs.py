"""Starting runs (issue 44): `start_runs` creates many runs of one workflow in one transaction and
takes their start acquisitions in the order given (SPEC 11.3: trigger order); a start, one run or
a batch, is one statement on PostgreSQL (limits_start_runs) whatever its bounds and the box.

Must never happen: a batch partly written (a bad input, key or limit refuses it whole, nothing
stays); runs of a batch queued out of the order given; a run started past its bounds.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.config import define_workspace
from limits.models import QueueEntry, Slot
from limits.runs import WorkflowError, start_run, start_runs, workflow
from limits.runs import bounds as run_bounds
from limits.verify import verify
from stackbone.models import Run
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare

pytestmark = pytest.mark.django_db(transaction=True)


@workflow(name="test_batch_plain")
def batch_plain(input: dict) -> dict:
    return input


@workflow(name="test_batch_capped", concurrency={"total": 2, "per_key": 1})
def batch_capped(input: dict) -> dict:
    return input


@pytest.fixture
def capped(no_worker) -> None:
    declare(partner_api={"capacity": 5, "max_hold": "1h"})
    run_bounds.sync(["test_batch_capped"])


def test_a_batch_starts_in_the_order_given_and_queues_the_rest_in_that_order(capped) -> None:
    runs = start_runs(batch_capped, [{"n": i} for i in range(6)], concurrency_keys=["a", "b", "a", "c", "b", "a"])
    assert [run.input for run in runs] == [{"n": i} for i in range(6)]
    assert [run.status for run in runs] == ["pending", "pending", "queued", "queued", "queued", "queued"]
    for run in runs:  # what start_runs answered is what the rows hold
        row = Run.objects.get(id=run.id)
        assert (row.status, row.concurrency_key, row.bounds, row.created_at) == (
            run.status,
            run.concurrency_key,
            run.bounds,
            run.created_at,
        )
    queued = list(
        QueueEntry.objects.filter(limit__name="workflow.test_batch_capped", state="waiting")
        .order_by("position")
        .values_list("run_id", flat=True)
    )
    assert queued == [run.id for run in runs[2:]]
    held = Slot.objects.filter(limit__name="workflow.test_batch_capped", state="busy")
    assert sorted(held.values_list("run_id", flat=True)) == sorted(run.id for run in runs[:2])
    assert all(held.values_list("ends_with_run", flat=True))  # ending the run frees them
    assert verify().ok, verify().violations
    assert_counters_match_rows("workflow.test_batch_capped")


def test_a_batch_with_a_bad_input_or_key_writes_nothing_and_names_the_index(capped) -> None:
    with pytest.raises(WorkflowError, match=r"inputs\[2\] must be JSON-serializable"):
        start_runs(batch_capped, [{"n": 0}, {"n": 1}, {"n": float("nan")}])
    with pytest.raises(WorkflowError, match=r"concurrency_keys\[1\]: key must not contain control characters"):
        start_runs(batch_capped, [{"n": 0}, {"n": 1}], concurrency_keys=["a", "\x00"])
    with pytest.raises(WorkflowError, match="one key per input: 1 keys for 2 inputs"):
        start_runs(batch_capped, [{}, {}], concurrency_keys=["a"])
    with pytest.raises(WorkflowError, match="unknown limit 'nope'"):
        start_runs(batch_plain, [{}, {}], limits=["nope"])
    with pytest.raises(WorkflowError, match="inputs must be a list"):
        start_runs(batch_plain, {"n": 1})  # type: ignore[arg-type]
    assert not Run.objects.exists()
    assert not Slot.objects.exists() and not QueueEntry.objects.exists()
    assert start_runs(batch_plain, []) == []


def test_a_batch_under_the_box_holds_the_box_for_each_run(no_worker) -> None:
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 2, "burst": 1.5}))
    runs = start_runs(batch_plain, [{"n": i} for i in range(4)])
    assert [run.status for run in runs] == ["pending", "pending", "queued", "queued"]  # base 2 per workflow
    assert all(run.bounds == ["box"] for run in runs)
    assert verify().ok, verify().violations


def test_a_start_returns_the_run_as_its_row_holds_it(no_worker) -> None:
    run = start_run(batch_plain, {"n": (1, 2)})
    assert run.input == {"n": [1, 2]}  # as JSON keeps it
    assert run.status == "pending" and run.dispatched_at == run.created_at
    row = Run.objects.get(id=run.id)
    for field in ("workflow", "input", "status", "created_at", "updated_at", "dispatched_at", "bounds", "reference"):
        assert getattr(row, field) == getattr(run, field), field


@requires_postgres
@pytest.mark.parametrize("case", ["plain", "bound", "box", "batch of 50"])
def test_a_start_is_one_statement_on_postgresql(capped, case: str) -> None:
    """limits_start_runs: the run(s), the box's and the bounds' acquisitions, the ties and the
    statuses in one call; it was 5 statements for a plain start and 9-10 with bounds or the box."""
    if case == "box":
        services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 8, "burst": 1.0}))
    start_run(batch_capped, {}, concurrency_key="warm")  # the bound exists (11.6 synced it)
    with CaptureQueriesContext(connection) as queries:
        if case == "batch of 50":
            start_runs(batch_capped, [{"n": i} for i in range(50)], concurrency_keys=[f"k{i}" for i in range(50)])
        else:
            start_run(batch_plain if case == "plain" else batch_capped, {"n": 1}, concurrency_key="k")
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert "limits_start_runs" in queries[0]["sql"]
