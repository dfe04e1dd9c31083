"""SPEC 2.7 and 3.3-3.7: waiting, reservations, confirmation, runs that end."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from limits import services
from limits.models import QueueEntry, Slot
from limits.services import acquire, confirm, end_run, release, sweep
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def one(clock):
    return declare(one={"capacity": 1, "max_hold": "1h"})["one"]


def hand_one_over(holder: str = "r1", waiters: tuple[str, ...] = ("r2",), **kwargs: Any) -> str:
    """r1 holds the only slot, the waiters queue, r1 releases: the first waiter is reserved."""
    slot_id = acquire("one", run_id=holder).slot_id
    for run in waiters:
        acquire("one", run_id=run, request=f"{run}:0", **kwargs)
    release(slot_id)
    return Slot.objects.get(state="reserved").id


def test_a_wait_past_its_timeout_leaves_the_queue_at_the_next_sweep(
    one, clock, woken, django_capture_on_commit_callbacks
) -> None:
    acquire("one", run_id="r1")
    acquire("one", run_id="r2", request="r2:0", timeout="30s")
    clock.advance(seconds=29)
    assert sweep().timed_out == 0
    clock.advance(seconds=2)
    with django_capture_on_commit_callbacks(execute=True):
        report = sweep()
    assert report.timed_out == 1
    assert queue("one") == []
    assert woken == ["r2"]
    got = acquire("one", run_id="r2", request="r2:0")
    assert (got.state, got.timeout_ms) == ("timed_out", 30_000)
    assert_counters_match_rows("one")


def test_a_waiting_run_holds_no_slot(one) -> None:
    acquire("one", run_id="r1")
    acquire("one", run_id="r2")
    assert Slot.objects.filter(run_id="r2").count() == 0


def test_a_waiting_run_that_ends_leaves_the_queue(one) -> None:
    acquire("one", run_id="r1")
    acquire("one", run_id="r2")
    acquire("one", run_id="r3")
    assert end_run("r2") == 1
    assert queue("one") == ["r3"]
    assert QueueEntry.objects.get(run_id="r2").state == "cancelled"
    assert_counters_match_rows("one")


def test_a_handed_slot_is_reserved_for_two_minutes_and_counts_against_capacity(one, clock) -> None:
    slot_id = hand_one_over(waiters=("r2", "r3"))
    slot = Slot.objects.get(id=slot_id)
    assert slot.reserved_until == clock.now() + dt.timedelta(minutes=2)
    assert acquire("one", run_id="r4").state == "waiting"
    assert_counters_match_rows("one")


def test_confirming_in_time_makes_the_slot_busy(one, clock) -> None:
    slot_id = hand_one_over()
    clock.advance(seconds=119)
    assert confirm(slot_id) is True
    assert holders("one") == [("r2", "busy")]
    assert_counters_match_rows("one")


def test_the_run_confirms_by_acquiring_again_when_it_resumes(one) -> None:
    slot_id = hand_one_over()
    got = acquire("one", run_id="r2", request="r2:0")
    assert (got.state, got.slot_id) == ("busy", slot_id)
    assert holders("one") == [("r2", "busy")]


def test_an_unconfirmed_reservation_goes_to_the_next_run_and_the_late_run_to_the_end(one, clock) -> None:
    """3.6: after 2 minutes the sweep takes the reservation back, the next run gets it, and the
    late run waits at the end of the queue with its original deadline."""
    slot_id = hand_one_over(waiters=("r2", "r3", "r4"), timeout="1h")
    deadline = QueueEntry.objects.get(run_id="r2").deadline
    clock.advance(minutes=2, seconds=1)
    report = sweep()
    assert (report.lapsed, report.granted) == (1, 1)
    assert Slot.objects.get(id=slot_id).state == "lapsed"
    assert holders("one") == [("r3", "reserved")]
    assert queue("one") == ["r4", "r2"]
    assert QueueEntry.objects.get(run_id="r2", state="waiting").deadline == deadline
    assert_counters_match_rows("one")


def test_a_late_confirm_is_refused_and_requeues_the_run(one, clock) -> None:
    slot_id = hand_one_over(waiters=("r2", "r3"))
    clock.advance(minutes=3)
    assert confirm(slot_id) is False
    assert holders("one") == [("r3", "reserved")]
    assert queue("one") == ["r2"]
    assert acquire("one", run_id="r2", request="r2:0").state == "waiting"
    assert_counters_match_rows("one")


def test_a_late_run_past_its_deadline_times_out_instead_of_waiting_again(one, clock) -> None:
    hand_one_over(waiters=("r2", "r3"), timeout="1m")
    clock.advance(minutes=3)
    sweep()
    assert acquire("one", run_id="r2", request="r2:0").state == "timed_out"
    assert acquire("one", run_id="r3", request="r3:0").state == "timed_out"
    assert holders("one") == []
    assert_counters_match_rows("one")


def test_a_picked_run_that_ends_frees_its_reservation_for_the_next(one) -> None:
    """3.7"""
    slot_id = hand_one_over(waiters=("r2", "r3"))
    assert end_run("r2") == 1
    assert Slot.objects.get(id=slot_id).state == "run_ended"
    assert holders("one") == [("r3", "reserved")]
    assert_counters_match_rows("one")


def test_a_run_that_ends_keeps_the_busy_slot_it_holds(one) -> None:
    """2.7: the slot belongs to the work; only a release or the max hold frees it."""
    slot_id = acquire("one", run_id="r1").slot_id
    acquire("one", run_id="r2")
    assert end_run("r1") == 0
    assert Slot.objects.get(id=slot_id).state == "busy"
    assert holders("one") == [("r1", "busy")]


def test_a_freed_slot_skips_waits_past_their_deadline(one, clock) -> None:
    slot_id = acquire("one", run_id="r1").slot_id
    acquire("one", run_id="r2", timeout="10s")
    acquire("one", run_id="r3", timeout="1h")
    clock.advance(seconds=11)
    release(slot_id)
    assert holders("one") == [("r3", "reserved")]
    assert QueueEntry.objects.get(run_id="r2").state == "timed_out"
    assert_counters_match_rows("one")


def test_the_queue_survives_a_new_connection(one) -> None:
    """3.1 in one process: the queue is rows, read back in order by a fresh connection.
    (tests/concurrency covers other OS processes on PostgreSQL.)"""
    from django.db import connection

    acquire("one", run_id="r1")
    for run in ("a", "b", "c"):
        acquire("one", run_id=run)
    connection.close() if not connection.in_atomic_block else None
    assert queue("one") == ["a", "b", "c"]
    assert services.Limit.objects.get(name="one").waiting_count == 3
