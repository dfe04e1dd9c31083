"""SPEC 10.4 (passed-over and owed runs), each as the shortest sequence of service calls that the
model test (tests/model/test_engine_model.py) found the engine getting wrong, kept as regression
tests now that limits.engine.grant agrees:

"A waiting run is passed over when a younger run is granted a slot of one of its limits at a
moment when this run's own key pool on that limit had room [...]. A run that has been passed
over and has waited more than 2 minutes becomes owed: from then on no younger run is granted on
any of its limits."

Found: a group of three limits was marked only on the limit where the grant first examined it
(and could starve); the pool's room was judged after the younger run's grant; an owed run held
capacity only on the limits where it had been marked; a run becoming owed during a settle held
nothing until the next one; and exactly 2 minutes counted as "more than 2 minutes".
"""

from __future__ import annotations

import pytest

from limits.models import QueueEntry, Slot
from limits.services import acquire, acquire_group, release, set_capacity
from limits.verify import verify
from tests.factories import declare, queue

pytestmark = pytest.mark.django_db

ONE = {"capacity": 1, "max_hold": "1h"}


def reserved(name: str) -> list[str]:
    return list(Slot.objects.filter(limit__name=name, state="reserved").values_list("run_id", flat=True))


def passed_over(request: str) -> bool:
    return QueueEntry.objects.filter(request=request, state="waiting").exclude(passed_over_at=None).exists()


def test_a_group_of_three_passed_over_on_a_limit_it_was_not_examined_at_is_marked(clock) -> None:
    """g waits for a (full); b and c have room. y, younger, is granted c: g is passed over.
    (Found: the engine marked g only at b, the first of its limits with room, where it examined
    it; limits verify reported "passed group entry #1 over without marking it passed over".)"""
    declare(a=ONE, b=ONE, c=ONE)
    acquire("a", run_id="ha")
    acquire_group(["a", "b", "c"], run_id="g", request="g")
    assert acquire("c", run_id="y", request="y").state == "busy"
    assert passed_over("g")
    assert verify().ok, verify().violations


def test_a_group_of_three_limits_is_not_starved_by_single_runs_on_two_of_them(clock) -> None:
    """Never: a run waits forever while its limits keep freeing (10.4). a is idle; a stream of
    single runs keeps b and c busy, each releasing in turn. The run needing a+b+c is passed over
    at the first release and must get all three within the owed window plus a round of releases
    (as the two-limit case does, tests/services/test_keys_and_groups.py). (Found: examined at a,
    its first limit with room, every time, g was never marked, and b and c went to younger runs
    for ever.)"""
    declare(a=ONE, b=ONE, c=ONE)
    holders = {name: acquire(name, run_id=f"s-{name}-0").slot_id for name in "bc"}
    acquire_group(["a", "b", "c"], run_id="g", request="g")
    granted_after = None
    for turn in range(1, 60):
        clock.advance(seconds=10)
        for name in "bc" if turn % 2 else "cb":
            run = f"s-{name}-{turn}"
            acquire(name, run_id=run, request=run)  # a new single run queues behind
            release(holders[name])
            if Slot.objects.filter(request=run, state="reserved").exists():
                holders[name] = acquire(name, run_id=run, request=run).slot_id
        if Slot.objects.filter(run_id="g").count() == 3:
            granted_after = turn * 10
            break
    assert granted_after is not None and granted_after <= 120 + 20


def test_an_owed_run_holds_back_younger_runs_on_all_of_its_limits(clock) -> None:
    """g (a+b) is passed over on a, then waits over 2 minutes: it is owed, and no younger run may
    be granted on a or on b. (Found: capacity was held only on a, where g was marked: x2, younger,
    was granted b.)"""
    declare(a=ONE, b=ONE)
    hb = acquire("b", run_id="hb").slot_id
    ha = acquire("a", run_id="ha").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    acquire("a", run_id="x1", request="x1")
    release(ha)  # a goes to x1, younger than g: g is passed over
    assert passed_over("g")
    acquire("a", run_id="x1", request="x1")
    clock.advance(minutes=2, seconds=1)  # g is owed
    acquire("b", run_id="x2", request="x2")
    release(hb)
    assert reserved("b") == [] and queue("b") == ["g", "x2"]  # b is held for g


def test_a_younger_run_of_the_same_key_taking_the_pools_last_slot_passes_the_group_over(clock) -> None:
    """g (key t1, a+b) waits because b is full; y, younger, same key, is granted the one slot of
    t1's pool on a that g could have used. g waited only because b was full: it is passed over.
    (Found: the pool's room was judged after y's grant, so g stayed unmarked.)"""
    declare(a={"capacity": 2, "max_hold": "1h", "per_key": 1}, b=ONE)
    acquire("b", run_id="hb")
    acquire_group(["a", "b"], run_id="g", request="g", key="t1")
    assert acquire("a", run_id="y", request="y", key="t1").state == "busy"
    assert passed_over("g")


def test_a_run_owed_from_a_grant_holds_back_the_next_grant_of_the_same_settle(clock) -> None:
    """g (a+b) has waited 3 minutes when a's capacity rises from 1 to 3: y1, younger, is granted
    a, which passes g over, and g, having waited over 2 minutes, is owed from then on. y2, younger
    still, must not be granted in that same settle. (Found: owed runs were looked for only when a
    settle started.)"""
    declare(a=ONE, b=ONE)
    acquire("b", run_id="hb")
    acquire("a", run_id="ha")
    acquire_group(["a", "b"], run_id="g", request="g")
    clock.advance(minutes=3)
    acquire("a", run_id="y1", request="y1")
    acquire("a", run_id="y2", request="y2")
    set_capacity("a", 3, actor="ops")
    assert reserved("a") == ["y1"] and queue("a") == ["g", "y2"]


def test_a_run_passed_over_is_owed_only_after_more_than_two_minutes(clock) -> None:
    """Passed over, g has waited exactly 2 minutes, not more: it is not owed yet, and the slot
    freed then goes to the oldest run that can take it, x2. (Found: 2 minutes counted as owed.)"""
    declare(a=ONE, b=ONE)
    acquire("b", run_id="hb")
    ha = acquire("a", run_id="ha").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    acquire("a", run_id="x1", request="x1")
    release(ha)
    x1 = acquire("a", run_id="x1", request="x1").slot_id
    clock.advance(minutes=2)
    acquire("a", run_id="x2", request="x2")
    release(x1)
    assert reserved("a") == ["x2"]
