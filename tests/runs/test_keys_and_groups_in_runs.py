"""SPEC 9.2, 10.1, 10.2, 10.5 from a workflow body: acquire_slot/with_limit with a key,
acquire_slots/with_limits over several limits, the hook step's name, waiting holding nothing."""

from __future__ import annotations

import pytest

from limits import services
from limits.models import Slot
from limits.verify import verify
from limits.workflow import acquire_slot, acquire_slots, release_slot, with_limits
from studio.models import Run
from studio.runs.runtime import advance
from studio.workflows import start_run, step, workflow
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def limits(clock):
    declare(
        partner_api={"capacity": 2, "max_hold": "1h", "per_key": 1},
        voice_calls={"capacity": 1, "max_hold": "1h"},
    )


@step
def call(ids: list[str]) -> dict:
    return {"ids": ids}


@workflow(name="test_both_limits")
def both_limits(input: dict) -> dict:
    return with_limits(["partner-api", "voice-calls"], lambda: call(["x"]), key=input.get("account"))


@workflow(name="test_keyed_acquire")
def keyed_acquire(input: dict) -> dict:
    slot = acquire_slot("partner-api", key=input["account"], label="order-1")
    return {"slot": slot.id, "key": slot.key, "limiter": slot.limiter}


@workflow(name="test_acquire_two")
def acquire_two(input: dict) -> dict:
    slots = acquire_slots(["voice-calls", "partner-api"], key=input.get("account"))
    for slot in slots:
        release_slot(slot.id)
    return {"limiters": [slot.limiter for slot in slots]}


def test_a_keyed_acquire_returns_a_handle_with_its_key(limits) -> None:
    run = start_run(keyed_acquire, {"account": "acme"})
    result = Run.objects.get(id=run.id).output
    assert result["key"] == "acme" and result["limiter"] == "partner-api"
    assert Slot.objects.get(id=result["slot"]).key == "acme"
    assert_counters_match_rows("partner-api")


def test_acquire_slots_returns_handles_in_the_order_given(limits) -> None:
    run = start_run(acquire_two, {"account": "acme"})
    assert Run.objects.get(id=run.id).output == {"limiters": ["voice-calls", "partner-api"]}
    assert holders("voice-calls") == [] and holders("partner-api") == []


def test_a_run_waiting_for_several_limits_holds_none_and_its_hook_names_them_all(limits, no_worker) -> None:
    blocker = services.acquire("voice-calls", run_id="blocker").slot_id
    run = start_run(both_limits, {"account": "acme"})
    assert advance(run.id) == "suspended"
    steps = [s.name for s in Run.objects.get(id=run.id).steps]
    assert steps == ["Esperando hueco · partner-api + voice-calls"]
    assert holders("partner-api") == [] and queue("partner-api") == [run.id] and queue("voice-calls") == [run.id]
    services.release(blocker)
    assert holders("voice-calls") == [(run.id, "reserved")] and holders("partner-api") == [(run.id, "reserved")]
    assert advance(run.id) == "completed"
    assert holders("voice-calls") == [] and holders("partner-api") == []
    assert verify().ok, verify().violations
    assert_counters_match_rows("partner-api")
    assert_counters_match_rows("voice-calls")


def test_bad_keys_and_limit_lists_fail_the_run_with_a_clear_error(limits) -> None:
    run = start_run(keyed_acquire, {"account": "bad\nkey"})
    assert Run.objects.get(id=run.id).status == "failed"
    assert "control characters" in (Run.objects.get(id=run.id).error or "")
    assert not Slot.objects.exists()
