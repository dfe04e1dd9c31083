"""SPEC 11: concurrency of whole workflows. A run whose bounds are full is `queued` and takes no
step until its bounds are granted; queued runs start in trigger order; per-key pools are
independent; `limits=` at start replaces the named limits; ending a run frees its slots and starts
the next; a queued run cancelled leaves every queue; a start that never happens lapses and the
run queues again."""

from __future__ import annotations

import datetime as dt

import pytest

from limits import services
from limits.models import Limit, QueueEntry, Slot
from limits.runs import bounds as run_bounds
from limits.verify import verify
from stackbone.models import Run, Step
from stackbone.runs.runtime import WorkflowError, advance
from studio.workflows import cancel_run, start_run, step, workflow
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

STARTED: list[str] = []


@step
def note(label: str) -> str:
    STARTED.append(label)
    return label


@workflow(name="test_capped", concurrency={"total": 2, "per_key": 1})
def capped(input: dict) -> str:
    return note(input["label"])


@workflow(name="test_with_partner", concurrency={"total": 1}, limits=["partner-api"])
def with_partner(input: dict) -> str:
    return note(input["label"])


@pytest.fixture
def bounds(clock):
    declare(partner_api={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 1, "max_hold": "1h"})
    run_bounds.sync(["test_capped", "test_with_partner"])
    STARTED.clear()


def status(run: Run) -> str:
    return Run.objects.get(id=run.id).status


def test_the_bound_is_a_limit_of_kind_workflow_synced_from_the_decorator(bounds) -> None:
    bound = Limit.objects.get(name="workflow.test_capped")
    assert (bound.kind, bound.capacity, bound.per_key, bound.declared) == ("workflow", 2, 1, True)
    services.set_capacity("workflow.test_capped", 3, actor="ops")
    run_bounds.sync(["test_capped", "test_with_partner"])
    assert Limit.objects.get(name="workflow.test_capped").capacity == 3  # the override survives
    with pytest.raises(services.LimitsError, match="no max hold"):
        services.set_max_hold("workflow.test_capped", "1h", actor="ops")


def test_runs_past_the_bound_are_queued_take_no_step_and_start_in_trigger_order(bounds, no_worker) -> None:
    runs = [start_run(capped, {"label": f"r{i}"}, concurrency_key=f"k{i}") for i in range(4)]
    assert [status(run) for run in runs] == ["pending", "pending", "queued", "queued"]
    assert queue("workflow.test_capped") == [runs[2].id, runs[3].id]
    assert advance(runs[2].id) == "skipped"  # queued and not woken: nothing to run
    assert advance(runs[0].id) == "completed" and STARTED == ["r0"]
    # r0 ended: its slot went to r2 (the oldest queued), reserved until a worker starts it.
    assert holders("workflow.test_capped") == [(runs[1].id, "busy"), (runs[2].id, "reserved")]
    assert advance(runs[2].id) == "completed" and STARTED == ["r0", "r2"]
    assert status(runs[3]) == "queued" and holders("workflow.test_capped")[-1] == (runs[3].id, "reserved")
    assert verify().ok, verify().violations
    assert_counters_match_rows("workflow.test_capped")


def test_per_key_pools_are_independent(bounds, no_worker) -> None:
    a1 = start_run(capped, {"label": "a1"}, concurrency_key="acme")
    a2 = start_run(capped, {"label": "a2"}, concurrency_key="acme")
    b1 = start_run(capped, {"label": "b1"}, concurrency_key="zeta")
    assert [status(a1), status(a2), status(b1)] == ["pending", "queued", "pending"]


def test_limits_at_start_replace_the_named_limits_and_an_empty_list_keeps_only_the_own_bound(bounds, no_worker) -> None:
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    blocked = start_run(with_partner, {"label": "p"})
    assert status(blocked) == "queued"  # partner-api is full
    assert queue("partner-api") == [blocked.id] and queue("workflow.test_with_partner") == [blocked.id]
    cancel_run(blocked.id)
    own_only = start_run(with_partner, {"label": "own"}, limits=[])
    assert status(own_only) == "pending" and Run.objects.get(id=own_only.id).bounds == ["workflow.test_with_partner"]
    advance(own_only.id)
    other = start_run(with_partner, {"label": "v"}, limits=["voice-calls"])
    assert status(other) == "pending"
    assert Run.objects.get(id=other.id).bounds == ["workflow.test_with_partner", "voice-calls"]
    services.release(holder)


def test_a_run_holds_its_bounds_until_it_ends_and_ending_starts_the_next(bounds) -> None:
    """Eager tasks: the next queued run starts as soon as the first ends."""
    first = start_run(with_partner, {"label": "first"})
    assert status(first) == "completed"
    second = start_run(with_partner, {"label": "second"})
    assert status(second) == "completed" and STARTED == ["first", "second"]
    assert not Slot.objects.filter(state__in=["busy", "reserved"]).exists()
    assert set(Slot.objects.values_list("state", flat=True)) == {"run_ended"}


def test_cancelling_a_queued_run_takes_it_out_of_every_queue(bounds, no_worker) -> None:
    services.acquire("partner-api", run_id="holder")
    queued = start_run(with_partner, {"label": "q"})
    assert status(queued) == "queued"
    assert cancel_run(queued.id) is True
    assert status(queued) == "cancelled"
    assert queue("partner-api") == [] and queue("workflow.test_with_partner") == []
    assert not QueueEntry.objects.filter(state="waiting").exists()
    assert_counters_match_rows("partner-api")


def test_a_start_that_does_not_happen_in_two_minutes_lapses_and_the_run_queues_again(bounds, no_worker, clock) -> None:
    holder = start_run(with_partner, {"label": "holder"})
    late = start_run(with_partner, {"label": "late"})
    third = start_run(with_partner, {"label": "third"})
    assert status(late) == status(third) == "queued"
    assert advance(holder.id) == "completed"
    assert holders("partner-api") == [(late.id, "reserved")]
    clock.advance(minutes=2, seconds=1)  # no worker started it (the box restarted)
    services.sweep()
    # Its reservations lapsed together; the next run got them, the late run is at the end again.
    assert holders("partner-api") == [(third.id, "reserved")] and queue("partner-api") == [late.id]
    assert holders("workflow.test_with_partner") == [(third.id, "reserved")]
    assert advance(late.id) == "queued"  # its task finds the reservation gone: back to waiting
    assert status(late) == "queued" and STARTED == ["holder"]
    assert advance(third.id) == "completed"
    assert advance(late.id) == "completed" and STARTED == ["holder", "third", "late"]
    assert verify().ok, verify().violations


@pytest.mark.parametrize(
    ("concurrency", "limits", "message"),
    [
        ({"total": 0}, None, "total must be a whole number"),
        ({"per_key": "2"}, None, "per_key must be a whole number"),
        ({"total": 2, "per_key": 3}, None, "per_key must be a whole number from 1 to 2"),
        ({"max": 1}, None, "unknown field 'max'"),
        (None, ["a", "b", "c"], "at most 2 named limits"),
        (None, ["Bad Name"], "limits: limit name"),
        (None, ["a", "a"], "each limit at most once"),
    ],
)
def test_bad_declarations_are_clear_errors_at_import(concurrency, limits, message) -> None:
    with pytest.raises(WorkflowError, match=message):
        workflow(lambda input: None, name="test_bad_declaration", concurrency=concurrency, limits=limits)


def test_bad_starts_are_clear_errors_and_create_no_run(bounds) -> None:
    with pytest.raises(WorkflowError, match="unknown limit 'nope'"):
        start_run(with_partner, {}, limits=["nope"])
    with pytest.raises(WorkflowError, match="at most 2 named limits"):
        start_run(with_partner, {}, limits=["partner-api", "voice-calls", "x"])
    with pytest.raises(WorkflowError, match="concurrency_key: key must not contain control characters"):
        start_run(capped, {}, concurrency_key="a\nb")
    assert not Run.objects.exists()


def test_verify_catches_a_step_taken_before_the_run_s_bounds_were_confirmed(bounds, no_worker, clock) -> None:
    run = start_run(capped, {"label": "x"}, concurrency_key="acme")
    assert advance(run.id) == "completed"
    assert verify().ok, verify().violations
    Step.objects.filter(run_id=run.id).update(started_at=clock.now() - dt.timedelta(seconds=5))
    assert any("before its slot was confirmed" in v for v in verify().violations)
