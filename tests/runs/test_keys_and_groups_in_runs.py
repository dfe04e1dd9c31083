"""SPEC 9.2, 10.1, 10.2, 10.5 from a workflow body: acquire_slot/with_limit with a key,
acquire_slots/with_limits over several limits, the hook step's name, waiting holding nothing."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.models import Slot
from limits.verify import verify
from limits.workflow import acquire_slot, acquire_slots, release_slot, with_limits
from stackbone.models import Run, Step
from stackbone.runs.runtime import advance
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


def test_a_with_limits_block_gives_its_slots_back_in_one_step_and_grants_a_waiting_group(limits, no_worker) -> None:
    """Issue 44: the slots of a with_limits block go back together, one recorded step and one
    engine call, which grants the run waiting for the same two limits (it was one release_slot
    step per slot, each locking both limits, the first unable to grant the group)."""
    blocker = services.acquire("voice-calls", run_id="blocker").slot_id
    first = start_run(both_limits, {"account": "acme"})
    second = start_run(both_limits, {"account": "other"})
    assert advance(first.id) == "suspended" and advance(second.id) == "suspended"
    services.release(blocker)  # first is granted both; second waits behind it for voice-calls
    assert queue("voice-calls") == [second.id]
    with CaptureQueriesContext(connection) as queries:
        assert advance(first.id) == "completed"
    assert [s.name for s in Run.objects.get(id=first.id).steps][-2:] == ["call", "release_slots"]
    if connection.vendor == "postgresql":
        released = [q["sql"] for q in queries if "limits_release" in q["sql"]]
        assert len(released) == 1 and "limits_release_slots" in released[0], released
    assert holders("voice-calls") == [(second.id, "reserved")] and holders("partner-api") == [(second.id, "reserved")]
    assert advance(second.id) == "completed"
    assert verify().ok, verify().violations
    assert_counters_match_rows("partner-api")
    assert_counters_match_rows("voice-calls")


def test_a_run_that_recorded_its_releases_one_by_one_replays_them_one_by_one(limits, no_worker) -> None:
    """A run recorded by the release before issue 44 (a release_slot step per slot) replays the
    older way: no 'the workflow is not deterministic' on replay."""
    run = start_run(both_limits, {"account": "acme"})
    assert advance(run.id) == "completed"
    steps = Step.objects.filter(run_id=run.id).order_by("seq")
    release = steps.get(name="release_slots")
    slot_ids = [slot.id for slot in Slot.objects.filter(run_id=run.id).order_by("limit__name")]
    # As the older release recorded it: one step per slot (with no key: issue 48), then the run
    # is replayed from there.
    Step.objects.filter(id=release.id).update(name="release_slot", key="", result={"released": True})
    Step.objects.create(
        run_id=run.id,
        seq=release.seq + 1,
        name="release_slot",
        kind="step",
        status="completed",
        result={"released": True},
        started_at=release.started_at,
        finished_at=release.finished_at,
    )
    Run.objects.filter(id=run.id).update(status="running", output=None, finished_at=None)
    assert advance(run.id) == "completed", Run.objects.get(id=run.id).error
    assert len(slot_ids) == 2
