"""The stress test's own checks (tests/concurrency/checks.py, and the monitor's Ceiling) must fail
when their rule is broken, and pass on a healthy history: healthy histories come from the
services, broken ones are hand-made rows (what a buggy engine would have written). No processes
here, but like the rest of the folder they run on PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db.models import F
from django.utils import timezone

from limits.engine.keys import PASS_STRIDE
from limits.models import AuditEvent, Limit, LimitKey, QueueEntry, Slot
from limits.services import acquire, acquire_group, pause_limit, release, resume_limit, set_min, set_per_key, set_weight
from tests.concurrency.checks import (
    fair_contest,
    fair_figures,
    fair_interleaving,
    fair_pass_violations,
    fair_rule_violations,
    outcome_violations,
    owed_jumps,
    pool_overruns,
)
from tests.concurrency.worker import Ceiling
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = [requires_postgres, pytest.mark.django_db]

S = PASS_STRIDE  # one turn (SPEC 13.2: one grant of weight 1)


@pytest.fixture
def api(clock):
    return declare(api={"capacity": 5, "max_hold": "10m", "per_key": 2})["api"]


def raw_slot(limit: Limit, request: str, at: dt.datetime, **fields: Any) -> Slot:
    """A busy slot written behind the engine's back."""
    Limit.objects.filter(id=limit.id).update(busy_count=F("busy_count") + 1)
    return Slot.objects.create(
        limit=limit,
        run_id=f"run-{request}",
        request=request,
        state="busy",
        granted_at=at,
        confirmed_at=at,
        expires_at=at + dt.timedelta(minutes=10),
        **fields,
    )


def raw_entry(limit: Limit, request: str, at: dt.datetime, **fields: Any) -> QueueEntry:
    position = Limit.objects.get(id=limit.id).next_position
    Limit.objects.filter(id=limit.id).update(next_position=position + 1)
    return QueueEntry.objects.create(
        limit=limit,
        run_id=f"run-{request}",
        request=request,
        position=position,
        enqueued_at=at,
        deadline=at + dt.timedelta(hours=1),
        timeout_ms=3_600_000,
        **fields,
    )


def test_pools_resized_through_the_services_hold(api, clock) -> None:
    """Lowered (nothing taken back), raised (granted at once), reset to per_key, and per_key itself
    changed and reset to the declared value."""
    first = acquire("api", run_id="r1", key="k").slot_id
    acquire("api", run_id="r2", key="k")
    assert acquire("api", run_id="r3", key="k", request="q3").state == "waiting"
    clock.advance(seconds=1)
    set_per_key("api", 1, key="k")  # two held over a pool of 1: allowed
    release(first)  # one held, pool 1: r3 still waits
    clock.advance(seconds=1)
    set_per_key("api", 3, key="k")  # raised: r3 is granted at once
    assert acquire("api", run_id="r3", key="k", request="q3").state == "busy"
    set_per_key("api", None, key="k")
    set_per_key("api", 1)
    clock.advance(seconds=1)
    set_per_key("api", None)
    acquire("api", run_id="r4")
    assert pool_overruns("api") == []


def test_a_grant_above_a_key_pool_is_caught(api, clock) -> None:
    now = timezone.now()
    for request in ("a", "b", "c"):
        raw_slot(api, request, now, key="k")
    found = pool_overruns("api")
    assert len(found) == 1 and "key 'k' to 3 > pool 2" in found[0]


def test_a_grant_above_the_no_key_pool_is_caught(api, clock) -> None:
    now = timezone.now()
    for request in ("a", "b", "c"):
        raw_slot(api, request, now)
    assert ["(no key) to 3 > pool 2" in found for found in pool_overruns("api")] == [True]


def test_lowering_a_pool_takes_nothing_back_but_a_later_grant_above_it_is_caught(api, clock) -> None:
    acquire("api", run_id="r1", key="k")
    acquire("api", run_id="r2", key="k")
    clock.advance(seconds=1)
    set_per_key("api", 1, key="k")
    assert pool_overruns("api") == []
    clock.advance(seconds=1)
    raw_slot(api, "late", timezone.now(), key="k")
    found = pool_overruns("api")
    assert len(found) == 1 and "to 3 > pool 1" in found[0]


def test_a_key_reset_follows_per_key_again(api, clock) -> None:
    set_per_key("api", 4, key="k")
    set_per_key("api", None, key="k")  # back to per_key, 2
    clock.advance(seconds=1)
    now = timezone.now()
    for request in ("a", "b", "c"):
        raw_slot(api, request, now, key="k")
    assert ["to 3 > pool 2" in found for found in pool_overruns("api")] == [True]


def test_a_younger_run_granted_while_an_owed_run_waits_is_caught(api, clock) -> None:
    start = timezone.now()
    owed = raw_entry(api, "old", start, passed_over_at=start + dt.timedelta(seconds=1), group_size=2)
    before = raw_entry(api, "early", start, state="granted", finished_at=start + dt.timedelta(seconds=2))
    raw_slot(api, "early", start + dt.timedelta(seconds=2), queue_entry=before)  # not owed yet: fine
    assert owed_jumps("api", owed_after_ms=5_000) == []
    late_at = start + dt.timedelta(seconds=6)
    after = raw_entry(api, "young", start, state="granted", finished_at=late_at)
    raw_slot(api, "young", late_at, queue_entry=after)
    found = owed_jumps("api", owed_after_ms=5_000)
    assert len(found) == 1 and f"owed #{owed.position}" in found[0]
    QueueEntry.objects.filter(id=owed.id).update(state="granted", finished_at=late_at)
    assert owed_jumps("api", owed_after_ms=5_000) == []  # granted at that very instant: first


def test_what_a_client_was_told_is_held_against_the_rows(clock) -> None:
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})
    got = acquire_group(["b", "a"], run_id="g", request="g:0", key="k")
    told = {
        "request": "g:0",
        "limits": ["b", "a"],
        "key": "k",
        "state": "busy",
        "slot_ids": [slot_id for _, slot_id in got.slots],
        "handle_limits": [name for name, _ in got.slots],
        "ended_run": False,
    }
    assert outcome_violations([{"outcomes": [told]}]) == []
    swapped = {**told, "handle_limits": ["a", "b"]}
    assert "told busy with" in outcome_violations([{"outcomes": [swapped]}])[0]
    timed_out = {**told, "state": "timed_out", "slot_ids": [], "handle_limits": []}
    assert "was confirmed" in outcome_violations([{"outcomes": [timed_out]}])[0]
    assert "requests nobody made: ['g:0']" in outcome_violations([{"outcomes": []}])[0]
    assert outcome_violations([{"outcomes": []}], ignore="g:") == []


def test_the_monitor_lets_a_lowering_stand_but_not_a_level_that_grows_above_the_size() -> None:
    ceiling = Ceiling()
    assert not ceiling.judge("pool", 3, 3, size_changed=False)
    assert not ceiling.judge("pool", 3, 1, size_changed=True)  # lowered under three held
    assert not ceiling.judge("pool", 2, 1, size_changed=False)  # one freed, none granted
    assert ceiling.judge("pool", 3, 1, size_changed=False)  # a grant above the size
    assert not ceiling.judge("pool", 5, 5, size_changed=False)
    assert not ceiling.judge("pool", 9, None, size_changed=False)  # no size: the total alone
    assert ceiling.judge("other", 2, 1, size_changed=False)  # first seen above its size


# --- fair shares (SPEC 13): fair_rule_violations and fair_figures --------------------------------


@pytest.fixture
def shared(clock):
    """A fair limit of capacity 3: 'vip' has a min of 2, 'heavy' a weight of 2, 'tiny' a pool of 1."""
    limit = declare(shared={"capacity": 3, "max_hold": "10m", "share": "fair"})["shared"]
    set_min("shared", 2, key="vip")
    set_weight("shared", 2, key="heavy")
    set_per_key("shared", 1, key="tiny")
    clock.advance(seconds=1)
    return limit


def moved(seconds: float) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def freed(slot: Slot, at: dt.datetime) -> None:
    Slot.objects.filter(id=slot.id).update(state="released", freed_at=at)
    Limit.objects.filter(id=slot.limit_id).update(busy_count=F("busy_count") - 1)


def granted(
    limit: Limit, request: str, key: str, enqueued: dt.datetime, at: dt.datetime, fair_pass: int | None = None
) -> Slot:
    """A run of `key` that waited from `enqueued` (joining at `fair_pass`, in turns) and was
    granted a slot at `at` (ranked at that pass)."""
    ranked = None if fair_pass is None else int(fair_pass * S)
    entry = raw_entry(limit, request, enqueued, key=key, state="granted", finished_at=at, fair_pass=ranked)
    return raw_slot(limit, request, at, key=key, queue_entry=entry, fair_pass=ranked)


def test_a_fair_limit_served_through_the_services_passes(shared, clock) -> None:
    flood = [acquire("shared", run_id=f"f{i}", key="flood").slot_id for i in range(3)]
    for i in range(3, 6):
        assert acquire("shared", run_id=f"f{i}", request=f"f{i}:0", key="flood").state == "waiting"
    clock.advance(seconds=1)
    assert acquire("shared", run_id="s1", key="small").state == "waiting"
    clock.advance(seconds=1)
    release(flood[0])  # to the small key (0 held), though the flood's runs came first
    assert Slot.objects.get(run_id="s1").state == "reserved"
    clock.advance(seconds=1)
    release(flood[1])  # to the flood: nobody else waits
    assert acquire("shared", run_id="f3", request="f3:0", key="flood").state == "busy"

    assert fair_rule_violations("shared") == []
    seen = fair_figures("shared", "flood")
    assert (seen["waits_behind_flood_backlog"], seen["served_before_flood_again"]) == (1, 1)
    assert seen["grants"] == {"flood": 4, "small": 1}


def test_a_grant_to_the_flood_while_a_key_holding_less_waits_is_caught(shared, clock) -> None:
    held = [raw_slot(shared, f"f{i}", moved(0), key="flood") for i in range(3)]
    small = raw_entry(shared, "s1", moved(1), key="small")
    freed(held[0], moved(2))
    granted(shared, "f3", "flood", moved(0.5), moved(2))  # flood at 2 after the free, small at 0
    AuditEvent.objects.create(at=moved(1.5), actor="sweep", action="expire", limit=shared)  # no rule changed

    found = fair_rule_violations("shared")

    assert len(found) == 1 and f"#{small.position} of key 'small' waited ahead of it (SPEC 13.2)" in found[0]
    assert fair_figures("shared", "flood")["most_flood_grants_in_one_wait"] == 0  # never granted: not counted


def test_a_key_below_its_min_comes_before_a_smaller_share(shared, clock) -> None:
    raw_slot(shared, "v1", moved(0), key="vip")  # 1 held, min 2: served first
    held = raw_slot(shared, "h1", moved(0), key="heavy")
    raw_slot(shared, "f1", moved(0), key="flood")
    raw_entry(shared, "v2", moved(1), key="vip")
    freed(held, moved(2))
    granted(shared, "h2", "heavy", moved(0.5), moved(2))  # heavy at 0 held: a smaller share, yet after vip

    assert ["key 'vip' waited ahead" in found for found in fair_rule_violations("shared")] == [True]


def test_a_key_whose_pool_is_full_or_whose_share_is_not_smaller_may_wait(shared, clock) -> None:
    raw_slot(shared, "t1", moved(0), key="tiny")  # its pool of 1 is full
    raw_entry(shared, "t2", moved(1), key="tiny")
    raw_slot(shared, "h1", moved(0), key="heavy")
    raw_slot(shared, "h2", moved(0), key="heavy")  # 2 held / weight 2 = 1: as the flood at 1
    raw_entry(shared, "h3", moved(1), key="heavy")
    held = raw_slot(shared, "f1", moved(0), key="flood")
    freed(held, moved(2))
    granted(shared, "f2", "flood", moved(0.5), moved(2))

    assert fair_rule_violations("shared") == []


def test_grants_at_one_instant_get_the_benefit_of_the_doubt(shared, clock) -> None:
    """At 2: the flood's slot freed, the small run granted, the flood granted: a fair order of
    those three exists (free, small, flood), so nothing is reported."""
    held = [raw_slot(shared, f"f{i}", moved(0), key="flood") for i in range(3)]
    freed(held[0], moved(2))
    freed(held[1], moved(2))
    granted(shared, "s1", "small", moved(1), moved(2))
    granted(shared, "f3", "flood", moved(0.5), moved(2))

    assert fair_rule_violations("shared") == []


def test_capacity_left_free_while_a_run_with_room_waits_is_caught(shared, clock) -> None:
    raw_slot(shared, "f1", moved(0), key="flood")
    waiting = raw_entry(shared, "s1", moved(1), key="small")

    found = fair_rule_violations("shared")

    assert found == [
        f"shared: 1 of 3 in use at {moved(1).isoformat()} while #{waiting.position} of key 'small' "
        "waited with room in its pool (SPEC 13.6)"
    ]


def test_capacity_left_free_while_only_full_pools_or_past_deadlines_wait_passes(shared, clock) -> None:
    raw_slot(shared, "t1", moved(0), key="tiny")
    held = raw_slot(shared, "f1", moved(0), key="flood")
    raw_slot(shared, "f2", moved(0), key="flood")
    raw_entry(shared, "t2", moved(1), key="tiny")  # its pool of 1 is full
    late = raw_entry(shared, "s1", moved(1), key="small")
    QueueEntry.objects.filter(id=late.id).update(deadline=moved(1.5))  # times out at the next sweep
    freed(held, moved(2))

    assert fair_rule_violations("shared") == []


def test_changes_before_the_last_audited_one_are_not_judged(shared, clock) -> None:
    raw_slot(shared, "f1", moved(0), key="flood")
    raw_entry(shared, "s1", moved(1), key="small", state="cancelled", finished_at=moved(2))
    clock.advance(seconds=3)
    set_weight("shared", 3, key="heavy")  # the weights of the past are not kept

    assert fair_rule_violations("shared") == []


# --- fair turns (SPEC 13.2 amended, issue 43): passes in the order, the turns, the interleaving ----


@pytest.fixture
def pair(clock):
    """A fair limit of capacity 1 (keys at 0 held tie on the share: the pass decides)."""
    limit = declare(pair={"capacity": 1, "max_hold": "10m", "share": "fair"})["pair"]
    clock.advance(seconds=1)
    return limit


def served_in_turns(clock: Any, name: str, arrivals: list[tuple[str, int]]) -> list[str]:
    """The hold model through the services, each call 10 ms after the last: the runs of each key
    arrive (key, how many), then the oldest busy slot is released and what it reserves is
    confirmed (its run asks again), until none waits. The keys in grant order."""
    keys: dict[str, str] = {}
    for key, count in arrivals:
        for i in range(count):
            run = f"{key}-{i}"
            keys[run] = key
            clock.advance(seconds=0.01)
            acquire(name, run_id=run, request=run, key=key, timeout="1h")
    while True:
        clock.advance(seconds=0.01)
        for run, request in Slot.objects.filter(limit__name=name, state="reserved").values_list("run_id", "request"):
            assert acquire(name, run_id=run, request=request, key=keys[run], timeout="1h").state == "busy"
        if not QueueEntry.objects.filter(limit__name=name, state="waiting").exists():
            break
        oldest = Slot.objects.filter(limit__name=name, state="busy").order_by("confirmed_at", "id").first()
        assert oldest is not None
        clock.advance(seconds=0.01)
        release(oldest.id)
    return [
        keys[run]
        for run in Slot.objects.filter(limit__name=name).order_by("granted_at", "id").values_list("run_id", flat=True)
    ]


def test_keys_taking_turns_through_the_services_pass_every_fair_check(clock) -> None:
    """The fault run's shape, small: capacity 2, a flood queued first, then five tenants, one of
    weight 3. Nothing is reported, and while they all compete the flood gets about its turn."""
    declare(turns={"capacity": 2, "max_hold": "10m", "share": "fair"})
    set_weight("turns", 3, key="heavy")
    tenants = ["heavy", "t1", "t2", "t3", "t4"]
    order = served_in_turns(clock, "turns", [("flood", 14), *((tenant, 6) for tenant in tenants)])

    assert fair_rule_violations("turns") == []
    assert fair_pass_violations("turns") == []
    assert fair_interleaving("turns") == []
    seen = fair_contest("turns", ["flood", *tenants], until="heavy")
    window = seen["grants"]
    assert seen["total"] == sum(window.values()) >= 10, (seen, order)
    assert window["flood"] / seen["total"] <= 1.5 / 6, (seen, order)
    assert window["heavy"] >= 2 * max(window[t] for t in tenants[1:]), (seen, order)
    assert seen["longest_hold"][1] in {"flood", *tenants}


def test_a_grant_to_a_key_whose_turn_had_not_come_is_caught(pair, clock) -> None:
    """Both keys hold nothing when the slot frees: the one with the smaller pass goes first. 'a'
    joined at pass 1 (its entry keeps it); 'b' was ranked at pass 2."""
    held = raw_slot(pair, "x1", moved(0), key="x", fair_pass=0)
    waiting = raw_entry(pair, "a1", moved(1), key="a", fair_pass=S)
    freed(held, moved(2))
    granted(pair, "b1", "b", moved(1.5), moved(2), fair_pass=2)

    found = fair_rule_violations("pair")

    assert len(found) == 1, found
    assert (
        f"#{waiting.position} of key 'a' waited ahead of it in the turns (its pass 1 against 2) (SPEC 13.2)" in found[0]
    )


def test_a_tie_on_the_pass_or_a_pass_the_rows_cannot_tell_is_let_be(pair, clock) -> None:
    held = raw_slot(pair, "x1", moved(0), key="x", fair_pass=0)
    raw_entry(pair, "a1", moved(1), key="a", fair_pass=2 * S)  # as b: a tie, decided by arrival
    raw_entry(pair, "c1", moved(1), key="c")  # joined before the passes were kept (NULL)
    freed(held, moved(2))
    granted(pair, "b1", "b", moved(1.5), moved(2), fair_pass=2)

    assert fair_rule_violations("pair") == []


def test_a_rivals_pass_is_replayed_from_its_grants(pair, clock) -> None:
    """'a' was served at pass 0 (its pass is 1 after it) and waits again: 'b' ranked at 1 ties,
    ranked at 2 jumps a's turn."""
    first = granted(pair, "a1", "a", moved(0), moved(0.5), fair_pass=0)
    raw_entry(pair, "a2", moved(0.2), key="a", fair_pass=0)
    freed(first, moved(1))
    tie = granted(pair, "b1", "b", moved(0.3), moved(1), fair_pass=1)
    assert fair_rule_violations("pair", idle=False) == []
    freed(tie, moved(2))
    granted(pair, "b2", "b", moved(0.4), moved(2), fair_pass=2)

    found = fair_rule_violations("pair", idle=False)

    assert len(found) == 1 and "of key 'a' waited ahead of it in the turns (its pass 1 against 2)" in found[0]


def test_turns_that_do_not_add_up_are_caught(pair, clock) -> None:
    served_in_turns(clock, "pair", [("a", 3), ("b", 2)])
    assert fair_pass_violations("pair") == []
    slot = Slot.objects.filter(limit=pair, key="a").order_by("granted_at").last()
    assert slot is not None and slot.fair_pass == 2 * S
    Slot.objects.filter(id=slot.id).update(fair_pass=3 * S)  # a grant ranked a turn too late

    found = fair_pass_violations("pair")

    assert any(
        f"slot {slot.id} of key 'a' granted at" in f and "ranked at pass 3, where its turns add up to 2" in f
        for f in found
    ), found
    assert any("key 'a' keeps pass 3, where its turns add up to 4" in f for f in found), found


def test_a_key_entering_at_another_than_the_smallest_active_pass_is_caught(pair, clock) -> None:
    served_in_turns(clock, "pair", [("a", 3), ("b", 1)])
    entry = QueueEntry.objects.get(limit=pair, key="b")
    assert entry.fair_pass == S  # b had nothing: it entered at a's pass (a held its first slot)
    QueueEntry.objects.filter(id=entry.id).update(fair_pass=0)  # at the back of... no: ahead of a

    found = fair_pass_violations("pair")

    assert any(
        "key 'b' entered the turns at" in f and "at pass 0, not the smallest pass of the keys active then (1 to 1)" in f
        for f in found
    ), found


def test_a_pass_stored_on_the_key_that_its_turns_do_not_add_up_to_is_caught(pair, clock) -> None:
    served_in_turns(clock, "pair", [("a", 2), ("b", 2)])
    assert fair_pass_violations("pair") == []
    LimitKey.objects.filter(limit=pair, key="b").update(fair_pass=0)

    assert fair_pass_violations("pair") == ["pair: key 'b' keeps pass 0, where its turns add up to 3 (SPEC 13.2)"]


def test_a_key_served_three_times_while_a_competing_key_is_served_once_is_caught(pair, clock) -> None:
    """Capacity 1, k and j waiting from 0 with three runs each, both at pass 0: k, j, k, k. k's
    three grants (ranked 0, 1, 2) span one of j's, which competed throughout (holding nothing,
    not ahead in the turns when they began)."""
    for i in range(3):
        raw_entry(pair, f"k{i}", moved(0), key="k", fair_pass=0, state="granted", finished_at=moved(9))
    waits = [raw_entry(pair, f"j{i}", moved(0), key="j", fair_pass=0) for i in range(3)]
    k = [raw_slot(pair, f"k{i}", moved(at), key="k", fair_pass=i * S) for i, at in enumerate([1, 3, 4])]
    j = raw_slot(pair, "j0", moved(2), key="j", fair_pass=0)
    QueueEntry.objects.filter(id=waits[0].id).update(state="granted", finished_at=moved(2))
    freed(k[0], moved(1.9))
    freed(j, moved(2.9))
    freed(k[1], moved(3.9))

    found = fair_interleaving("pair")

    assert found == [
        f"pair: key 'k' served 3 times from {moved(1).isoformat()} to {moved(4).isoformat()} while key 'j' "
        "competed throughout and was served 1 time(s) (issue 43: keys take turns)"
    ]
    assert any(
        "of key 'j' waited ahead of it in the turns (its pass 1 against 2)" in f
        for f in fair_rule_violations("pair", idle=False)
    )


def test_three_grants_of_a_key_behind_in_the_turns_or_holding_less_are_due(pair, clock) -> None:
    """k served three times in a row while j waited: j had been served two turns more before (its
    pass 2 against k's 0) and its grants come once k caught up."""
    raw_entry(pair, "j-wait", moved(0), key="j", fair_pass=2 * S)
    for i, at in enumerate([1, 2, 3]):
        slot = granted(pair, f"k{i}", "k", moved(0.5), moved(at), fair_pass=i)
        freed(slot, moved(at + 0.9))

    assert fair_interleaving("pair") == []
    assert fair_rule_violations("pair", idle=False) == []


def test_a_key_that_leaves_the_turns_and_enters_again_at_the_smallest_pass_is_not_owed_its_turns(clock) -> None:
    """The six-process stress test's schedule, small, through the services: a fair limit of
    capacity 2; x and k (weight 1) keep runs waiting, j (weight 2) has one run at a time and
    asks again only once its slot is released. Each time j comes back it had nothing held or
    waiting, so it enters the turns at the smallest pass of the keys active then (SPEC 13.2),
    k's, above the half turn j had left: j forfeits it. So k is served three turns (ranked 2, 3,
    4) while j waited at each of those grants and was served twice in between, and nothing was
    out of 13.2's order. The interleaving's bound holds only while j stays in the turns (its pass
    moved by its own grants alone): here it left, and no window is reported."""
    declare(trio={"capacity": 2, "max_hold": "10m", "share": "fair"})
    set_weight("trio", 2, key="j")
    keys: dict[str, str] = {}

    def ask(run: str) -> str:
        keys.setdefault(run, run[0])
        clock.advance(seconds=0.01)
        return acquire("trio", run_id=run, request=run, key=keys[run], timeout="1h").state

    def release_and_confirm(run: str) -> str:
        """`run`'s slot released; the run its slot went to confirms it. That run."""
        clock.advance(seconds=0.01)
        release(Slot.objects.get(limit__name="trio", run_id=run, state="busy").id)
        reserved = Slot.objects.get(limit__name="trio", state="reserved")
        assert ask(reserved.run_id) == "busy"
        return reserved.run_id

    assert [ask("h1"), ask("h2")] == ["busy", "busy"]  # h ranked at 0 and 1: its pass is 2
    assert {ask(run) for run in ["x1", "x2", "x3", "k1", "k2", "k3", "j1"]} == {"waiting"}  # all at 2
    served = [release_and_confirm("h1"), release_and_confirm("h2")]  # x (2 -> 3), k (2 -> 3)
    served.append(release_and_confirm("x1"))  # j at 2 before k at 3 (k holds one): j 2 -> 2.5
    served.append(release_and_confirm("j1"))  # x, j had nothing left
    assert ask("j2") == "waiting"  # j enters at 3 (k's), not 2.5
    served.append(release_and_confirm("k1"))  # k at 3 before j at 3: k's run waited first
    served.append(release_and_confirm("x2"))  # j 3 -> 3.5
    served.append(release_and_confirm("j2"))  # x
    assert ask("j3") == "waiting"  # j enters at 4 (k's), not 3.5
    served.append(release_and_confirm("k2"))  # k at 4 before j at 4

    assert served == ["x1", "k1", "j1", "x2", "k2", "j2", "x3", "k3"]
    joins = QueueEntry.objects.filter(limit__name="trio", key="j").order_by("id").values_list("fair_pass", flat=True)
    assert list(joins) == [2 * S, 3 * S, 4 * S]
    ranked = Slot.objects.filter(limit__name="trio", key="k").order_by("granted_at").values_list("fair_pass", flat=True)
    assert list(ranked) == [2 * S, 3 * S, 4 * S]
    assert fair_rule_violations("trio") == []
    assert fair_pass_violations("trio") == []
    assert fair_interleaving("trio") == []


def test_the_contest_window_runs_from_all_waiting_until_the_key_named_has_none(clock) -> None:
    declare(turns={"capacity": 1, "max_hold": "10m", "share": "fair"})
    limit = Limit.objects.get(name="turns")
    raw_slot(limit, "x0", moved(0), key="x")  # holds the slot from before: the longest hold
    pause_limit("turns")
    resume_limit("turns")  # no rule of the order changes: nothing is left unjudged
    for key in ("a", "b"):
        raw_entry(limit, f"{key}-wait", moved(1), key=key, state="granted", finished_at=moved(3 if key == "a" else 5))
    seen = fair_contest("turns", ["a", "b"], until="a")
    assert (seen["start"], seen["end"], seen["total"]) == (moved(3), moved(3), 0)
    assert fair_contest("turns", ["a", "c"], until="a") == {}
