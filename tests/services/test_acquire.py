"""SPEC 1.5, 2.2, 2.3, 2.6 and 3.3 at the engine: who gets a slot at once, who queues, in what order."""

from __future__ import annotations

import datetime as dt

import pytest

from limits import services
from limits.models import Slot
from limits.services import LimitsError, acquire
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(clock):
    return declare(calls={"capacity": 2, "max_hold": "1h"})["calls"]


def test_a_free_slot_with_no_queue_is_granted_busy_at_once(calls) -> None:
    got = acquire("calls", run_id="r1", label="call-1")
    assert got.state == "busy"
    assert got.slot_id and got.slot_id.startswith("slot_")
    slot = Slot.objects.get(id=got.slot_id)
    assert (slot.run_id, slot.state, slot.label) == ("r1", "busy", "call-1")
    assert_counters_match_rows("calls")


def test_slot_ids_are_opaque_and_unguessable(calls) -> None:
    a = acquire("calls", run_id="r1").slot_id
    b = acquire("calls", run_id="r2").slot_id
    assert a != b
    assert len(a) >= 24 and "r1" not in a


def test_a_full_limit_queues_the_caller(calls) -> None:
    acquire("calls", run_id="r1")
    acquire("calls", run_id="r2")
    got = acquire("calls", run_id="r3", timeout="30m")
    assert got.state == "waiting"
    assert got.timeout_ms == 30 * 60_000
    assert queue("calls") == ["r3"]
    assert_counters_match_rows("calls")


def test_nobody_jumps_a_waiting_run_even_when_a_slot_is_free(calls, clock) -> None:
    """2.2: a slot is handed out at once only when no run waits. Here r3 waits and holds a
    reservation while r4 arrives: r4 must queue behind, not take the free capacity."""
    acquire("calls", run_id="r1")
    a2 = acquire("calls", run_id="r2")
    acquire("calls", run_id="r3")
    acquire("calls", run_id="r4")
    services.release(a2.slot_id)  # r3 is reserved, r4 waits
    assert holders("calls") == [("r1", "busy"), ("r3", "reserved")]
    services.set_capacity("calls", 3)  # r4 reserved next, in order
    assert holders("calls")[-1] == ("r4", "reserved")
    assert acquire("calls", run_id="r5").state == "waiting"


def test_the_queue_is_first_come_first_served(calls) -> None:
    first = [acquire("calls", run_id=f"h{i}").slot_id for i in range(2)]
    for i in range(5):
        acquire("calls", run_id=f"w{i}")
    for slot_id in first:
        services.release(slot_id)
    assert [run for run, _ in holders("calls")] == ["w0", "w1"]
    assert queue("calls") == ["w2", "w3", "w4"]


def test_the_default_timeout_is_24_hours(calls, clock) -> None:
    acquire("calls", run_id="r1")
    acquire("calls", run_id="r2")
    got = acquire("calls", run_id="r3")
    assert got.deadline == clock.now() + dt.timedelta(hours=24)


def test_acquire_again_with_the_same_request_returns_the_same_outcome(calls) -> None:
    first = acquire("calls", run_id="r1", request="r1:0")
    again = acquire("calls", run_id="r1", request="r1:0")
    assert again == first
    assert Slot.objects.count() == 1
    acquire("calls", run_id="r2")
    waiting = acquire("calls", run_id="r3", request="r3:0")
    assert acquire("calls", run_id="r3", request="r3:0") == waiting
    assert queue("calls") == ["r3"]
    assert_counters_match_rows("calls")


def test_acquire_of_an_unknown_limit_is_a_clear_error(calls) -> None:
    with pytest.raises(LimitsError, match="unknown limit 'nope'"):
        acquire("nope", run_id="r1")


def test_an_undeclared_limit_cannot_be_acquired(calls) -> None:
    """1.5: a limit that left the config refuses new acquisitions."""
    declare(other={"capacity": 1, "max_hold": "1m"})
    with pytest.raises(LimitsError, match="no longer declared"):
        acquire("calls", run_id="r1")


@pytest.mark.parametrize("label", ["x" * 201, 12])
def test_labels_are_bounded(calls, label) -> None:
    with pytest.raises(LimitsError, match="label must be"):
        acquire("calls", run_id="r1", label=label)
    assert Slot.objects.count() == 0


def test_a_label_is_never_required_and_can_be_200_characters(calls) -> None:
    assert acquire("calls", run_id="r1").state == "busy"
    assert acquire("calls", run_id="r2", label="é" * 200).state == "busy"


@pytest.mark.parametrize("timeout", ["45x", 0, "31d", True])
def test_a_bad_timeout_is_refused_and_changes_nothing(calls, timeout) -> None:
    with pytest.raises(LimitsError, match="timeout"):
        acquire("calls", run_id="r1", timeout=timeout)
    assert Slot.objects.count() == 0
