"""SPEC 9 (keys: a pool per tenant under one limit) and 10 (several limits in one acquisition),
rule by rule, on both databases."""

from __future__ import annotations

import pytest

from limits import services
from limits.config import ConfigError, define_workspace
from limits.models import AuditEvent, Limit, LimitKey, QueueEntry, Slot
from limits.services import acquire, acquire_group, end_run, release, set_capacity, set_per_key, sweep
from tests.factories import assert_counters_match_rows, declare, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def keyed(clock):
    return declare(api={"capacity": 3, "max_hold": "1h", "per_key": 1})["api"]


@pytest.fixture
def ab(clock):
    return declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})


def live(name: str) -> list[tuple[str, str, str]]:
    return list(
        Slot.objects.filter(limit__name=name, state__in=["busy", "reserved"])
        .order_by("granted_at", "run_id")
        .values_list("run_id", "key", "state")
    )


def counters_ok(*names: str) -> None:
    for name in names:
        assert_counters_match_rows(name)


# --- 9.1 per_key: each key's pool, the no-key pool, the total --------------------------------------


def test_per_key_is_declared_from_one_to_capacity_and_errors_name_the_limit_and_field() -> None:
    assert define_workspace(limits={"x": {"capacity": 5, "max_hold": "1m", "per_key": 5}}).limits["x"].per_key == 5
    with pytest.raises(ConfigError, match=r"limit 'partner-api': per_key must be at most capacity \(5\)"):
        define_workspace(limits={"partner-api": {"capacity": 5, "max_hold": "1m", "per_key": 6}})
    for bad in (0, -1, "2", 1.5, True):
        with pytest.raises(ConfigError, match="limit 'x': per_key"):
            define_workspace(limits={"x": {"capacity": 5, "max_hold": "1m", "per_key": bad}})


def test_each_key_has_its_own_pool_and_all_keys_share_the_total(keyed) -> None:
    assert acquire("api", run_id="r1", key="t1").state == "busy"
    assert acquire("api", run_id="r2", key="t1").state == "waiting"  # t1's pool (1) is full
    assert acquire("api", run_id="r3", key="t2").state == "busy"
    assert acquire("api", run_id="r4").state == "busy"  # the no-key pool, capped by per_key too
    assert acquire("api", run_id="r5").state == "waiting"
    assert acquire("api", run_id="r6", key="t3").state == "waiting"  # the total (3) is full
    assert [run for run, *_ in live("api")] == ["r1", "r3", "r4"]
    counters_ok("api")


def test_a_limit_without_per_key_accepts_a_key_shows_it_and_applies_only_the_total(clock) -> None:
    declare(calls={"capacity": 2, "max_hold": "1h"})
    assert acquire("calls", run_id="r1", key="t1").state == "busy"
    assert acquire("calls", run_id="r2", key="t1").state == "busy"
    assert acquire("calls", run_id="r3", key="t2").state == "waiting"
    assert live("calls") == [("r1", "t1", "busy"), ("r2", "t1", "busy")]
    assert LimitKey.objects.get(limit__name="calls", key="t1").busy_count == 2
    counters_ok("calls")


# --- 9.2 keys are checked like labels ------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\nb", "tab\there", "\x00", 7, b"bytes"])
def test_a_bad_key_is_a_clear_error_and_changes_nothing(keyed, bad) -> None:
    with pytest.raises(services.LimitsError) as raised:
        acquire("api", run_id="r1", key=bad)
    assert raised.value.field == "key"
    assert not Slot.objects.exists() and not QueueEntry.objects.exists() and not LimitKey.objects.exists()


def test_keys_are_case_sensitive_and_may_be_128_characters(keyed) -> None:
    assert acquire("api", run_id="r1", key="Tenant").state == "busy"
    assert acquire("api", run_id="r2", key="tenant").state == "busy"
    assert acquire("api", run_id="r3", key="k" * 128).state == "busy"


# --- 9.3 order with keys --------------------------------------------------------------------------


def test_a_run_held_back_by_its_own_pool_never_holds_back_other_keys(keyed) -> None:
    t1 = acquire("api", run_id="r1", key="t1").slot_id
    t2 = acquire("api", run_id="r2", key="t2").slot_id
    acquire("api", run_id="r3", key="t3")
    acquire("api", run_id="w1", request="w1", key="t1")  # waits for t1's pool
    acquire("api", run_id="w2", request="w2", key="t1")
    acquire("api", run_id="w3", request="w3", key="t4")  # waits for the total
    release(t2)  # a free slot of the total
    # The oldest waiting run that can use it: w3 (t4); w1 and w2 still wait for t1's pool.
    assert ("w3", "t4", "reserved") in live("api")
    assert queue("api") == ["w1", "w2"]
    release(t1)  # t1's pool frees: strict arrival order within the key
    assert ("w1", "t1", "reserved") in live("api")
    assert queue("api") == ["w2"]
    counters_ok("api")


# --- 9.4 operators: per_key for the limit, a pool size for one key -------------------------------


def test_per_key_override_wins_over_the_config_survives_sync_and_raising_grants_at_once(keyed) -> None:
    acquire("api", run_id="r1", key="t1")
    acquire("api", run_id="w1", request="w1", key="t1")
    set_per_key("api", 2, actor="ops")
    assert ("w1", "t1", "reserved") in live("api")
    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 1})  # a deploy
    assert Limit.objects.get(name="api").per_key == 2
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.old_value, event.new_value, event.key) == ("ops", "1", "2", "")
    set_per_key("api", None, actor="ops")
    assert Limit.objects.get(name="api").per_key == 1
    counters_ok("api")


def test_one_keys_pool_size_can_be_raised_or_lowered_and_lowering_takes_nothing_back(keyed) -> None:
    acquire("api", run_id="r1", key="big")
    acquire("api", run_id="w1", request="w1", key="big")
    set_per_key("api", 2, key="big", actor="ops")  # a large tenant gets 2
    assert [run for run, *_ in live("api")] == ["r1", "w1"]
    set_per_key("api", 1, key="big", actor="ops")  # lowered: both keep their slots
    assert len(live("api")) == 2
    assert acquire("api", run_id="r3", key="big").state == "waiting"
    assert LimitKey.objects.get(key="big").pool_override == 1
    assert AuditEvent.objects.filter(action="per_key", key="big").count() == 2
    counters_ok("api")


@pytest.mark.parametrize("bad", [0, 4, "x", None.__class__, 1.5])
def test_a_bad_per_key_is_refused_naming_the_field_and_changes_nothing(keyed, bad) -> None:
    with pytest.raises(services.LimitsError) as raised:
        set_per_key("api", bad, actor="ops")
    assert raised.value.field == "per_key"
    assert Limit.objects.get(name="api").per_key_override is None
    assert not AuditEvent.objects.filter(action="per_key").exists()


# --- 10.1 several limits, all or nothing ---------------------------------------------------------


def test_several_limits_are_taken_all_or_nothing_and_the_handles_come_in_the_order_given(ab) -> None:
    got = acquire_group(["b", "a"], run_id="r1")
    assert got.state == "busy" and [name for name, _ in got.slots] == ["b", "a"]
    assert {Slot.objects.get(id=slot_id).limit.name for _, slot_id in got.slots} == {"a", "b"}
    assert release(got.slots[0][1]) is True  # each handle is released on its own
    assert live("b") == [] and live("a") == [("r1", "", "busy")]
    counters_ok("a", "b")


@pytest.mark.parametrize("bad", [[], ["a", "a"], ["a", "b", "c", "d"], "a", [1]])
def test_one_to_three_distinct_limits(ab, bad) -> None:
    with pytest.raises(services.LimitsError) as raised:
        acquire_group(bad, run_id="r1")
    assert raised.value.field == "limits"
    assert not Slot.objects.exists()


def test_an_unknown_limit_in_a_group_is_a_clear_error_and_takes_nothing(ab) -> None:
    with pytest.raises(services.LimitsError, match="unknown limit 'nope'"):
        acquire_group(["a", "nope"], run_id="r1")
    assert not Slot.objects.exists() and not QueueEntry.objects.exists()


# --- 10.2 a waiting group holds none; granted, reserved, confirmed and lapsed together -----------


def test_a_waiting_group_holds_none_of_its_slots_and_is_granted_together(ab, clock) -> None:
    a = acquire("a", run_id="ra").slot_id
    b = acquire("b", run_id="rb").slot_id
    assert acquire_group(["a", "b"], run_id="g", request="g").state == "waiting"
    release(a)
    assert live("a") == [] and queue("a") == ["g"]  # a is free, yet the group holds nothing of it
    release(b)
    assert live("a") == [("g", "", "reserved")] and live("b") == [("g", "", "reserved")]
    assert {s.granted_at for s in Slot.objects.filter(run_id="g")} == {clock.now()}
    confirmed = acquire_group(["a", "b"], run_id="g", request="g")
    assert confirmed.state == "busy" and len(confirmed.slots) == 2
    assert live("a") == [("g", "", "busy")] and live("b") == [("g", "", "busy")]
    counters_ok("a", "b")


def test_a_group_that_does_not_confirm_lapses_together_and_goes_to_the_end_of_every_queue(ab, clock) -> None:
    a = acquire("a", run_id="ra").slot_id
    b = acquire("b", run_id="rb").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    acquire("a", run_id="x", request="x")
    release(b)
    release(a)  # the group is granted both (it is older than x)
    assert live("a") == [("g", "", "reserved")]
    clock.advance(minutes=2, seconds=1)
    report = sweep()
    assert report.lapsed == 2
    # a went to x; g is back at the end of both queues, holding nothing.
    assert live("a") == [("x", "", "reserved")] and live("b") == []
    assert queue("a") == ["g"] and queue("b") == ["g"]
    counters_ok("a", "b")


def test_reservations_nobody_confirms_go_back_in_the_order_they_were_granted_with_their_pools(clock) -> None:
    """3.6, 9.1: the sweep takes back every single run's reservation past its 2 minutes (one
    statement on PostgreSQL, issue 44): each run goes to the end of the queue in the order it was
    granted, with its key and its deadline, and the limit's and the pools' counters follow."""
    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 2})
    held = [acquire("api", run_id=f"h{i}", key=key).slot_id for i, key in enumerate(["k1", "k2", None])]
    for run_id, key in [("w1", "k1"), ("w2", "k2"), ("w3", None), ("w4", "k1")]:
        assert acquire("api", run_id=run_id, key=key, timeout="1h").state == "waiting"
    deadlines = dict(QueueEntry.objects.filter(state="waiting").values_list("run_id", "deadline"))
    for slot_id in held:
        release(slot_id)
    assert live("api") == [("w1", "k1", "reserved"), ("w2", "k2", "reserved"), ("w3", "", "reserved")]
    clock.advance(minutes=2, seconds=1)
    report = sweep()
    assert (report.lapsed, report.granted) == (3, 3)
    # Back behind w4 as w1, w2, w3; the three slots then go to w4, w1 (k1's pool of 2) and w2.
    assert queue("api") == ["w3"]
    assert sorted(live("api")) == [("w1", "k1", "reserved"), ("w2", "k2", "reserved"), ("w4", "k1", "reserved")]
    requeued = QueueEntry.objects.filter(run_id__in=["w1", "w2", "w3"], enqueued_at=clock.now())
    assert list(requeued.order_by("position").values_list("run_id", flat=True)) == ["w1", "w2", "w3"]
    assert min(requeued.values_list("position", flat=True)) > QueueEntry.objects.get(run_id="w4").position
    assert {entry.run_id: entry.deadline for entry in requeued} == {r: deadlines[r] for r in ["w1", "w2", "w3"]}
    assert LimitKey.objects.get(limit__name="api", key="k1").head is None  # nothing of k1 waits
    counters_ok("api")


def test_a_group_whose_run_ends_leaves_every_queue(ab) -> None:
    acquire("a", run_id="ra")
    acquire_group(["a", "b"], run_id="g", request="g")
    assert end_run("g") == 2
    assert queue("a") == [] and queue("b") == []
    counters_ok("a", "b")


# --- 10.3 a group that cannot be granted leaves no capacity idle ----------------------------------


def test_a_group_blocked_by_one_limit_does_not_keep_the_other_idle(ab) -> None:
    acquire("b", run_id="rb")  # b is full
    a = acquire("a", run_id="ra").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    acquire("a", run_id="x", request="x")
    release(a)
    assert live("a") == [("x", "", "reserved")]  # x is younger, but g cannot start
    assert QueueEntry.objects.get(run_id="g", limit__name="a").passed_over_at is not None
    counters_ok("a", "b")


# --- 10.4 owed runs -------------------------------------------------------------------------------


def test_a_passed_over_run_becomes_owed_after_two_minutes_and_its_capacity_is_held(ab, clock) -> None:
    b = acquire("b", run_id="rb").slot_id
    a = acquire("a", run_id="ra").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    acquire("a", run_id="x1", request="x1")
    release(a)  # x1 passes g over
    x1 = acquire("a", run_id="x1", request="x1").slot_id
    clock.advance(minutes=2, seconds=1)
    acquire("a", run_id="x2", request="x2")
    release(x1)
    # g is owed: a's free slot is held for it, x2 (younger) gets nothing.
    assert live("a") == [] and queue("a") == ["g", "x2"]
    assert services.held(Limit.objects.get(name="a")) == 1
    release(b)  # b frees: g gets both at once
    assert live("a") == [("g", "", "reserved")] and live("b") == [("g", "", "reserved")]
    assert queue("a") == ["x2"]
    counters_ok("a", "b")


def test_the_capacity_held_for_an_owed_run_goes_on_to_the_groups_behind_it_in_the_same_grant(clock) -> None:
    """10.4 with three limits: a holds its room for the owed group g (a+c); c frees and g gets
    a and c, and a's room left over goes at once to h (a+b) behind it, although h's other limit
    b has nothing to do with c. Never: h waiting with room on a and b and nothing stopping it
    (why it waits would be `next`) until the next sweep, which it did while the release of c
    locked only c and g's limits."""
    declare(
        a={"capacity": 3, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"}, c={"capacity": 1, "max_hold": "1h"}
    )
    c = acquire("c", run_id="x").slot_id
    acquire_group(["a", "c"], run_id="g", request="g")
    held = [acquire("a", run_id=f"y{i}").slot_id for i in range(3)]  # g had room on a: passed over
    acquire_group(["a", "b"], run_id="h", request="h")  # a is full
    clock.advance(minutes=2, seconds=1)  # g is owed
    release(held[0])
    release(held[1])  # a has 2 free, held for g: h waits behind it
    assert queue("a") == ["g", "h"] and services.held(Limit.objects.get(name="a")) == 2
    release(c)
    assert live("a") == [("y2", "", "busy"), ("g", "", "reserved"), ("h", "", "reserved")]
    assert live("b") == [("h", "", "reserved")] and live("c") == [("g", "", "reserved")]
    counters_ok("a", "b", "c")


def test_a_run_held_back_only_by_its_own_key_pool_is_never_passed_over(clock) -> None:
    declare(api={"capacity": 2, "max_hold": "1h", "per_key": 1})
    t1 = acquire("api", run_id="r1", key="t1").slot_id
    t2 = acquire("api", run_id="r2", key="t2").slot_id
    acquire("api", run_id="w", request="w", key="t1")
    acquire("api", run_id="y", request="y", key="t3")
    release(t2)
    assert QueueEntry.objects.get(run_id="w").passed_over_at is None
    release(t1)
    assert ("w", "t1", "reserved") in live("api")


def test_the_starving_group_is_granted_within_the_owed_window_plus_one_release(ab, clock) -> None:
    """A stream of single runs keeps a and b busy; the run needing a+b still gets both."""
    holders = {"a": acquire("a", run_id="s-a-0").slot_id, "b": acquire("b", run_id="s-b-0").slot_id}
    acquire_group(["a", "b"], run_id="g", request="g")
    granted_at = None
    for turn in range(1, 40):
        clock.advance(seconds=10)
        for name in ("a", "b") if turn % 2 else ("b", "a"):
            run = f"s-{name}-{turn}"
            acquire(name, run_id=run, request=run)  # a new single run queues behind
            release(holders[name])
            mine = Slot.objects.filter(request=run, state="reserved").first()
            if mine is not None:
                holders[name] = acquire(name, run_id=run, request=run).slot_id
        if Slot.objects.filter(run_id="g").count() == 2:
            granted_at = turn * 10
            break
    assert granted_at is not None and granted_at <= 120 + 20
    counters_ok("a", "b")


def test_capacity_raised_grants_a_waiting_group_at_once(ab) -> None:
    acquire("a", run_id="ra")
    acquire_group(["a", "b"], run_id="g", request="g")
    set_capacity("a", 2, actor="ops")
    assert ("g", "", "reserved") in live("a") and live("b") == [("g", "", "reserved")]
    counters_ok("a", "b")


def test_a_keyed_group_uses_the_keys_pool_on_every_limit(clock) -> None:
    declare(a={"capacity": 5, "max_hold": "1h", "per_key": 1}, b={"capacity": 5, "max_hold": "1h"})
    assert acquire_group(["a", "b"], run_id="g1", key="t1").state == "busy"
    assert acquire_group(["a", "b"], run_id="g2", key="t1").state == "waiting"  # t1's pool on a
    assert acquire_group(["a", "b"], run_id="g3", key="t2").state == "busy"
    counters_ok("a", "b")


# --- limits verify covers keys and groups ---------------------------------------------------------


def test_verify_holds_after_keys_and_groups_and_catches_a_partial_group_and_a_pool_overrun(clock) -> None:
    from limits.verify import verify

    declare(a={"capacity": 2, "max_hold": "1h", "per_key": 1}, b={"capacity": 1, "max_hold": "1h"})
    acquire("a", run_id="r1", key="t1")
    b = acquire("b", run_id="rb").slot_id
    acquire_group(["a", "b"], run_id="g", request="g", key="t2")
    acquire("a", run_id="w", request="w", key="t1")
    release(b)
    assert verify().ok, verify().violations
    # A group slot of b alone (a partial group), and a second live slot in t1's pool of one.
    Slot.objects.filter(request="g", limit__name="a").delete()
    found = verify().violations
    assert any("group g was granted 1 slots on 1 of its 2 limits" in v for v in found), found
    Slot.objects.filter(run_id="r1").update(key="t2")
    assert any("key" in v for v in verify().violations)


def test_a_waiting_group_times_out_of_every_queue_together(ab, clock) -> None:
    acquire("a", run_id="ra")
    assert acquire_group(["a", "b"], run_id="g", request="g", timeout="30s").state == "waiting"
    clock.advance(seconds=31)
    sweep()
    assert QueueEntry.objects.filter(request="g", state="timed_out").count() == 2
    assert queue("a") == [] and queue("b") == []
    assert acquire_group(["a", "b"], run_id="g", request="g").state == "timed_out"
    counters_ok("a", "b")


def test_the_answer_to_a_replay_lists_the_slots_in_the_order_given(ab) -> None:
    holder = acquire("a", run_id="h").slot_id
    assert acquire_group(["b", "a"], run_id="g", request="g").state == "waiting"
    release(holder)
    got = acquire_group(["b", "a"], run_id="g", request="g")
    assert [name for name, _ in got.slots] == ["b", "a"]
    assert got.slot_id == Slot.objects.get(request="g", limit__name="b").id
