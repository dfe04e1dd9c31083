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

from limits.models import AuditEvent, Limit, QueueEntry, Slot
from limits.services import acquire, acquire_group, release, set_min, set_per_key, set_weight
from tests.concurrency.checks import (
    fair_figures,
    fair_rule_violations,
    outcome_violations,
    owed_jumps,
    pool_overruns,
)
from tests.concurrency.worker import Ceiling
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = [requires_postgres, pytest.mark.django_db]


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


def granted(limit: Limit, request: str, key: str, enqueued: dt.datetime, at: dt.datetime) -> Slot:
    """A run of `key` that waited from `enqueued` and was granted a slot at `at`."""
    entry = raw_entry(limit, request, enqueued, key=key, state="granted", finished_at=at)
    return raw_slot(limit, request, at, key=key, queue_entry=entry)


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
