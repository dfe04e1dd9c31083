"""SPEC 10.1, "acquire_slots([limit_a, limit_b, ...]) [...] returns their handles in the order
given", for a run that waited. Found by the model test (tests/model/test_engine_model.py), kept as
regression tests: the first answer of acquire_group listed the slots in the order given, but the
answer to a replay of the same request (how every run that waited gets its slots, and how its
reservations are confirmed) listed them in the limits' id order; the workflow layer pairs those
ids with the limits in the order given (limits.workflow._acquire), so a run that waited for
acquire_slots(["voice-calls", "partner-api"]) got each handle's id under the other limit's name.
"""

from __future__ import annotations

import pytest

from limits import services
from limits.models import Slot
from limits.workflow import acquire_slots, release_slot
from stackbone.models import Run
from stackbone.runs.runtime import advance
from studio.workflows import start_run, workflow
from tests.factories import declare

ONE = {"capacity": 1, "max_hold": "1h"}


@pytest.mark.django_db
def test_the_replay_of_a_group_that_waited_answers_its_slots_in_the_order_given(clock) -> None:
    declare(a=ONE, b=ONE)
    blocker = services.acquire("a", run_id="blocker").slot_id
    assert services.acquire_group(["b", "a"], run_id="g", request="g").state == "waiting"
    services.release(blocker)  # g is reserved a and b
    got = services.acquire_group(["b", "a"], run_id="g", request="g")  # the woken run confirms them
    assert got.state == "busy"
    assert [name for name, _ in got.slots] == ["b", "a"]
    assert got.slot_id == Slot.objects.get(request="g", limit__name="b").id


@workflow(name="test_found_acquire_two_after_a_wait")
def acquire_two_after_a_wait(input: dict) -> dict:
    slots = acquire_slots(["voice-calls", "partner-api"])
    for slot in slots:
        release_slot(slot.id)
    return {"handles": [[slot.limiter, slot.id] for slot in slots]}


@pytest.mark.django_db(transaction=True)
def test_a_run_that_waited_for_several_limits_gets_each_handle_under_its_own_limit(clock, no_worker) -> None:
    declare(partner_api=ONE, voice_calls=ONE)  # partner-api is declared (and numbered) first
    blocker = services.acquire("voice-calls", run_id="blocker").slot_id
    run = start_run(acquire_two_after_a_wait, {})
    assert advance(run.id) == "suspended"
    services.release(blocker)
    assert advance(run.id) == "completed"
    handles = Run.objects.get(id=run.id).output["handles"]
    assert [limiter for limiter, _ in handles] == ["voice-calls", "partner-api"]
    assert [Slot.objects.get(id=slot_id).limit.name for _, slot_id in handles] == ["voice-calls", "partner-api"]


@pytest.mark.django_db
def test_the_replay_of_a_group_whose_run_ended_while_reserved_names_its_limits_in_the_order_given(clock) -> None:
    """Like every other answer to a group's replay (waiting, timed out, busy): `limit` is the first
    limit given and `limits` all of them, in the order given. (Found: the id order's first limit,
    and no `limits`.)"""
    declare(a=ONE, b=ONE)
    blocker = services.acquire("a", run_id="blocker").slot_id
    services.acquire_group(["b", "a"], run_id="g", request="g")
    services.release(blocker)  # g is reserved a and b
    services.end_run("g")  # ... and ends before confirming them (3.7)
    got = services.acquire_group(["b", "a"], run_id="g", request="g")
    assert (got.state, got.limit, got.limits) == ("cancelled", "b", ("b", "a"))
