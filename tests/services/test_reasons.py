"""SPEC 6.5: every waiting run says why it waits, in one vocabulary, computed by the grant's own
rules (limits.engine.waiting.why_waiting): the limit is paused; the limit is full; its key's pool is
full; capacity is held for an owed run; another limit of its group is full (named, with what
stops it); on a full fair limit (SPEC 13.7), other keys hold less of their share and are served
first, but for the key next. Both databases."""

from __future__ import annotations

import pytest

from limits import selectors
from limits.models import Limit, QueueEntry, Slot
from limits.services import acquire, acquire_group, pause_limit, release, why_waiting
from tests.factories import declare

pytestmark = pytest.mark.django_db


def reasons(limit: str) -> dict[str, tuple[str, str, str]]:
    """{run id: (code, limit named, text)} of the runs waiting on `limit`."""
    entries = list(QueueEntry.objects.filter(limit__name=limit, state="waiting").order_by("position"))
    found = why_waiting(entries)
    return {e.run_id: (found[e.id].code, found[e.id].limit, found[e.id].text) for e in entries}


def test_a_run_behind_a_full_limit_waits_for_the_limit(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    acquire("calls", run_id="r1")
    acquire("calls", run_id="r2")
    assert reasons("calls") == {"r2": ("limit_full", "calls", "the limit is full")}


def test_a_paused_limit_says_so_before_full(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    acquire("calls", run_id="r1")
    acquire("calls", run_id="r2")
    pause_limit("calls")
    assert reasons("calls") == {"r2": ("limit_paused", "calls", "the limit is paused")}


def test_a_full_key_pool_is_the_reason_while_the_limit_has_room(clock) -> None:
    declare(api={"capacity": 4, "max_hold": "1h", "per_key": 1})
    acquire("api", run_id="a1", key="acme")
    acquire("api", run_id="a2", key="acme")
    found = reasons("api")
    assert found == {"a2": ("key_pool_full", "api", "its key's pool is full")}
    entry = QueueEntry.objects.get(run_id="a2")
    assert why_waiting([entry])[entry.id].as_json() == {
        "code": "key_pool_full",
        "text": "its key's pool is full",
        "limit": "api",
        "key": "acme",
    }


def test_a_group_names_its_other_limit_and_what_stops_it(clock) -> None:
    declare(api={"capacity": 2, "max_hold": "1h"}, db={"capacity": 1, "max_hold": "1h"})
    held = acquire("db", run_id="d1").slot_id
    acquire_group(["api", "db"], run_id="g1")
    assert reasons("api") == {"g1": ("group_limit_full", "db", "another limit of its group, db, is full")}
    assert reasons("db") == {"g1": ("limit_full", "db", "the limit is full")}
    release(held)  # db frees: g1 is granted both
    assert reasons("api") == {}
    pause_limit("db")
    acquire("db", run_id="d2")
    acquire_group(["api", "db"], run_id="g2")
    assert reasons("api")["g2"][2] == "another limit of its group, db, is paused"


def test_capacity_held_for_an_owed_run_names_it(clock) -> None:
    """SPEC 10.4: g1 (api+db) is passed over on api by younger single runs while db is full; once
    owed, api holds its free capacity for g1, and a younger single run on api says why."""
    declare(api={"capacity": 2, "max_hold": "1h"}, db={"capacity": 1, "max_hold": "1h"})
    held_api = acquire("api", run_id="a0").slot_id
    acquire("api", run_id="a00")
    acquire("db", run_id="d1")
    acquire_group(["api", "db"], run_id="g1")
    acquire("api", run_id="a1")
    release(held_api)  # a1 (younger, single) is granted api's slot: g1 is passed over
    clock.advance(minutes=3)  # g1 waited past OWED_AFTER_MS: owed
    acquire("api", run_id="a2")
    release(Slot.objects.get(run_id="a1").id)  # frees api: held for g1
    found = reasons("api")
    assert found["a2"] == ("held_for_owed", "api", "capacity is held for an owed run (g1)")
    assert found["g1"][0] == "group_limit_full"


def test_the_queries_do_not_grow_with_the_entries(clock, django_assert_max_num_queries) -> None:
    declare(api={"capacity": 1, "max_hold": "1h", "per_key": 1}, db={"capacity": 1, "max_hold": "1h"})
    acquire("api", run_id="held")
    acquire("db", run_id="held-db")
    for i in range(40):
        if i % 2:
            acquire_group(["api", "db"], run_id=f"g{i}", key=f"k{i % 7}")
        else:
            acquire("api", run_id=f"r{i}", key=f"k{i % 7}")
    entries = list(QueueEntry.objects.filter(limit__name="api", state="waiting"))
    assert len(entries) == 40
    with django_assert_max_num_queries(6):
        found = why_waiting(entries)
    assert {reason.code for reason in found.values()} == {"limit_full"}


# --- a full fair limit: whose turn it is (SPEC 13.7) ---------------------------------------------


def fair_tenants(clock) -> None:
    """jobs (capacity 2, fair, per_key 2): acme holds both slots (granted a second apart) and
    waits with one more; globex and initech wait with one each, then a run without a key."""
    declare(jobs={"capacity": 2, "max_hold": "1h", "per_key": 2, "share": "fair"})
    for run_id, key in [("a1", "acme"), ("a2", "acme"), ("a3", "acme"), ("g1", "globex"), ("i1", "initech")]:
        clock.advance(seconds=1)
        acquire("jobs", run_id=run_id, key=key, timeout="1h")
    acquire("jobs", run_id="n1", timeout="1h")


TURN = "other keys hold less of their share and are served first"


def test_on_a_full_fair_limit_the_key_next_waits_for_the_limit_and_the_others_for_their_turn(clock) -> None:
    fair_tenants(clock)
    assert reasons("jobs") == {
        "a3": ("limit_full", "jobs", "the limit is full"),  # acme holds its whole pool: not a turn it waits for
        "g1": ("limit_full", "jobs", "the limit is full"),
        "i1": ("fair_turn", "jobs", TURN),
        "n1": ("fair_turn", "jobs", TURN),
    }
    entry = QueueEntry.objects.get(run_id="i1")
    assert why_waiting([entry])[entry.id].as_json() == {
        "code": "fair_turn",
        "text": TURN,
        "limit": "jobs",
        "key": "initech",
    }
    release(Slot.objects.get(run_id="a1").id)  # the slot held longest: globex's turn, as it said
    assert Slot.objects.get(state="reserved").run_id == "g1"
    # The next slot to free is acme's a2: at 0 in use, acme's oldest run ties with initech's on
    # the pass and arrived first.
    found = reasons("jobs")
    assert (found["a3"][0], found["i1"][0], found["n1"][0]) == ("limit_full", "fair_turn", "fair_turn")


def test_the_key_next_is_the_fair_queues_first_row(clock) -> None:
    """why_waiting finds the next key itself (the run page, `runs show`) as the queue's listing
    does (the limit page, `slots`, the API): the same run first."""
    fair_tenants(clock)
    limit = Limit.objects.get(name="jobs")
    first = selectors.queue_page(limit, number=1, size=50).items[0]
    assert (first.run_id, why_waiting([first])[first.id].code) == ("g1", "limit_full")


def test_a_full_pool_on_a_full_fair_limit_is_the_limit_being_full(clock) -> None:
    declare(jobs={"capacity": 2, "max_hold": "1h", "per_key": 1, "share": "fair"})
    acquire("jobs", run_id="a1", key="acme")
    acquire("jobs", run_id="g1", key="globex")
    acquire("jobs", run_id="a2", key="acme", timeout="1h")
    assert reasons("jobs") == {"a2": ("limit_full", "jobs", "the limit is full")}


def test_a_paused_fair_limit_says_paused(clock) -> None:
    fair_tenants(clock)
    pause_limit("jobs")
    assert {code for code, _, _ in reasons("jobs").values()} == {"limit_paused"}


def test_a_group_names_the_fair_limit_that_serves_other_keys_first(clock) -> None:
    fair_tenants(clock)
    declare(jobs={"capacity": 2, "max_hold": "1h", "per_key": 2, "share": "fair"}, db={"capacity": 5, "max_hold": "1h"})
    acquire_group(["db", "jobs"], run_id="w1", key="wayne", timeout="1h")
    assert reasons("db")["w1"] == (
        "group_limit_full",
        "jobs",
        "another limit of its group, jobs, serves other keys first",
    )


def test_a_fair_limits_reasons_take_a_few_queries_whatever_the_entries(clock, django_assert_max_num_queries) -> None:
    fair_tenants(clock)
    for i in range(40):
        acquire("jobs", run_id=f"t{i}", key=f"t-{i % 9}", timeout="1h")
    entries = list(QueueEntry.objects.filter(limit__name="jobs", state="waiting"))
    with django_assert_max_num_queries(6):  # the limit, its keys, then the next key: frees, keys, no-key head
        found = why_waiting(entries)
    assert {reason.code for reason in found.values()} == {"limit_full", "fair_turn"}
