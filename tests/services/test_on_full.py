"""SPEC 14.1, 14.2, 14.5, 14.7 in the engine: an acquisition that cannot be granted at once is
answered at once instead of queued, when its on_full is 'skip' (the call's, else the strictest of
its limits') or a queue it would join is at its cap (max_waiting, max_waiting_per_key).

Must never happen: a run answered 'skipped' or 'refused' left in any queue (or its box slot
taken from it); one answered so while room it fits was free; a queue longer than its cap because
of a join. Every case runs on both databases: on PostgreSQL limits_acquire and
limits_acquire_group in engine.sql, on SQLite limits.engine.python.
"""

from __future__ import annotations

import pytest

from limits.config import ConfigError, define_workspace
from limits.models import Limit, QueueEntry
from limits.services import LimitsError, acquire, acquire_group, pause_limit, release
from limits.verify import verify
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


def counts(name: str) -> tuple[int, int]:
    limit = Limit.objects.get(name=name)
    return limit.skipped_count, limit.refused_count


def test_skip_is_answered_at_once_and_leaves_nothing_in_the_queue(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    acquire("calls", run_id="r1")
    answer = acquire("calls", run_id="r2", on_full="skip")
    assert (answer.state, answer.limit, answer.reason) == ("skipped", "calls", "limit_full")
    assert queue("calls") == [] and not QueueEntry.objects.filter(run_id="r2").exists()
    assert counts("calls") == (1, 0)
    assert acquire("calls", run_id="r3").state == "waiting"  # the call's choice, not the limit's
    assert_counters_match_rows("calls")
    assert verify().ok


def test_skip_with_room_is_granted_as_any_acquisition(clock) -> None:
    declare(calls={"capacity": 2, "max_hold": "1h", "on_full": "skip"})
    assert acquire("calls", run_id="r1").state == "busy"
    assert acquire("calls", run_id="r2", key="acme").state == "busy"
    assert counts("calls") == (0, 0)


def test_a_limit_that_skips_answers_every_acquisition_so_unless_the_call_waits(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "on_full": "skip"})
    acquire("calls", run_id="r1")
    assert acquire("calls", run_id="r2").state == "skipped"
    assert acquire("calls", run_id="r3", key="acme").state == "skipped"
    assert acquire("calls", run_id="r4", on_full="wait").state == "waiting"
    assert queue("calls") == ["r4"]
    assert counts("calls") == (2, 0)


def test_a_paused_limit_skips_with_its_reason(clock) -> None:
    declare(calls={"capacity": 2, "max_hold": "1h"})
    pause_limit("calls")
    answer = acquire("calls", run_id="r1", on_full="skip")
    assert (answer.state, answer.reason) == ("skipped", "limit_paused")


def test_skip_is_granted_the_room_runs_waiting_cannot_use(clock) -> None:
    """A keyed limit whose waiting runs all belong to a key with a full pool: the free slots are
    the skipping run's, whose key has room (it 'can be granted at once')."""
    declare(calls={"capacity": 3, "max_hold": "1h", "per_key": 1})
    acquire("calls", run_id="a1", key="acme")
    assert acquire("calls", run_id="a2", key="acme").state == "waiting"
    answer = acquire("calls", run_id="g1", key="globex", on_full="skip")
    assert answer.state == "busy"
    skipped = acquire("calls", run_id="a3", key="acme", on_full="skip")
    assert (skipped.state, skipped.reason) == ("skipped", "key_pool_full")
    assert queue("calls") == ["a2"]
    assert_counters_match_rows("calls")


def test_a_group_skips_on_the_strictest_on_full_and_keeps_nothing(clock) -> None:
    declare(api={"capacity": 1, "max_hold": "1h", "on_full": "skip"}, calls={"capacity": 5, "max_hold": "1h"})
    acquire("api", run_id="r1")
    answer = acquire_group(["calls", "api"], run_id="r2")
    assert (answer.state, answer.limit, answer.reason) == ("skipped", "api", "limit_full")
    assert holders("calls") == [] and queue("calls") == [] and queue("api") == []
    assert counts("api") == (1, 0) and counts("calls") == (0, 0)
    assert acquire_group(["calls", "api"], run_id="r3", on_full="wait").state == "waiting"


def test_max_waiting_refuses_the_join_past_the_cap(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "max_waiting": 2})
    held = acquire("calls", run_id="r1").slot_id
    assert [acquire("calls", run_id=f"r{i}").state for i in (2, 3)] == ["waiting", "waiting"]
    answer = acquire("calls", run_id="r4")
    assert (answer.state, answer.limit, answer.reason) == ("refused", "calls", "queue_full")
    assert queue("calls") == ["r2", "r3"]
    assert counts("calls") == (0, 1)
    release(held)  # r2 is granted: one place frees
    assert acquire("calls", run_id="r5").state == "waiting"
    assert queue("calls") == ["r3", "r5"]
    assert_counters_match_rows("calls")


def test_max_waiting_per_key_caps_each_keys_share_of_the_queue(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "max_waiting_per_key": 1})
    acquire("calls", run_id="r1", key="acme")
    assert acquire("calls", run_id="a2", key="acme").state == "waiting"
    answer = acquire("calls", run_id="a3", key="acme")
    assert (answer.state, answer.reason) == ("refused", "key_queue_full")
    assert acquire("calls", run_id="g1", key="globex").state == "waiting"
    assert acquire("calls", run_id="n1").state == "waiting"  # the runs without a key are one key
    assert acquire("calls", run_id="n2").state == "refused"
    assert queue("calls") == ["a2", "g1", "n1"]
    assert_counters_match_rows("calls")


def test_lowering_a_cap_takes_nobody_out_of_the_queue(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    acquire("calls", run_id="r1")
    for i in (2, 3, 4):
        acquire("calls", run_id=f"r{i}")
    declare(calls={"capacity": 1, "max_hold": "1h", "max_waiting": 1})
    assert queue("calls") == ["r2", "r3", "r4"]
    assert acquire("calls", run_id="r5").state == "refused"
    assert verify().ok


def test_a_refused_acquisition_asked_again_is_asked_anew(clock) -> None:
    """Nothing of a refused request is kept: the same request asked again (a replay before its
    answer was recorded) is a new acquisition, granted if room is free by then."""
    declare(calls={"capacity": 1, "max_hold": "1h"})
    held = acquire("calls", run_id="r1").slot_id
    assert acquire("calls", run_id="r2", request="r2:1", on_full="skip").state == "skipped"
    release(held)
    assert acquire("calls", run_id="r2", request="r2:1", on_full="skip").state == "busy"


def test_bad_values_name_their_field_and_change_nothing(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    with pytest.raises(LimitsError) as raised:
        acquire("calls", run_id="r1", on_full="later")
    assert raised.value.field == "on_full"
    with pytest.raises(LimitsError) as raised:
        acquire_group(["calls"], run_id="r1", on_full="cancel_running")  # a workflow's own bound's only
    assert raised.value.field == "on_full"
    assert holders("calls") == []
    with pytest.raises(ConfigError) as config:
        define_workspace(limits={"calls": {"capacity": 1, "max_hold": "1h", "on_full": "drop", "max_waiting": 0}})
    assert [str(e) for e in config.value.errors] == [
        "limit 'calls': on_full must be 'wait', 'skip' or 'replace', not 'drop'",
        "limit 'calls': max_waiting must be a whole number from 1 to 1,000,000, not 0",
    ]


def test_a_deploy_changes_and_audits_the_declared_values(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    declare(calls={"capacity": 1, "max_hold": "1h", "on_full": "skip", "max_waiting": 10, "max_waiting_per_key": 2})
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("skip", 10, 2)
    event = limit.audit_events.latest("id")
    assert event.new_value.endswith("on_full skip, max_waiting 10, max_waiting_per_key 2")


def test_operators_set_and_reset_on_full_and_the_caps_audited_and_kept_across_a_deploy(clock) -> None:
    from limits.services import set_max_waiting, set_on_full

    declare(calls={"capacity": 1, "max_hold": "1h", "max_waiting": 5})
    acquire("calls", run_id="r1")
    set_on_full("calls", "skip", actor="user:ana")
    assert acquire("calls", run_id="r2").state == "skipped"
    set_max_waiting("calls", 1, actor="user:ana")
    set_max_waiting("calls", 1, per_key=True, actor="user:ana")
    declare(calls={"capacity": 1, "max_hold": "1h", "max_waiting": 7})  # a deploy keeps the overrides
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("skip", 1, 1)
    set_on_full("calls", None, actor="user:ana")
    set_max_waiting("calls", None, actor="user:ana")
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("wait", 7, 1)
    rows = list(
        limit.audit_events.filter(action__in=["on_full", "max_waiting", "max_waiting_key"])
        .order_by("id")
        .values_list("action", "actor", "old_value", "new_value")
    )
    assert rows == [
        ("on_full", "user:ana", "wait", "skip"),
        ("max_waiting", "user:ana", "5", "1"),
        ("max_waiting_key", "user:ana", "none", "1"),
        ("on_full", "user:ana", "skip", "wait (declared)"),
        ("max_waiting", "user:ana", "1", "7 (declared)"),
    ]


def test_operators_bad_values_name_the_field_and_change_nothing(clock) -> None:
    from limits.services import set_max_waiting, set_on_full

    declare(calls={"capacity": 1, "max_hold": "1h"})
    for call, field in (
        (lambda: set_on_full("calls", "cancel_running"), "on_full"),
        (lambda: set_max_waiting("calls", 0), "max_waiting"),
        (lambda: set_max_waiting("calls", 1_000_001, per_key=True), "max_waiting_per_key"),
        (lambda: set_max_waiting("calls", True), "max_waiting"),
        (lambda: set_on_full("nope", "skip"), "limit"),
    ):
        with pytest.raises(LimitsError) as raised:
            call()
        assert raised.value.field == field
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("wait", None, None)
    assert not limit.audit_events.exclude(action="sync").exists()
