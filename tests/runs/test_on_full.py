"""SPEC 14.2 and 14.5 through the run layer: a workflow body's acquire_slot, acquire_slots,
with_limit and hold_slot answered at once raise SlotUnavailableError (recognised by `.is_`, with
the limit and the 6.5 reason), leave nothing in any queue, and a replay raises it again from the
recorded step, never asking the engine anew. A run's start under named limits that skip, or
whose queue is at its cap, ends 'skipped' (tests/runs/test_start_on_full.py: a workflow's own
bound)."""

from __future__ import annotations

import pickle

import pytest

from limits.models import QueueEntry, Slot
from limits.runs import start_run, workflow
from limits.workflow import SlotUnavailableError, acquire_slot, acquire_slots, hold_slot, with_limit
from stackbone.models import Run
from stackbone.runs.runtime import advance
from tests.factories import assert_counters_match_rows, declare, queue

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []


@pytest.fixture
def full(clock):
    declare(
        voice_calls={"capacity": 1, "max_hold": "1h"},
        exports={"capacity": 1, "max_hold": "1h", "on_full": "skip"},
        capped={"capacity": 1, "max_hold": "1h", "max_waiting": 1},
    )
    start_run(hold_forever, {"limit": "voice-calls"})
    start_run(hold_forever, {"limit": "exports"})
    start_run(hold_forever, {"limit": "capped"})
    calls.clear()


@workflow(name="test_hold_forever")
def hold_forever(input: dict) -> dict:
    slot = acquire_slot(input["limit"])
    return {"slot_id": slot.id}


@workflow(name="test_skip_or_wait")
def skip_or_wait(input: dict) -> dict:
    try:
        if input.get("many"):
            acquire_slots(["voice-calls", "exports"], on_full=input.get("on_full"))
        else:
            acquire_slot(input["limit"], on_full=input.get("on_full"))
    except SlotUnavailableError as error:
        return {"skipped": [error.limiter, error.reason, error.outcome], "is": SlotUnavailableError.is_(error)}
    return {"skipped": None}


def _ran() -> dict:
    calls.append("ran")
    return {"ran": True}


@workflow(name="test_with_limit_skips")
def with_limit_skips(input: dict) -> dict:
    try:
        return with_limit(input["limit"], lambda: _ran(), on_full="skip")
    except SlotUnavailableError as error:
        return {"ran": False, "reason": error.reason}


@workflow(name="test_hold_slot_skips")
def hold_slot_skips(input: dict) -> dict:
    try:
        with hold_slot("voice-calls", on_full="skip"):
            calls.append("held")
    except SlotUnavailableError:
        return {"held": False}
    return {"held": True}


def test_acquire_slot_with_skip_raises_at_once_and_queues_nothing(full) -> None:
    run = start_run(skip_or_wait, {"limit": "voice-calls", "on_full": "skip"})
    run.refresh_from_db()
    assert run.status == "completed"
    assert run.output == {"skipped": ["voice-calls", "limit_full", "skipped"], "is": True}
    assert not QueueEntry.objects.filter(run_id=run.id).exists()
    assert not Slot.objects.filter(run_id=run.id).exists()
    step = run.steps[-1]
    assert (step.kind, step.status, step.error) == ("hook", "failed", "skipped")


def test_a_limit_that_skips_raises_for_every_acquisition_and_the_call_may_wait(full) -> None:
    skipped = start_run(skip_or_wait, {"limit": "exports"})
    assert Run.objects.get(id=skipped.id).output["skipped"] == ["exports", "limit_full", "skipped"]
    waiting = start_run(skip_or_wait, {"limit": "exports", "on_full": "wait"})
    assert Run.objects.get(id=waiting.id).suspended
    assert queue("exports") == [waiting.id]


def test_a_group_is_answered_by_the_strictest_on_full(full) -> None:
    run = start_run(skip_or_wait, {"many": True})
    assert Run.objects.get(id=run.id).output["skipped"][0] in ("voice-calls", "exports")
    assert queue("voice-calls") == [] and queue("exports") == []


def test_a_full_queue_refuses_with_its_reason(full) -> None:
    first = start_run(skip_or_wait, {"limit": "capped"})
    assert Run.objects.get(id=first.id).suspended  # one place in the queue
    second = start_run(skip_or_wait, {"limit": "capped"})
    assert Run.objects.get(id=second.id).output["skipped"] == ["capped", "queue_full", "refused"]
    assert queue("capped") == [first.id]
    assert_counters_match_rows("capped")


def test_with_limit_and_hold_slot_do_not_run_the_work_when_skipped(full) -> None:
    assert Run.objects.get(id=start_run(with_limit_skips, {"limit": "voice-calls"}).id).output == {
        "ran": False,
        "reason": "limit_full",
    }
    assert Run.objects.get(id=start_run(hold_slot_skips).id).output == {"held": False}
    assert calls == []


def test_a_replay_raises_the_recorded_answer_even_once_a_slot_is_free(full) -> None:
    run = start_run(skip_or_wait, {"limit": "voice-calls", "on_full": "skip"})
    Slot.objects.filter(limit__name="voice-calls").update(state="released")  # room, as far as rows go
    Run.objects.filter(id=run.id).update(status="running", output=None)
    advance(run.id)
    assert Run.objects.get(id=run.id).output["skipped"] == ["voice-calls", "limit_full", "skipped"]


def test_the_error_pickles_and_is_recognised_from_another_copy() -> None:
    error = pickle.loads(pickle.dumps(SlotUnavailableError("exports", "queue_full", "refused")))
    assert (error.limiter, error.reason, error.outcome) == ("exports", "queue_full", "refused")
    assert str(error) == "no slot of 'exports' at once (refused): the queue is full"

    class CopyOfIt(Exception):
        stackbone_error = "SlotUnavailableError"

    assert SlotUnavailableError.is_(CopyOfIt()) and not SlotUnavailableError.is_(ValueError())


def test_a_start_under_named_limits_that_skip_or_are_capped_ends_skipped(full) -> None:
    """SPEC 14.2, 14.5, 14.7 for a start: its named limits' strictest on_full decides (a run
    whose named limit skips ends 'skipped'); the start's own on_full="wait" overrides that, but a
    queue's cap still refuses it. Either way: never started, in no queue, its cause kept."""
    skipped = start_run(skip_or_wait, {"limit": "voice-calls"}, limits=["exports"])
    assert (skipped.status, skipped.end_reason, skipped.end_limit) == ("skipped", "limit_full", "exports")
    assert skipped.started_at is None and skipped.finished_at is not None and skipped.is_finished
    first = start_run(skip_or_wait, {"limit": "voice-calls"}, limits=["exports", "capped"], on_full="wait")
    second = start_run(skip_or_wait, {"limit": "voice-calls"}, limits=["exports", "capped"], on_full="wait")
    assert Run.objects.get(id=first.id).status == "queued"
    assert (second.status, second.end_reason, second.end_limit) == ("skipped", "queue_full", "capped")
    assert queue("exports") == queue("capped") == [first.id]
    assert not Slot.objects.filter(run_id__in=[skipped.id, second.id]).exists()
    assert not QueueEntry.objects.filter(run_id__in=[skipped.id, second.id]).exists()
    for name in ("exports", "capped"):
        assert_counters_match_rows(name)


def test_the_example_refresh_report_skips_while_both_report_exports_slots_are_held(clock) -> None:
    """The demo's SPEC 14.2 case (studio/demo/__main__.py): refresh_report keeps its slot after
    the run; a third while two are held ends at once, skipped, queued nowhere."""
    declare(report_exports={"capacity": 2, "max_hold": "5m"})
    held = [start_run("refresh_report", {"report_id": f"r{n}"}) for n in (1, 2)]
    third = start_run("refresh_report", {"report_id": "r3"})
    assert [Run.objects.get(id=run.id).output["slot_id"] is not None for run in held] == [True, True]
    assert Run.objects.get(id=third.id).output == {"report_id": "r3", "slot_id": None, "skipped": "limit_full"}
    assert queue("report-exports") == []
