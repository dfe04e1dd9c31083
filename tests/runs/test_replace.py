"""SPEC 14.3 and 14.7 through the run layer: a workflow body's acquisition with on_full
'replace' takes the place of its key's runs waiting for the same limits; their acquire_slot
(acquire_slots, with_limit, hold_slot) raises SlotReplacedError (recognised by `.is_`, naming the
limit and the replacing acquisition and run) once they are woken, and a replay raises it again
from the recorded step, never asking the engine anew. A run's start under such a limit replaces
too (its key's runs queued to start end 'replaced': tests/runs/test_start_replace.py)."""

from __future__ import annotations

import pickle

import pytest

from limits.models import QueueEntry
from limits.runs import start_run, workflow
from limits.workflow import SlotReplacedError, acquire_slot, acquire_slots, hold_slot, with_limit
from stackbone.models import Run
from stackbone.runs.runtime import advance
from tests.factories import assert_counters_match_rows, declare, queue

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []


@pytest.fixture
def full(clock):
    declare(
        syncs={"capacity": 1, "max_hold": "1h", "on_full": "replace"},
        voice_calls={"capacity": 1, "max_hold": "1h"},
    )
    start_run(hold_forever, {"limit": "syncs", "key": "acme"})
    start_run(hold_forever, {"limit": "voice-calls", "key": "acme"})
    calls.clear()


@workflow(name="test_replace_hold_forever")
def hold_forever(input: dict) -> dict:
    slot = acquire_slot(input["limit"], key=input.get("key"))
    return {"slot_id": slot.id}


def _replaced(error: SlotReplacedError) -> dict:
    return {
        "replaced": [error.limiter, error.replaced_by_run],
        "request": error.replaced_by,
        "is": SlotReplacedError.is_(error),
    }


@workflow(name="test_replace_or_wait")
def replace_or_wait(input: dict) -> dict:
    try:
        if input.get("many"):
            acquire_slots(["syncs", "voice-calls"], key=input.get("key"), on_full=input.get("on_full"))
        else:
            acquire_slot(input["limit"], key=input.get("key"), on_full=input.get("on_full"))
    except SlotReplacedError as error:
        return _replaced(error)
    return {"replaced": None}


def _ran() -> dict:
    calls.append("ran")
    return {"ran": True}


@workflow(name="test_with_limit_replaced")
def with_limit_replaced(input: dict) -> dict:
    try:
        return with_limit("syncs", lambda: _ran(), key="acme")
    except SlotReplacedError as error:
        return {"ran": False, **_replaced(error)}


@workflow(name="test_hold_slot_replaced")
def hold_slot_replaced(input: dict) -> dict:
    try:
        with hold_slot("voice-calls", key="acme", on_full="replace"):
            calls.append("held")
    except SlotReplacedError:
        return {"held": False}
    return {"held": True}


def test_the_newer_run_takes_the_place_and_the_older_raises(full) -> None:
    older = start_run(replace_or_wait, {"limit": "syncs", "key": "acme"})
    assert Run.objects.get(id=older.id).suspended
    other = start_run(replace_or_wait, {"limit": "syncs", "key": "globex"})
    newer = start_run(replace_or_wait, {"limit": "syncs", "key": "acme"})
    assert Run.objects.get(id=newer.id).suspended
    older = Run.objects.get(id=older.id)
    assert older.status == "completed"
    assert older.output["replaced"] == ["syncs", newer.id] and older.output["is"] is True
    assert older.output["request"].startswith(f"{newer.id}:")
    assert queue("syncs") == [newer.id, other.id]  # the older one's place, ahead of globex
    step = older.steps[-1]
    assert (step.kind, step.status, step.error) == ("hook", "failed", "replaced")
    entry = QueueEntry.objects.get(run_id=older.id)
    assert (entry.state, entry.replaced_by) == ("replaced", older.output["request"])
    assert_counters_match_rows("syncs")


def test_the_call_may_replace_on_a_limit_that_waits_and_wait_on_one_that_replaces(full) -> None:
    first = start_run(replace_or_wait, {"limit": "voice-calls", "key": "acme"})
    second = start_run(replace_or_wait, {"limit": "voice-calls", "key": "acme", "on_full": "replace"})
    assert Run.objects.get(id=first.id).output["replaced"] == ["voice-calls", second.id]
    third = start_run(replace_or_wait, {"limit": "syncs", "key": "acme"})
    fourth = start_run(replace_or_wait, {"limit": "syncs", "key": "acme", "on_full": "wait"})
    assert queue("syncs") == [third.id, fourth.id]


def test_a_group_replaces_only_the_runs_waiting_for_the_same_limits(full) -> None:
    alone = start_run(replace_or_wait, {"limit": "syncs", "key": "acme", "on_full": "wait"})
    both = start_run(replace_or_wait, {"many": True, "key": "acme"})
    newer = start_run(replace_or_wait, {"many": True, "key": "acme"})  # replace, the stricter of the two
    assert Run.objects.get(id=both.id).output["replaced"] == ["syncs", newer.id]
    assert Run.objects.get(id=alone.id).suspended
    assert queue("syncs") == [alone.id, newer.id] and queue("voice-calls") == [newer.id]


def test_with_limit_and_hold_slot_do_not_run_the_work_when_replaced(full) -> None:
    replaced = start_run(with_limit_replaced)
    start_run(replace_or_wait, {"limit": "syncs", "key": "acme"})
    assert Run.objects.get(id=replaced.id).output["ran"] is False
    held = start_run(hold_slot_replaced)
    start_run(replace_or_wait, {"limit": "voice-calls", "key": "acme", "on_full": "replace"})
    assert Run.objects.get(id=held.id).output == {"held": False}
    assert calls == []


def test_a_replay_raises_the_recorded_answer(full) -> None:
    older = start_run(replace_or_wait, {"limit": "syncs", "key": "acme"})
    newer = start_run(replace_or_wait, {"limit": "syncs", "key": "acme"})
    output = Run.objects.get(id=older.id).output
    QueueEntry.objects.filter(run_id=older.id).delete()  # the engine has nothing left to say
    Run.objects.filter(id=older.id).update(status="running", output=None)
    advance(older.id)
    assert Run.objects.get(id=older.id).output == output
    assert output["replaced"] == ["syncs", newer.id]


def test_the_error_pickles_and_is_recognised_from_another_copy() -> None:
    error = pickle.loads(pickle.dumps(SlotReplacedError("syncs", "run-2:1", "run-2")))
    assert (error.limiter, error.replaced_by, error.replaced_by_run) == ("syncs", "run-2:1", "run-2")
    assert str(error) == "the wait for 'syncs' was replaced by run 'run-2'"

    class CopyOfIt(Exception):
        stackbone_error = "SlotReplacedError"

    assert SlotReplacedError.is_(CopyOfIt()) and not SlotReplacedError.is_(ValueError())


def test_a_start_under_a_limit_that_replaces_replaces_the_key_s_queued_start(full) -> None:
    """A run's own start ('<run>:start') follows its limits' on_full too (SPEC 14.3): the newer
    start takes the place of the key's run queued to start, which ends 'replaced'."""
    first = start_run(replace_or_wait, {"limit": "voice-calls"}, limits=["syncs"], concurrency_key="acme")
    second = start_run(replace_or_wait, {"limit": "voice-calls"}, limits=["syncs"], concurrency_key="acme")
    assert Run.objects.get(id=second.id).status == "queued"
    replaced = Run.objects.get(id=first.id)
    assert (replaced.status, replaced.caused_by, replaced.end_limit) == ("replaced", second.id, "syncs")
    assert queue("syncs") == [second.id]
