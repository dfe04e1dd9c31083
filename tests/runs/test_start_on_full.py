"""SPEC 14.1, 14.2, 14.5, 14.6 for a run's start under a workflow's own bound: the bound declares
on_full and its queue's caps in @workflow(concurrency=...), synced to its limit; a start that
cannot be granted at once under a bound that skips, or whose queue (or its key's share) is at its
cap, ends the run at once 'skipped' with its reason and the limit, never started and in no queue,
counted on that limit; start_run and start_runs choose on_full per call; a batch is judged run by
run in order. Both databases, through the public names."""

from __future__ import annotations

import datetime as dt

import pytest

from limits import services
from limits.models import AuditEvent, Limit, QueueEntry, Slot
from limits.runs import bounds as run_bounds
from limits.runs import start_run, start_runs, workflow
from limits.verify import verify
from stackbone.models import Run, Step
from stackbone.runs import runtime
from stackbone.runs.runtime import WorkflowError, advance
from studio.workflows import step
from tests.factories import assert_counters_match_rows, queue

pytestmark = pytest.mark.django_db(transaction=True)

SKIPS = "workflow.test_start_skips"
SKIPS_PER_KEY = "workflow.test_start_skips_per_key"
CAPPED = "workflow.test_start_capped"


@step
def noted(label: str) -> str:
    return label


@workflow(name="test_start_skips", concurrency={"total": 1, "on_full": "skip"})
def skips(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_start_skips_per_key", concurrency={"total": 3, "per_key": 1, "on_full": "skip"})
def skips_per_key(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_start_capped", concurrency={"total": 1, "max_waiting": 2, "max_waiting_per_key": 1})
def capped(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_start_waits", concurrency={"total": 1})
def waits(input: dict) -> str:
    return noted(input.get("label", ""))


@pytest.fixture
def bounds(clock, no_worker):
    run_bounds.sync(["test_start_skips", "test_start_skips_per_key", "test_start_capped", "test_start_waits"])


def fresh(run: Run) -> Run:
    return Run.objects.get(id=run.id)


def assert_skipped(run: Run, reason: str, limit: str) -> None:
    row = fresh(run)
    assert (row.status, row.end_reason, row.end_limit, row.caused_by) == ("skipped", reason, limit, None)
    assert (run.status, run.end_reason, run.end_limit) == ("skipped", reason, limit)  # what start_run returned
    assert row.is_finished and row.started_at is None and row.finished_at is not None
    assert not row.suspended and row.waiting_for == "" and row.lease_owner == ""
    assert not QueueEntry.objects.filter(run_id=run.id).exists()
    assert not Slot.objects.filter(run_id=run.id).exists()
    assert not Step.objects.filter(run_id=run.id).exists()


# --- 14.1: the declaration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("concurrency", "message"),
    [
        ({"total": 1, "on_full": "drop"}, "concurrency on_full must be one of 'wait', 'skip'"),
        ({"total": 1, "max_waiting": 0}, "concurrency max_waiting must be a whole number from 1 to 1,000,000"),
        ({"total": 1, "max_waiting_per_key": "3"}, "concurrency max_waiting_per_key must be a whole number"),
        ({"total": 1, "max_waiting": True}, "concurrency max_waiting must be a whole number"),
        ({"on_full": "skip"}, "concurrency must give 'total', 'per_key' or both"),
        ({"total": 1, "on_ful": "skip"}, "unknown field 'on_ful'"),
    ],
)
def test_the_declaration_is_checked_and_the_error_names_the_field(concurrency, message) -> None:
    with pytest.raises(WorkflowError, match=message) as raised:
        workflow(lambda input: None, name="test_start_badly_declared", concurrency=concurrency)
    assert "workflow 'test_start_badly_declared'" in str(raised.value)


def test_the_bound_holds_its_on_full_and_caps_synced_from_the_decorator(bounds) -> None:
    skipping, capping = Limit.objects.get(name=SKIPS), Limit.objects.get(name=CAPPED)
    assert (skipping.declared_on_full, skipping.on_full, skipping.max_waiting) == ("skip", "skip", None)
    assert (capping.on_full, capping.declared_max_waiting, capping.declared_max_waiting_per_key) == ("wait", 2, 1)
    run_bounds.declare("test_start_capped", {"total": 1, "on_full": "skip", "max_waiting": 5}, None)
    try:
        report = run_bounds.sync(["test_start_capped"])
        capping = Limit.objects.get(name=CAPPED)
        assert report.updated == [CAPPED]
        assert (capping.on_full, capping.max_waiting, capping.max_waiting_per_key) == ("skip", 5, None)
        audit = AuditEvent.objects.filter(limit=capping, action=AuditEvent.Action.SYNC).latest("id")
        assert (audit.old_value, audit.new_value) == (
            "total 1, max_waiting 2, max_waiting_per_key 1",
            "total 1, on_full skip, max_waiting 5",
        )
        services.set_on_full(CAPPED, "wait", actor="ops")  # an operator's override survives a deploy
        run_bounds.sync(["test_start_capped"])
        assert Limit.objects.get(name=CAPPED).on_full == "wait"
    finally:
        run_bounds.declare(
            "test_start_capped", {"total": 1, "max_waiting": 2, "max_waiting_per_key": 1}, None, module=__name__
        )


def test_a_first_start_creates_the_bound_with_its_on_full(clock, no_worker) -> None:
    """SPEC 11.6: a bound the deploy did not sync is created by the first start, as declared."""
    holder = start_run(skips, {"label": "first"})
    assert Limit.objects.get(name=SKIPS).on_full == "skip"
    assert_skipped(start_run(skips, {"label": "second"}), "limit_full", SKIPS)
    assert fresh(holder).status == "pending"


# --- 14.2: skip ------------------------------------------------------------------------------------


def test_a_start_past_a_skipping_bound_ends_skipped_never_started_and_counted(bounds) -> None:
    holder = start_run(skips, {"label": "r1"})
    skipped = start_run(skips, {"label": "r2"})
    assert fresh(holder).status == "pending"
    assert_skipped(skipped, "limit_full", SKIPS)
    assert queue(SKIPS) == []
    assert Limit.objects.get(name=SKIPS).skipped_count == 1
    assert advance(skipped.id) == "skipped"  # finished: not runnable, nothing runs
    assert advance(holder.id) == "completed"
    assert fresh(start_run(skips, {"label": "r3"})).status == "pending"  # room again: it starts
    assert_counters_match_rows(SKIPS)
    assert verify().ok, verify().violations


def test_a_skipping_bound_skips_per_key(bounds) -> None:
    a1 = start_run(skips_per_key, {}, concurrency_key="acme")
    a2 = start_run(skips_per_key, {}, concurrency_key="acme")
    b1 = start_run(skips_per_key, {}, concurrency_key="globex")
    assert [fresh(run).status for run in (a1, b1)] == ["pending", "pending"]
    assert_skipped(a2, "key_pool_full", SKIPS_PER_KEY)


def test_the_start_chooses_its_own_on_full(bounds) -> None:
    start_run(skips, {"label": "holder"})
    waiting = start_run(skips, {"label": "waits"}, on_full="wait")
    assert fresh(waiting).status == "queued" and queue(SKIPS) == [waiting.id]
    start_run(waits, {"label": "holder"})
    assert_skipped(start_run(waits, {"label": "skips"}, on_full="skip"), "limit_full", "workflow.test_start_waits")
    # runs already waiting come first: a skip never takes a place they wait for (judged after the grant)
    assert_skipped(start_run(skips, {"label": "late"}, on_full="skip"), "limit_full", SKIPS)
    assert queue(SKIPS) == [waiting.id]


@pytest.mark.parametrize(
    ("on_full", "message"),
    [
        ("drop", "on_full must be one of 'wait', 'skip', 'replace', 'cancel_running', not 'drop'"),
        (3, "on_full must be one of"),
    ],
)
def test_a_start_s_on_full_is_checked_before_anything_is_written(bounds, on_full, message) -> None:
    before = Run.objects.count()
    with pytest.raises(WorkflowError, match=message) as raised:
        start_run(skips, {}, on_full=on_full)
    assert raised.value.field == "on_full"
    with pytest.raises(WorkflowError, match=message):
        start_runs(skips, [{}, {}], on_full=on_full)
    assert Run.objects.count() == before


def test_a_batch_is_judged_run_by_run_in_order(bounds) -> None:
    runs = start_runs(skips_per_key, [{"n": n} for n in range(5)], ["a", "a", "b", None, None])
    assert [run.status for run in runs] == ["pending", "skipped", "pending", "pending", "skipped"]
    assert [fresh(run).status for run in runs] == ["pending", "skipped", "pending", "pending", "skipped"]
    assert_skipped(runs[1], "key_pool_full", SKIPS_PER_KEY)
    assert_skipped(runs[4], "limit_full", SKIPS_PER_KEY)  # total 3 held by a, b and the keyless run
    assert Limit.objects.get(name=SKIPS_PER_KEY).skipped_count == 2
    waited = start_runs(skips, [{}, {}, {}], on_full="wait")
    assert [run.status for run in waited] == ["pending", "queued", "queued"]
    assert_counters_match_rows(SKIPS_PER_KEY)


def test_a_deferred_start_that_finds_its_bound_full_ends_skipped(bounds) -> None:
    """A run deferred to its start time (runtime.start_run_at: django.tasks' run_after) asks for its
    place when its time has come: then a skipping bound that is full ends it."""
    start_run(skips, {"label": "holder"})
    deferred = runtime.start_run_at(
        skips, {}, not_before=dt.datetime(2020, 1, 1, tzinfo=dt.UTC), bounds=[SKIPS], concurrency_key=""
    )
    assert runtime.start_if_due(deferred.id)
    assert advance(deferred.id) == "ended"
    row = fresh(deferred)
    assert (row.status, row.end_reason, row.end_limit, row.started_at) == ("skipped", "limit_full", SKIPS, None)
    assert queue(SKIPS) == [] and not Step.objects.filter(run_id=deferred.id).exists()


# --- 14.5: the caps -------------------------------------------------------------------------------


def test_a_start_past_a_queue_s_cap_ends_skipped_queue_full(bounds) -> None:
    holder = start_run(capped, {}, concurrency_key="a")
    a_waits = start_run(capped, {}, concurrency_key="a")
    a_refused = start_run(capped, {}, concurrency_key="a")
    b_waits = start_run(capped, {}, concurrency_key="b")
    c_refused = start_run(capped, {}, concurrency_key="c")
    assert [fresh(run).status for run in (holder, a_waits, b_waits)] == ["pending", "queued", "queued"]
    assert_skipped(a_refused, "key_queue_full", CAPPED)
    assert_skipped(c_refused, "queue_full", CAPPED)
    assert queue(CAPPED) == [a_waits.id, b_waits.id]
    limit = Limit.objects.get(name=CAPPED)
    assert (limit.refused_count, limit.skipped_count) == (2, 0)
    # on_full="skip" for the start: refused as a skip is, counted as skipped
    assert_skipped(start_run(capped, {}, concurrency_key="d", on_full="skip"), "limit_full", CAPPED)
    assert Limit.objects.get(name=CAPPED).skipped_count == 1
    assert_counters_match_rows(CAPPED)
    assert verify().ok, verify().violations


def test_a_lowered_cap_takes_no_waiting_run_out(bounds) -> None:
    start_run(capped, {}, concurrency_key="a")
    waiting = [start_run(capped, {}, concurrency_key=key) for key in ("a", "b")]
    services.set_max_waiting(CAPPED, 1, actor="ops")
    assert queue(CAPPED) == [run.id for run in waiting]
    assert_skipped(start_run(capped, {}, concurrency_key="c"), "queue_full", CAPPED)
    assert verify().ok, verify().violations


# --- limits verify, check n -----------------------------------------------------------------------


def test_verify_finds_a_run_ended_skipped_or_replaced_without_its_cause(bounds) -> None:
    start_run(skips, {})
    start_run(skips, {})  # skipped, its cause recorded: no violation
    assert verify().ok, verify().violations
    now = dt.datetime.now(dt.UTC)
    bare = Run.objects.create(workflow="test_start_skips", status="skipped", created_at=now, updated_at=now)
    odd = Run.objects.create(
        workflow="test_start_skips",
        status="replaced",
        end_reason="gone",
        end_limit=SKIPS,
        created_at=now,
        updated_at=now,
    )
    violations = verify().violations
    assert f"run {bare.id} ended skipped without its reason and the limit that stopped it recorded" in violations
    assert (
        f"run {odd.id} ended replaced without a known reason (not 'gone') and the run that replaced it recorded"
        in violations
    )
    assert len(violations) == 2


def test_an_operator_s_on_full_on_the_bound_decides_its_starts(bounds) -> None:
    """SPEC 14.6: operators change a bound's on_full and caps like a limit's (audited, kept across a
    deploy); the next start follows it."""
    start_run(waits, {"label": "holder"})
    services.set_on_full("workflow.test_start_waits", "skip", actor="ops")
    assert_skipped(start_run(waits, {}), "limit_full", "workflow.test_start_waits")
    services.set_on_full("workflow.test_start_waits", None, actor="ops")
    services.set_max_waiting("workflow.test_start_waits", 1, actor="ops")
    queued = start_run(waits, {})
    assert fresh(queued).status == "queued"
    assert_skipped(start_run(waits, {}), "queue_full", "workflow.test_start_waits")
