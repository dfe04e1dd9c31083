"""`limits verify`, check l: SPEC 13.6 from the rows of a fair limit.

Must never happen on a fair limit: (a) a grant to a key while another key that could have been
served stood before it in the order of 13.2; (b) capacity left free, not held for an owed run,
while a run that could have been granted waits. Histories played through the engine must pass;
hand-made rows (what a buggy engine would have written) that break (a) or (b) must be reported,
and those the rows cannot judge (a group, a full pool, a pause, a switch from fifo) must not.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import F
from django.utils import timezone

from limits import services
from limits.engine.keys import PASS_STRIDE
from limits.models import AuditEvent, Limit, QueueEntry, Slot
from limits.verify import History, _FairReplay, verify
from tests.factories import declare, holders
from tests.services.test_verify import raw_entry, raw_slot, violations

pytestmark = pytest.mark.django_db


def fair(capacity: int = 2, **fields: object) -> Limit:
    return declare(fair={"capacity": capacity, "max_hold": "1h", "share": "fair", **fields})["fair"]


def take(run: str, key: str | None = None, timeout: str = "1h") -> services.Acquisition:
    """Acquire for `run`, or again: what became of it (a reserved slot is confirmed)."""
    return services.acquire("fair", run_id=run, request=run, key=key, timeout=timeout)


def release(run: str) -> None:
    services.release(Slot.objects.get(limit__name="fair", request=run, state__in=["busy", "reserved"]).id)


def confirm_reserved(keys: dict[str, str | None]) -> None:
    for run in Slot.objects.filter(limit__name="fair", state="reserved").values_list("request", flat=True):
        assert take(run, keys[run]).state == "busy"


def fair_violations() -> list[str]:
    return [v for v in violations("fair") if "fair share" in v]


# --- histories through the engine ------------------------------------------------------------------


def test_a_fair_history_through_the_engine_holds_13_6(clock) -> None:
    """Weights, a min, the no-key runs, grants spaced and at one instant, a capacity raise, a
    pause, a lapsed reservation and a time-out: verify finds nothing, and fairness did reorder."""
    fair(capacity=3)
    services.set_weight("fair", 2, key="big", actor="ops")
    services.set_min("fair", 1, key="vip", actor="ops")
    clock.advance(seconds=1)
    keys: dict[str, str | None] = {}
    for run, key in [("a0", "a"), ("a1", "a"), ("a2", "a")]:
        keys[run] = key
        assert take(run, key).state == "busy"  # a lone key fills the limit (13.3)
    queued = [("a3", "a"), ("a4", "a"), ("big0", "big"), ("big1", "big"), ("big2", "big"), ("n0", None)]
    queued += [("vip0", "vip"), ("small0", "small"), ("n1", None), ("late", "small")]
    for run, key in queued:
        keys[run] = key
        clock.advance(milliseconds=10)
        assert take(run, key, timeout="90s" if run == "late" else "1h").state == "waiting"
    clock.advance(seconds=1)
    release("a0")  # vip is under its min
    assert "vip0" in {run for run, _ in holders("fair")}
    confirm_reserved(keys)
    clock.advance(seconds=1)
    release("a1")
    release("a2")  # big (weight 2) and a tie broken by arrival, in one instant each
    confirm_reserved(keys)
    clock.advance(seconds=1)
    services.set_capacity("fair", 6, actor="ops")  # three grants at one instant
    clock.advance(minutes=3)  # nobody confirms those three: they lapse; 'late' times out
    services.sweep()
    confirm_reserved(keys)
    clock.advance(seconds=1)
    services.pause_limit("fair", actor="ops")
    release(next(run for run, state in holders("fair") if state == "busy"))  # nothing handed on
    clock.advance(seconds=1)
    services.resume_limit("fair", actor="ops")
    confirm_reserved(keys)
    for _ in range(12):  # each release hands the slot to the key first in 13.2's order
        clock.advance(seconds=1)
        busy = [run for run, state in holders("fair") if state == "busy"]
        if not busy:
            break
        release(busy[0])
        confirm_reserved(keys)
    assert QueueEntry.objects.filter(limit__name="fair", state="timed_out").exists()
    assert Slot.objects.filter(limit__name="fair", state="lapsed").exists()
    assert verify(["fair"]).ok, verify(["fair"]).violations
    granted = list(
        QueueEntry.objects.filter(limit__name="fair", state="granted")
        .order_by("finished_at", "id")
        .values_list("position", flat=True)
    )
    assert granted != sorted(granted)  # not first come, first served: fairness reordered grants


def test_a_fair_history_at_one_instant_holds_13_6(clock) -> None:
    """Every call in one instant (the clock stands still): grants, frees and joins cannot be
    ordered by their times, and verify gives the engine the benefit of the doubt."""
    fair(capacity=2, per_key=2)
    keys = {"a0": "a", "a1": "a", "a2": "a", "b0": "b", "c0": "c", "c1": "c", "n0": None}
    for run, key in keys.items():
        take(run, key)
    release("a0")
    confirm_reserved(keys)
    release("a1")
    services.set_capacity("fair", 4, actor="ops")
    confirm_reserved(keys)
    assert verify(["fair"]).ok, verify(["fair"]).violations


def test_grants_made_while_the_limit_was_fifo_are_not_judged_by_the_fair_order(clock) -> None:
    declare(fair={"capacity": 2, "max_hold": "1h"})
    take("a0", "a")
    take("a1", "a")
    take("a2", "a")
    take("b0", "b")
    clock.advance(seconds=1)
    release("a0")  # fifo: a2, the oldest; fair would have served b (a holds 1, b none)
    assert "a2" in {run for run, _ in holders("fair")}
    clock.advance(seconds=1)
    services.set_share("fair", "fair", actor="ops")
    assert verify(["fair"]).ok, verify(["fair"]).violations
    history = History.load(Limit.objects.get(name="fair"))
    judged_from_the_start = _FairReplay(history, since=timezone.now() - dt.timedelta(days=1)).violations()
    assert len(judged_from_the_start) == 1 and "a2" in judged_from_the_start[0]  # what the period excuses


# --- (a) a key served out of 13.2's order ----------------------------------------------------------


def out_of_order(limit: Limit) -> None:
    """Capacity 2: key a holds both; b0 (key b) then a2 (key a) queue; a0 is released and a2,
    not b0, is granted: a holds 1, b none, so b stood first. Every row ends freed or finished
    (the counters stay in step)."""
    t = timezone.now()
    raw_slot(limit, "a0", t, key="a", state="released", freed_at=t + dt.timedelta(seconds=2))
    raw_slot(limit, "a1", t, key="a", state="released", freed_at=t + dt.timedelta(seconds=4))
    raw_entry(
        limit, "b0", t + dt.timedelta(seconds=1), key="b", state="cancelled", finished_at=t + dt.timedelta(seconds=3)
    )
    granted = raw_entry(
        limit, "a2", t + dt.timedelta(seconds=1), key="a", state="granted", finished_at=t + dt.timedelta(seconds=2)
    )
    raw_slot(
        limit,
        "a2",
        t + dt.timedelta(seconds=2),
        key="a",
        queue_entry=granted,
        state="released",
        confirmed_at=t + dt.timedelta(seconds=2),
        freed_at=t + dt.timedelta(seconds=4),
    )


def test_a_grant_to_a_key_while_a_key_first_in_the_fair_order_waited_is_a_violation(clock) -> None:
    limit = fair(capacity=2)
    clock.advance(seconds=1)
    out_of_order(limit)
    found = violations("fair")
    assert len(found) == 1, found
    assert "fair share: #2 (run-a2) of key 'a' granted at" in found[0]
    assert "while key 'b' stood before it (#1 (run-b0) waited; in use / weight 0/1 against 1/1)" in found[0]


def tie(limit: Limit, *, b_first: bool, b_pass: int = 2) -> None:
    """Capacity 3: a holds a0 and a1, b holds b9; b0 (key b) and a2 (key a) queue, in the order
    given; a0 is released and a2 granted: a and b hold 1 each. Their passes (in turns) as the
    engine keeps them: a's 2 after its two grants, b's `b_pass` after b9; at a tie in the pass
    too, the older run's key goes first."""
    t = timezone.now()
    s = PASS_STRIDE
    raw_slot(limit, "a0", t, key="a", state="released", freed_at=t + dt.timedelta(seconds=2), fair_pass=0)
    raw_slot(limit, "a1", t, key="a", state="released", freed_at=t + dt.timedelta(seconds=4), fair_pass=s)
    raw_slot(
        limit, "b9", t, key="b", state="released", freed_at=t + dt.timedelta(seconds=4), fair_pass=(b_pass - 1) * s
    )
    queued = {}
    for run in ("b0", "a2") if b_first else ("a2", "b0"):
        queued[run] = raw_entry(
            limit,
            run,
            t + dt.timedelta(seconds=1),
            key=run[0],
            state="cancelled",
            fair_pass=(2 if run[0] == "a" else b_pass) * s,
        )
    QueueEntry.objects.filter(id=queued["b0"].id).update(finished_at=t + dt.timedelta(seconds=3))
    QueueEntry.objects.filter(id=queued["a2"].id).update(state="granted", finished_at=t + dt.timedelta(seconds=2))
    raw_slot(
        limit,
        "a2",
        t + dt.timedelta(seconds=2),
        key="a",
        queue_entry=queued["a2"],
        state="released",
        confirmed_at=t + dt.timedelta(seconds=2),
        freed_at=t + dt.timedelta(seconds=4),
        fair_pass=2 * s,
    )


@pytest.mark.parametrize("b_first", [True, False])
def test_a_tie_goes_to_the_key_whose_oldest_run_came_first(clock, b_first: bool) -> None:
    limit = fair(capacity=3)
    clock.advance(seconds=1)
    tie(limit, b_first=b_first)
    found = violations("fair")
    if b_first:
        assert len(found) == 1 and "#2 (run-a2) of key 'a'" in found[0], found
        assert "key 'b' stood before it (#1 (run-b0) waited; in use / weight 1/1 against 1/1)" in found[0]
    else:
        assert found == []


def test_a_tie_in_the_share_goes_to_the_smaller_pass_before_the_older_run(clock) -> None:
    """SPEC 13.2 as amended: a holds 1 and b holds 1, a's run is older, but b has had fewer turns
    (pass 1 against a's 2): a2's grant passed b over. Before the amendment this was the rule."""
    limit = fair(capacity=3)
    clock.advance(seconds=1)
    tie(limit, b_first=False, b_pass=1)
    found = violations("fair")
    assert len(found) == 1 and "#1 (run-a2) of key 'a'" in found[0], found
    assert "key 'b' stood before it" in found[0] and "its pass 1 turns" in found[0]


def test_a_grant_ranked_at_a_pass_its_turns_do_not_add_up_to_is_a_violation(clock) -> None:
    """(c): the pass a grant was ranked at is the key's turns so far; a grant that skipped a
    stride (a key charged less than its turns) is reported."""
    fair(capacity=1)
    take("a0", "a")
    clock.advance(seconds=1)
    take("a1", "a")
    take("b0", "b")
    clock.advance(seconds=1)
    release("a0")  # a1 and b0 tie on share and pass; a1 is older
    confirm_reserved({"a1": "a", "b0": "b"})
    assert fair_violations() == []
    Slot.objects.filter(limit__name="fair", request="a1").update(fair_pass=0)
    found = fair_violations()
    assert any("(a1) of key 'a' granted at" in v and "at pass 0 where its turns add up to 1" in v for v in found), found


def test_a_key_that_had_nothing_joins_at_the_smallest_pass_of_the_active_keys(clock) -> None:
    fair(capacity=1)
    take("a0", "a")
    clock.advance(seconds=1)
    take("b0", "b")  # a alone is active, at pass 1: b joins at 1
    assert fair_violations() == []
    QueueEntry.objects.filter(limit__name="fair", request="b0").update(fair_pass=0)
    found = fair_violations()
    assert any("(b0) of key 'b' joined at" in v and "not at the smallest pass" in v for v in found), found


@pytest.mark.parametrize("excuse", ["a under its min", "b's pool full", "b0 a group", "b0 past its deadline"])
def test_no_violation_when_the_passed_key_could_not_be_served_or_did_not_stand_first(clock, excuse: str) -> None:
    limit = fair(capacity=3)
    if excuse == "a under its min":
        services.set_min("fair", 2, key="a", actor="ops")  # a holding 1 is under its min: a first
    elif excuse == "b's pool full":
        services.set_per_key("fair", 1, key="b", actor="ops")  # b holds b9: its pool of 1 is full
    clock.advance(seconds=1)
    tie(limit, b_first=True)
    if excuse == "b0 a group":
        QueueEntry.objects.filter(limit=limit, request="b0").update(group_size=2)  # it may wait for another limit
    elif excuse == "b0 past its deadline":
        QueueEntry.objects.filter(limit=limit, request="b0").update(deadline=F("enqueued_at") + dt.timedelta(seconds=1))
    assert violations("fair") == []


def test_rows_older_than_the_last_weight_change_are_not_judged(clock) -> None:
    limit = fair(capacity=2)
    clock.advance(seconds=1)
    out_of_order(limit)
    clock.advance(seconds=10)
    services.set_weight("fair", 5, key="b", actor="ops")
    assert violations("fair") == []


# --- (b) capacity left free while a run could be granted -----------------------------------------


def left_free(limit: Limit, **entry: object) -> None:
    """Capacity 2, a holds 1; b0 queues at t+1 and waits until cancelled at t+2, one slot free."""
    t = timezone.now()
    raw_slot(limit, "a0", t, key="a", state="released", freed_at=t + dt.timedelta(seconds=3))
    entry.setdefault("key", "b")
    raw_entry(
        limit, "b0", t + dt.timedelta(seconds=1), state="cancelled", finished_at=t + dt.timedelta(seconds=2), **entry
    )


def test_capacity_left_free_while_a_run_that_could_be_granted_waits_is_a_violation(clock) -> None:
    limit = fair(capacity=2)
    clock.advance(seconds=1)
    left_free(limit)
    found = violations("fair")
    assert len(found) == 1, found
    assert "fair share: 1 slot(s) left free at" in found[0]
    assert "(1 of capacity 2 in use) while #1 (run-b0) of key 'b' could have been granted" in found[0]


def test_a_run_of_a_full_pool_a_group_a_past_deadline_or_a_paused_limit_may_wait_beside_free_capacity(
    clock,
) -> None:
    limit = fair(capacity=2, per_key=1)
    clock.advance(seconds=1)
    left_free(limit, key="a")  # a's pool (1) is full
    assert violations("fair") == []
    QueueEntry.objects.filter(limit=limit).update(key="b", group_size=2)  # another of its limits is full
    assert violations("fair") == []
    QueueEntry.objects.filter(limit=limit).update(group_size=1, deadline=F("enqueued_at"))  # it timed out
    assert violations("fair") == []
    QueueEntry.objects.filter(limit=limit).update(deadline=F("enqueued_at") + dt.timedelta(hours=1))
    assert len(fair_violations()) == 1
    at = QueueEntry.objects.get(limit=limit).enqueued_at
    for action, when in (("pause", at - dt.timedelta(seconds=1)), ("resume", at + dt.timedelta(seconds=5))):
        AuditEvent.objects.create(at=when, actor="ops", action=action, limit=limit)
    assert violations("fair") == []


def test_capacity_held_for_an_owed_run_is_not_left_free(clock) -> None:
    """An older group passed over and waiting over 2 minutes holds the free capacity (10.4)."""
    limit = fair(capacity=2)
    clock.advance(seconds=1)
    t = timezone.now()
    raw_entry(
        limit,
        "owed",
        t - dt.timedelta(minutes=5),
        key="c",
        group_size=2,
        passed_over_at=t - dt.timedelta(minutes=4),
        state="cancelled",
        finished_at=t + dt.timedelta(seconds=2),
    )
    left_free(limit)
    assert fair_violations() == []


def test_a_fifo_limit_is_not_judged_by_the_fair_check(clock) -> None:
    limit = declare(fair={"capacity": 2, "max_hold": "1h"})["fair"]
    clock.advance(seconds=1)
    left_free(limit)
    tie(limit, b_first=True)
    assert fair_violations() == []


def test_a_key_that_had_nothing_and_is_granted_at_once_enters_the_turns_first(clock) -> None:
    """A grant at once to a key with nothing held or waiting is ranked at the smallest active
    pass (it entered the turns), not at the pass its earlier turns added up to: no violation
    (a hot loop of acquire at once and release showed 196 false ones before)."""
    fair(capacity=2)
    take("a0", "a")
    take("a1", "a")  # a: 2 turns
    clock.advance(seconds=1)
    release("a0")
    release("a1")
    clock.advance(seconds=1)
    take("b0", "b")  # nobody active: b enters at 0, 1 turn after its grant
    clock.advance(seconds=1)
    take("a2", "a")  # a had nothing: it enters at b's pass (1), not at its own 2
    assert Slot.objects.get(limit__name="fair", request="a2").fair_pass == PASS_STRIDE
    assert fair_violations() == []
    Slot.objects.filter(limit__name="fair", request="a2").update(fair_pass=2 * PASS_STRIDE)
    assert any("(a2) of key 'a' granted at" in v for v in fair_violations())
