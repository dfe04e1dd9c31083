"""SPEC 14.3, 14.7 in the engine: an acquisition with on_full 'replace' (the call's, else the
strictest of its limits': skip before replace before wait) that cannot be granted at once takes
the place of its key's entries waiting for the same limits: they end 'replaced', naming it, and
it joins the queue at the oldest one's position.

Must never happen: a replaced entry left waiting, or one of another key or another set of
limits replaced; a run holding a slot touched; a replace answered while room it fits was free;
two entries of one key waiting on a replace limit. Every case runs on both databases: on
PostgreSQL limits_acquire and limits_acquire_group in engine.sql, on SQLite limits.engine.python.
"""

from __future__ import annotations

import pytest

from limits import services
from limits.config import BOX_NAME, define_workspace
from limits.models import Limit, LimitKey, QueueEntry
from limits.services import BoxPlace, LimitsError, acquire, acquire_group, release, set_on_full
from limits.verify import verify
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


def replaced_count(name: str) -> int:
    return Limit.objects.get(name=name).replaced_count


def entries(name: str) -> list[tuple[str, int, str, str]]:
    """(run, position, state, replaced_by) of every entry of a limit, by id."""
    return list(
        QueueEntry.objects.filter(limit__name=name)
        .order_by("id")
        .values_list("run_id", "position", "state", "replaced_by")
    )


def test_replace_takes_the_place_of_the_keys_waiting_runs(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "on_full": "replace"})
    acquire("calls", run_id="h1", key="acme")
    assert acquire("calls", run_id="a1", key="acme", on_full="wait").state == "waiting"
    assert acquire("calls", run_id="g1", key="globex").state == "waiting"
    assert acquire("calls", run_id="a2", key="acme", on_full="wait").state == "waiting"
    assert queue("calls") == ["a1", "g1", "a2"]
    answer = acquire("calls", run_id="a3", key="acme", request="a3:1")
    assert answer.state == "waiting"
    assert queue("calls") == ["a3", "g1"]  # in a1's place, ahead of globex's run
    rows = {run: (state, by) for run, _, state, by in entries("calls")}
    assert rows["a1"] == ("replaced", "a3:1") and rows["a2"] == ("replaced", "a3:1")
    assert holders("calls") == [("h1", "busy")]  # the run holding a slot is never touched
    assert replaced_count("calls") == 2
    assert LimitKey.objects.get(limit__name="calls", key="acme").waiting_count == 1
    assert_counters_match_rows("calls")
    assert verify().ok


def test_a_replaced_acquisition_asked_again_answers_replaced_with_its_replacer(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    acquire("calls", run_id="h1")
    acquire("calls", run_id="r1", request="r1:1")
    acquire("calls", run_id="r2", request="r2:1", on_full="replace")  # the call's own on_full
    again = acquire("calls", run_id="r1", request="r1:1")
    assert (again.state, again.limit, again.replaced_by, again.replaced_by_run) == ("replaced", "calls", "r2:1", "r2")
    grouped = acquire_group(["calls"], run_id="r1", request="r1:1")
    assert (grouped.state, grouped.replaced_by_run) == ("replaced", "r2")
    assert queue("calls") == ["r2"]


def test_without_a_key_the_runs_without_one_replace_each_other(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "on_full": "replace"})
    acquire("calls", run_id="h1")
    acquire("calls", run_id="n1")
    acquire("calls", run_id="k1", key="acme")
    acquire("calls", run_id="n2")
    assert queue("calls") == ["n2", "k1"]
    # n1's row is n2's place now (its position and id); what n1 was is kept as history
    assert [(run, state) for run, _, state, _ in entries("calls")] == [
        ("n2", "waiting"),
        ("k1", "waiting"),
        ("n1", "replaced"),
    ]
    assert_counters_match_rows("calls")


def test_nothing_waiting_at_its_key_it_joins_as_a_wait_and_caps_still_refuse(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "on_full": "replace", "max_waiting": 1})
    acquire("calls", run_id="h1", key="acme")
    assert acquire("calls", run_id="g1", key="globex").state == "waiting"
    refused = acquire("calls", run_id="a1", key="acme")
    assert (refused.state, refused.reason) == ("refused", "queue_full")
    assert acquire("calls", run_id="g2", key="globex").state == "waiting"  # a replace keeps the length
    assert queue("calls") == ["g2"] and replaced_count("calls") == 1


def test_replace_with_room_is_granted_and_replaces_nobody(clock) -> None:
    declare(calls={"capacity": 3, "max_hold": "1h", "per_key": 1, "on_full": "replace"})
    acquire("calls", run_id="a1", key="acme")
    assert acquire("calls", run_id="a2", key="acme").state == "waiting"
    assert acquire("calls", run_id="g1", key="globex").state == "busy"  # its key has room
    assert queue("calls") == ["a2"] and replaced_count("calls") == 0


def test_the_replaced_run_position_goes_to_the_replacer_and_a_release_grants_it(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h", "on_full": "replace"})
    held = acquire("calls", run_id="h1").slot_id
    acquire("calls", run_id="a1", key="acme")
    acquire("calls", run_id="g1", key="globex")
    acquire("calls", run_id="a2", key="acme")
    assert queue("calls") == ["a2", "g1"]
    first = {run: position for run, position, _, _ in entries("calls")}
    assert first["a2"] < first["g1"]
    release(held)
    assert holders("calls") == [("a2", "reserved")]  # first in line: a1's place
    assert_counters_match_rows("calls")
    assert verify().ok


def test_a_group_replaces_only_the_keys_runs_waiting_for_the_same_limits(clock) -> None:
    declare(api={"capacity": 1, "max_hold": "1h", "on_full": "replace"}, calls={"capacity": 1, "max_hold": "1h"})
    acquire("api", run_id="h1", key="acme")
    acquire("calls", run_id="h2", key="acme")
    acquire_group(["api", "calls"], run_id="both1", key="acme")
    acquire("api", run_id="api1", key="acme", on_full="wait")
    acquire_group(["api", "calls"], run_id="both2", key="acme")
    assert queue("api") == ["both2", "api1"]
    assert queue("calls") == ["both2"]
    states = {run: state for run, _, state, _ in entries("api")}
    assert states == {"both1": "replaced", "api1": "waiting", "both2": "waiting"}
    assert replaced_count("api") == 1 and replaced_count("calls") == 1
    assert_counters_match_rows("api")
    assert_counters_match_rows("calls")
    assert verify().ok


def test_a_group_is_answered_by_the_strictest_on_full(clock) -> None:
    declare(
        api={"capacity": 1, "max_hold": "1h", "on_full": "replace"},
        calls={"capacity": 1, "max_hold": "1h", "on_full": "skip"},
        mail={"capacity": 1, "max_hold": "1h"},
    )
    acquire("api", run_id="h1")
    acquire("calls", run_id="h2")
    acquire("mail", run_id="h3")
    acquire_group(["api", "calls"], run_id="s1", on_full="wait")
    assert acquire_group(["api", "calls"], run_id="s2").state == "skipped"  # skip before replace
    acquire_group(["api", "mail"], run_id="m1")
    assert acquire_group(["api", "mail"], run_id="m2").state == "waiting"  # replace before wait
    assert queue("mail") == ["m2"]
    assert acquire_group(["api", "mail"], run_id="m3", on_full="wait").state == "waiting"  # the call's wins
    assert queue("mail") == ["m2", "m3"]


def test_an_operator_sets_replace_and_a_bad_value_names_the_field(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    assert set_on_full("calls", "replace", actor="ops").on_full == "replace"
    with pytest.raises(LimitsError) as raised:
        acquire("calls", run_id="r1", on_full="newest")
    assert raised.value.field == "on_full"
    assert "'wait', 'skip' or 'replace'" in str(raised.value)


def test_the_config_declares_replace() -> None:
    workspace = define_workspace(limits={"calls": {"capacity": 1, "max_hold": "1h", "on_full": "replace"}})
    assert workspace.limits["calls"].on_full == "replace"


def test_a_replace_at_a_key_with_many_waiting_replaces_them_all_in_one_call(clock) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    acquire("calls", run_id="h1", key="acme")
    for i in range(50):
        acquire("calls", run_id=f"a{i}", key="acme")
    acquire("calls", run_id="g1", key="globex")
    answer = acquire("calls", run_id="new", key="acme", on_full="replace")
    assert answer.state == "waiting"
    assert queue("calls") == ["new", "g1"]
    assert replaced_count("calls") == 50
    assert_counters_match_rows("calls")
    assert verify().ok


def test_under_the_box_the_same_limits_means_the_same_workflows_pool_too(clock) -> None:
    """SPEC 14.7 with 12.2: a wait in a body under the box is for its limits and a box slot of
    its workflow's pool; a replace takes the place of the key's waits for the same limits from
    the same pools, so a run of another workflow waiting with the same key stays (the chaos run
    found limits verify's check n judging it otherwise)."""
    services.sync_workspace(
        define_workspace(
            limits={"calls": {"capacity": 1, "max_hold": "1h", "on_full": "replace"}}, run_concurrency={"base": 4}
        )
    )
    acquire("calls", run_id="h1")
    acquire_group(["calls"], run_id="a1", key="acme", box=BoxPlace(BOX_NAME, "wf-a"))
    acquire_group(["calls"], run_id="b1", key="acme", box=BoxPlace(BOX_NAME, "wf-b"))
    assert queue("calls") == ["a1", "b1"] and replaced_count("calls") == 0
    acquire_group(["calls"], run_id="a2", key="acme", box=BoxPlace(BOX_NAME, "wf-a"))
    assert queue("calls") == ["a2", "b1"] and queue(BOX_NAME) == ["a2", "b1"]
    assert replaced_count("calls") == replaced_count(BOX_NAME) == 1
    assert_counters_match_rows("calls")
    assert verify().ok


def test_a_run_that_gave_back_its_box_slot_and_still_waits_replaces_after_joining(clock) -> None:
    """SPEC 14.3 with 12.2: a run executing in its box slot asks for a limit whose room fits it,
    so it is not answered at once; but it must wait (the limit has runs waiting), gives its box
    slot back, and an older run waiting for the box alone takes it. The grant did not reach it:
    it replaces its key's run waiting for the same limits and pools after all, in that run's
    place (found by the chaos run: limits verify, check n)."""
    services.sync_workspace(
        define_workspace(
            limits={"calls": {"capacity": 2, "max_hold": "1h", "on_full": "replace"}},
            run_concurrency={"base": 1, "burst": 1.0},
        )
    )
    assert acquire_group([], run_id="r1", box=BoxPlace(BOX_NAME, "wf")).state == "busy"  # it executes
    assert acquire_group([], run_id="s1", box=BoxPlace(BOX_NAME, "other")).state == "waiting"
    older = acquire_group(["calls"], run_id="o1", request="o1:1", key="acme", box=BoxPlace(BOX_NAME, "wf"))
    assert older.state == "waiting"
    newer = acquire_group(["calls"], run_id="r1", request="r1:2", key="acme", box=BoxPlace(BOX_NAME, "wf"))
    assert newer.state == "waiting"
    assert holders(BOX_NAME) == [("s1", "reserved")]  # the box slot it gave back
    assert queue("calls") == ["r1"] and queue(BOX_NAME) == ["r1"]
    again = acquire_group(["calls"], run_id="o1", request="o1:1", key="acme", box=BoxPlace(BOX_NAME, "wf"))
    assert (again.state, again.replaced_by, again.replaced_by_run) == ("replaced", "r1:2", "r1")
    assert replaced_count("calls") == replaced_count(BOX_NAME) == 1
    assert_counters_match_rows("calls")
    assert_counters_match_rows(BOX_NAME)
    assert verify().ok
