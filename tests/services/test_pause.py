"""SPEC 5.6: an operator pauses a limit and resumes it.

A paused limit grants nothing (neither a new acquisition nor the queue); held slots stay, waiting
runs keep their places and deadlines (their timeouts still run), new acquisitions queue.
Resuming grants at once, as a capacity raise does. Audited; a deploy keeps it. Every case runs on
both databases: on PostgreSQL the grant is limits_room in engine.sql, on SQLite Limit.room.
"""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.utils import timezone

from limits import services
from limits.models import AuditEvent, Limit, Slot
from limits.services import LimitsError, acquire, acquire_group, pause_limit, release, resume_limit
from limits.verify import verify
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(clock):
    return declare(calls={"capacity": 2, "max_hold": "1h"})["calls"]


def test_a_paused_limit_queues_new_acquisitions_and_keeps_its_held_slots(calls) -> None:
    held = acquire("calls", run_id="r1").slot_id
    limit = pause_limit("calls", actor="user:ana")
    assert limit.paused and limit.room == 0
    assert acquire("calls", run_id="r2").state == "waiting"  # a slot is free, yet nothing is granted
    assert holders("calls") == [("r1", "busy")]
    assert queue("calls") == ["r2"]
    assert Slot.objects.get(id=held).state == "busy"
    assert_counters_match_rows("calls")


def test_a_release_while_paused_hands_nothing_to_the_queue_and_resume_grants_at_once(
    calls, woken, django_capture_on_commit_callbacks
) -> None:
    held = [acquire("calls", run_id=f"r{i}").slot_id for i in (1, 2)]
    acquire("calls", run_id="r3")
    acquire("calls", run_id="r4")
    pause_limit("calls", actor="user:ana")
    assert release(held[0]) is True
    services.set_capacity("calls", 5, actor="user:ana")  # a raise while paused grants nothing either
    assert holders("calls") == [("r2", "busy")]
    assert queue("calls") == ["r3", "r4"]
    with django_capture_on_commit_callbacks(execute=True):
        resume_limit("calls", actor="user:ana")
    assert holders("calls") == [("r2", "busy"), ("r3", "reserved"), ("r4", "reserved")]
    assert woken == ["r3", "r4"]
    assert_counters_match_rows("calls")


def test_waits_keep_their_places_and_their_deadlines_run_while_paused(calls, clock) -> None:
    acquire("calls", run_id="r1")
    acquire("calls", run_id="r2")
    acquire("calls", run_id="r3", timeout="1m")
    acquire("calls", run_id="r4", timeout="1h")
    pause_limit("calls")
    clock.advance(minutes=2)
    report = services.sweep()
    assert (report.timed_out, report.granted) == (1, 0)
    assert queue("calls") == ["r4"]
    release(Slot.objects.get(run_id="r1").id)
    assert queue("calls") == ["r4"]
    resume_limit("calls")
    assert holders("calls") == [("r2", "busy"), ("r4", "reserved")]


def test_the_sweep_grants_nothing_on_a_paused_limit(calls, clock) -> None:
    acquire("calls", run_id="r1")
    acquire("calls", run_id="r2")
    acquire("calls", run_id="r3")
    pause_limit("calls")
    clock.advance(hours=2)  # both busy slots pass their max hold
    report = services.sweep()
    assert (report.expired, report.granted) == (2, 0)
    assert queue("calls") == ["r3"]


def test_a_key_pool_or_a_group_with_a_paused_limit_waits(clock) -> None:
    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 1}, db={"capacity": 3, "max_hold": "1h"})
    pause_limit("db")
    assert acquire("api", run_id="k1", key="acme").state == "busy"  # api is not paused
    assert acquire_group(["api", "db"], run_id="g1", key="beta").state == "waiting"
    assert acquire("db", run_id="p1").state == "waiting"
    resume_limit("db")
    assert holders("db") == [("g1", "reserved"), ("p1", "reserved")]
    assert holders("api") == [("k1", "busy"), ("g1", "reserved")]
    assert_counters_match_rows("api")
    assert_counters_match_rows("db")


def test_pause_and_resume_are_audited_once_and_a_second_call_changes_nothing(calls) -> None:
    pause_limit("calls", actor="user:ana")
    pause_limit("calls", actor="user:bob")
    resume_limit("calls", actor="user:ana")
    resume_limit("calls", actor="user:bob")
    rows = list(AuditEvent.objects.order_by("id").values_list("action", "actor", "old_value", "new_value"))
    assert rows[-2:] == [("pause", "user:ana", "running", "paused"), ("resume", "user:ana", "paused", "running")]
    assert [row[0] for row in rows].count("pause") == 1


def test_a_deploy_keeps_a_pause(calls) -> None:
    pause_limit("calls")
    declare(calls={"capacity": 4, "max_hold": "2h"})
    limit = Limit.objects.get(name="calls")
    assert limit.paused and limit.declared_capacity == 4
    assert acquire("calls", run_id="r1").state == "waiting"


@pytest.mark.parametrize("name", ["nope", "", "x\x00y"])
def test_an_unknown_limit_is_refused_and_nothing_changes(calls, name) -> None:
    for action in (pause_limit, resume_limit):
        with pytest.raises(LimitsError) as error:
            action(name)
        assert error.value.field == "limit"
    assert not AuditEvent.objects.filter(action__in=["pause", "resume"]).exists()


def test_verify_holds_a_paused_history_and_finds_a_grant_made_while_paused(calls, clock) -> None:
    acquire("calls", run_id="r1")
    pause_limit("calls")
    acquire("calls", run_id="r2")
    clock.advance(seconds=5)
    resume_limit("calls")
    later = timezone.now() + dt.timedelta(minutes=1)
    with time_machine.travel(later, tick=False):
        for slot_id in Slot.objects.filter(state__in=["busy", "reserved"]).values_list("id", flat=True):
            release(slot_id)
        assert verify(["calls"]).violations == []
        pause_limit("calls")
    # What a buggy engine would write: a slot granted inside the pause that is still running.
    limit = Limit.objects.get(name="calls")
    Slot.objects.create(
        limit=limit,
        run_id="sneaky",
        request="sneaky",
        state="released",
        granted_at=later + dt.timedelta(seconds=1),
        confirmed_at=later + dt.timedelta(seconds=1),
        expires_at=later + dt.timedelta(hours=1),
        freed_at=later + dt.timedelta(seconds=2),
    )
    with time_machine.travel(later + dt.timedelta(minutes=1), tick=False):
        found = verify(["calls"]).violations
    assert len(found) == 1 and "while the limit was paused" in found[0]


def test_verify_finds_a_pause_that_was_not_audited(calls) -> None:
    Limit.objects.filter(name="calls").update(paused_at=timezone.now())
    found = verify(["calls"]).violations
    assert len(found) == 1 and "no pause audited" in found[0]
