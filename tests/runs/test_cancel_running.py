"""SPEC 14.4 and 14.6: cancel_running, a workflow's own bound's on_full. A new run whose key's pool
of the bound is full cancels the pool's oldest run holding it that is not being cancelled already
(as cancel_run does: an executing run keeps its slots until its worker stops, 2.5 and 11.4; any
other ends at once), and waits ahead of every other waiting run of its key (the front band of the
bound's queue), so the freed slot is its own. The cancelled run names its cause (end_reason
'cancel_running', end_limit the bound, caused_by the new run), counted on the bound
(cancelled_count). With every holder being cancelled, a new run cancels nothing and waits behind
the earlier cancellers. Declared in @workflow(concurrency=...), set by operators on a bound (never
a named limit), and chosen per call by start_run(on_full=...). Both databases, through the public
names; the worker path is the real one (advance in a thread: lease, heartbeat, step recording)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connections

from limits import services
from limits.models import AuditEvent, Limit
from limits.runs import bounds as run_bounds
from limits.runs import start_run, workflow
from limits.verify import verify
from stackbone.models import Run
from stackbone.plumbing import clock as box_clock
from stackbone.runs import statements
from stackbone.runs.endings import stop_cancelled
from stackbone.runs.runtime import WorkflowError, advance, cancel_run, recover
from stackbone.runs.steps import LEASE
from studio.workflows import step
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

KEYED = "workflow.test_cancel_running_keyed"
WHOLE = "workflow.test_cancel_running_whole"
PER_CALL = "workflow.test_cancel_running_per_call"
GUARDED = "workflow.test_cancel_running_guarded"
INSIDE = threading.Event()
GO_ON = threading.Event()
DONE: list[str] = []


@step
def noted(label: str) -> str:
    DONE.append(f"work:{label}")
    return label


@step
def blocking(label: str) -> str:
    DONE.append(f"begin:{label}")
    if label == "blocks":
        INSIDE.set()
        assert GO_ON.wait(60), "the test never let the step finish"
    DONE.append(f"end:{label}")
    return label


@workflow(name="test_cancel_running_keyed", concurrency={"total": 3, "per_key": 1, "on_full": "cancel_running"})
def keyed(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_cancel_running_whole", concurrency={"total": 1, "on_full": "cancel_running"})
def whole(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_cancel_running_per_call", concurrency={"total": 1})
def per_call(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_cancel_running_guarded", concurrency={"per_key": 1, "on_full": "cancel_running"})
def guarded(input: dict) -> str:
    blocking(input["label"])
    return noted(f"after-{input['label']}")


@workflow(name="test_cancel_running_unbound")
def unbound(input: dict) -> str:
    return noted("unbound")


@pytest.fixture
def bounds(clock, no_worker) -> Iterator[None]:
    run_bounds.sync(
        [
            "test_cancel_running_keyed",
            "test_cancel_running_whole",
            "test_cancel_running_per_call",
            "test_cancel_running_guarded",
        ]
    )
    INSIDE.clear()
    GO_ON.clear()
    DONE.clear()
    yield
    GO_ON.set()


def fresh(run: Run) -> Run:
    return Run.objects.get(id=run.id)


def executing(run: Run, worker: str = "worker-1") -> None:
    """A worker took the run's lease and runs it (its step in progress)."""
    assert statements.take_lease(run.id, worker, LEASE, box_clock.param())
    assert fresh(run).status == "running"


def assert_cancelled_by(run: Run, by: Run, bound: str, *, stopped: bool) -> None:
    row = fresh(run)
    assert (row.status, row.end_reason, row.end_limit, row.caused_by) == ("cancelled", "cancel_running", bound, by.id)
    assert (row.finished_at is not None) is stopped


def test_a_new_run_cancels_its_key_s_oldest_executing_run_and_waits_ahead_of_its_key(bounds) -> None:
    first = start_run(keyed, {"label": "a1"}, concurrency_key="a")
    other_key = start_run(keyed, {"label": "b1"}, concurrency_key="b")
    executing(first)
    executing(other_key, "worker-2")
    waiter = start_run(keyed, {"label": "a-waits"}, concurrency_key="a", on_full="wait")
    assert fresh(waiter).status == "queued" and fresh(first).status == "running"  # 'wait' cancels nothing

    newer = start_run(keyed, {"label": "a2"}, concurrency_key="a")
    assert newer.status == "queued"
    assert_cancelled_by(first, newer, KEYED, stopped=False)  # executing: it stops at its next step boundary
    assert fresh(other_key).status == "running"  # another key's run is never touched
    assert queue(KEYED) == [newer.id, waiter.id]  # ahead of its key's older waiting run
    assert set(holders(KEYED)) == {(first.id, "busy"), (other_key.id, "busy")}  # kept until its work stops
    assert Limit.objects.get(name=KEYED).cancelled_count == 1
    assert verify().ok, verify().violations

    assert stop_cancelled(first.id, owner="worker-1")  # its worker reached the step boundary
    assert set(holders(KEYED)) == {(other_key.id, "busy"), (newer.id, "reserved")}  # before the older waiter
    assert queue(KEYED) == [waiter.id]
    assert advance(newer.id) == "completed" and DONE == ["work:a2"]
    assert advance(waiter.id) == "completed"
    assert verify().ok, verify().violations
    assert_counters_match_rows(KEYED)


def test_with_every_holder_being_cancelled_a_new_run_waits_behind_the_earlier_cancellers(bounds) -> None:
    first = start_run(keyed, {"label": "a1"}, concurrency_key="a")
    executing(first)
    canceller = start_run(keyed, {"label": "a2"}, concurrency_key="a")
    assert_cancelled_by(first, canceller, KEYED, stopped=False)
    later = start_run(keyed, {"label": "a3"}, concurrency_key="a")
    assert fresh(later).status == "queued" and fresh(later).caused_by is None
    assert queue(KEYED) == [canceller.id, later.id]
    assert Limit.objects.get(name=KEYED).cancelled_count == 1  # nothing more was cancelled
    assert fresh(first).caused_by == canceller.id
    # An operator's cancel counts as being cancelled too: the holder it leaves is not cancelled twice.
    second_key = start_run(keyed, {"label": "c1"}, concurrency_key="c")
    executing(second_key, "worker-2")
    assert cancel_run(second_key.id) is True
    third = start_run(keyed, {"label": "c2"}, concurrency_key="c")
    assert fresh(second_key).end_reason is None and fresh(third).status == "queued"
    assert queue(KEYED) == [canceller.id, later.id, third.id]

    assert stop_cancelled(first.id, owner="worker-1")
    assert (canceller.id, "reserved") in holders(KEYED)
    assert advance(canceller.id) == "completed"
    # The canceller now holds the pool; `later` waits for it and cancels nothing (its start is past).
    assert (later.id, "reserved") in holders(KEYED) and queue(KEYED) == [third.id]
    assert verify().ok, verify().violations
    assert_counters_match_rows(KEYED)


def test_without_a_key_the_whole_bound_and_a_run_not_executing_ends_at_once(bounds) -> None:
    first = start_run(whole, {"label": "one"})
    assert fresh(first).status == "pending"  # dispatched, no worker has it yet: not executing
    newer = start_run(whole, {"label": "two"})
    assert_cancelled_by(first, newer, WHOLE, stopped=True)  # ended at once: its slot is free now
    assert holders(WHOLE) == [(newer.id, "reserved")]
    assert queue(WHOLE) == []
    assert advance(first.id) == "skipped"  # nothing of it runs
    assert advance(newer.id) == "completed" and DONE == ["work:two"]
    assert Limit.objects.get(name=WHOLE).cancelled_count == 1
    assert verify().ok, verify().violations
    assert_counters_match_rows(WHOLE)


def test_on_a_fair_bound_the_freed_slot_goes_to_the_canceller_without_a_key(bounds) -> None:
    """13.2 with 14.4: an operator made the bound fair. The canceller's entry in the front band
    (position below 0) is the oldest of the runs without a key, so the freed slot is its own, not
    the older waiter's. (Found reading limits_grant: its no-key fair stream started after position
    0, so it passed the front band by on PostgreSQL and gave the slot to the waiter.)"""
    services.set_share(WHOLE, "fair", actor="ops")
    first = start_run(whole, {"label": "one"})
    executing(first)
    waits = start_run(whole, {"label": "waits"}, on_full="wait")
    newer = start_run(whole, {"label": "two"})
    assert_cancelled_by(first, newer, WHOLE, stopped=False)
    assert queue(WHOLE) == [newer.id, waits.id]
    assert stop_cancelled(first.id, owner="worker-1")
    assert holders(WHOLE) == [(newer.id, "reserved")]
    assert queue(WHOLE) == [waits.id]
    assert verify().ok, verify().violations
    assert_counters_match_rows(WHOLE)


def test_a_start_chooses_cancel_running_per_call_when_its_workflow_has_its_own_bound(bounds) -> None:
    first = start_run(per_call, {"label": "one"})
    executing(first)
    waits = start_run(per_call, {"label": "waits"})
    assert fresh(first).status == "running" and fresh(waits).status == "queued"
    newer = start_run(per_call, {"label": "two"}, on_full="cancel_running")
    assert_cancelled_by(first, newer, PER_CALL, stopped=False)
    assert queue(PER_CALL) == [newer.id, waits.id]
    with pytest.raises(WorkflowError, match="'cancel_running' needs the workflow's own bound") as raised:
        start_run(unbound, {}, on_full="cancel_running")
    assert raised.value.field == "on_full"
    with pytest.raises(WorkflowError, match="needs the workflow's own bound"):
        run_bounds.declare("test_cancel_running_no_bound", None, None, start_on_full="cancel_running")


def test_operators_set_cancel_running_on_a_bound_only(bounds) -> None:
    declare(partner_api={"capacity": 1, "max_hold": "1h"})
    limit = services.set_on_full(PER_CALL, "cancel_running", actor="ops")
    assert limit.on_full == "cancel_running"
    audit = AuditEvent.objects.filter(limit__name=PER_CALL, action="on_full").latest("id")
    assert (audit.actor, audit.old_value, audit.new_value) == ("ops", "wait", "cancel_running")
    with pytest.raises(services.LimitsError, match="a workflow's own bound's only") as raised:
        services.set_on_full("partner-api", "cancel_running", actor="ops")
    assert raised.value.field == "on_full"
    assert Limit.objects.get(name="partner-api").on_full == "wait"
    first = start_run(per_call, {"label": "one"})
    executing(first)
    newer = start_run(per_call, {"label": "two"})  # the operator's value is in force
    assert_cancelled_by(first, newer, PER_CALL, stopped=False)
    run_bounds.sync(["test_cancel_running_per_call"])  # a deploy keeps it
    assert Limit.objects.get(name=PER_CALL).on_full == "cancel_running"


class InThread:
    """advance(run_id) in a thread, as a worker runs it; `result` once it returned."""

    def __init__(self, run_id: str) -> None:
        self.result: str | None = None
        self.thread = threading.Thread(target=self._advance, args=(run_id,), daemon=True)
        self.thread.start()

    def _advance(self, run_id: str) -> None:
        try:
            self.result = advance(run_id)
        finally:
            connections.close_all()

    def join(self) -> str | None:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the advance did not return"
        return self.result


def test_the_cancelled_run_s_work_stops_before_the_new_run_s_begins(bounds) -> None:
    first = start_run(guarded, {"label": "blocks"}, concurrency_key="t")
    worker = InThread(first.id)
    assert INSIDE.wait(60), "the first run never reached its step"
    newer = start_run(guarded, {"label": "newer"}, concurrency_key="t")
    assert_cancelled_by(first, newer, GUARDED, stopped=False)
    assert advance(newer.id) == "skipped" and fresh(newer).status == "queued"  # its slot is still held
    recover()  # a live lease: recovery leaves the stopping run alone
    assert holders(GUARDED) == [(first.id, "busy")]

    GO_ON.set()
    assert worker.join() == "cancelled"
    assert_cancelled_by(first, newer, GUARDED, stopped=True)
    assert holders(GUARDED) == [(newer.id, "reserved")]
    assert advance(newer.id) == "completed"
    # the guarded work never overlapped: the first's step ended before the newer began, and the first
    # took no step after its cancel
    assert DONE == ["begin:blocks", "end:blocks", "begin:newer", "end:newer", "work:after-newer"]
    assert verify().ok, verify().violations
    assert_counters_match_rows(GUARDED)


def test_verify_finds_a_cancel_without_its_cause_or_a_canceller_not_ahead_of_its_key(bounds) -> None:
    from limits.models import QueueEntry

    first = start_run(keyed, {"label": "a1"}, concurrency_key="a")
    executing(first)
    newer = start_run(keyed, {"label": "a2"}, concurrency_key="a")
    assert verify().ok, verify().violations
    entry = QueueEntry.objects.get(run_id=newer.id, limit__name=KEYED)
    assert entry.position < 0  # the front band

    Run.objects.filter(id=first.id).update(caused_by=None)
    violations = verify().violations
    assert any(f"run {first.id} ended cancelled without the run that cancelled it recorded" in v for v in violations)

    Run.objects.filter(id=first.id).update(caused_by=newer.id)
    QueueEntry.objects.filter(id=entry.id).update(position=Limit.objects.get(name=KEYED).next_position + 10)
    violations = verify().violations
    assert any(f"run {newer.id} cancelled a run by cancel_running but waited at its ticket" in v for v in violations)


def test_a_holder_whose_row_another_transaction_holds_is_passed_over_without_waiting(bounds) -> None:
    """PostgreSQL: the start holds its limits' locks when it cancels, and a worker ending its run
    holds the run's row and then asks for those locks (run_ended): the start must not wait for
    that row (a deadlock, found by the chaos run). A holder whose row another transaction keeps
    is passed over (limits_cancel_running: 100 ms at most): nothing is cancelled, and the new run
    waits at its ticket; once the row is free again, the next start cancels as before."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    first = start_run(whole, {"label": "one"})
    executing(first)
    held, go = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(id=first.id)
                held.set()
                go.wait(60)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_row, daemon=True)
    holder.start()
    assert held.wait(60)
    try:
        newer = start_run(whole, {"label": "two"})  # returns: it did not wait for the row
    finally:
        go.set()
        holder.join(60)
    assert fresh(first).status == "running" and fresh(first).caused_by is None
    assert fresh(newer).status == "queued" and queue(WHOLE) == [newer.id]
    assert Limit.objects.get(name=WHOLE).cancelled_count == 0
    latest = start_run(whole, {"label": "three"})
    assert_cancelled_by(first, latest, WHOLE, stopped=False)
    assert queue(WHOLE) == [latest.id, newer.id]
    assert verify().ok, verify().violations
