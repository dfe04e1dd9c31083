"""SPEC 6.5: every waiting run says why it waits, in one vocabulary, computed by the grant's own
rules (limits.engine.keys.why_waiting): the limit is paused; the limit is full; its key's pool is
full; capacity is held for an owed run; another limit of its group is full (named, with what
stops it). Both databases."""

from __future__ import annotations

import pytest

from limits.models import QueueEntry, Slot
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
