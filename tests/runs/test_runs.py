"""SPEC sections 2 and 3 end to end through the run layer (tasks run eagerly, after commit)."""

from __future__ import annotations

import pickle

import pytest

from limits import services
from limits.models import QueueEntry, Slot
from limits.workflow import (
    SlotReplacedError,
    SlotTimeoutError,
    SlotUnavailableError,
    acquire_slot,
    hold_slot,
    release_slot,
    with_limit,
)
from stackbone.models import Run
from stackbone.runs.runtime import WorkflowError, advance, recover
from studio.workflows import StepError, cancel_run, start_run, step, workflow
from studio.workflows.calls import call_ended, place_call
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = "Esperando hueco · voice-calls"


@pytest.fixture
def one_line(clock):
    declare(
        voice_calls={"capacity": 1, "max_hold": "1h"},
        report_exports={"capacity": 1, "max_hold": "1h"},
        partner_api={"capacity": 1, "max_hold": "1h"},
    )


def steps(run: Run) -> list[tuple[str, str, str]]:
    run.refresh_from_db()
    return [(s.name, s.kind, s.status) for s in run.steps]


def fresh(run: Run) -> Run:
    run.refresh_from_db()
    return run


@step
def take_slot_in_a_step() -> None:
    acquire_slot("voice-calls")


@workflow(name="test_acquire_in_step")
def acquire_in_step(input: dict) -> dict:
    try:
        take_slot_in_a_step()
    except StepError as error:
        return {"error": error.error}
    return {"error": None}


@step
def free_it(slot_id: str) -> dict:
    return release_slot(slot_id)


@workflow(name="test_release_in_step")
def release_in_step(input: dict) -> dict:
    return free_it(input["slot_id"])


@workflow(name="test_with_limit_raises")
def with_limit_raises(input: dict) -> dict:
    def boom() -> None:
        raise ValueError("the export broke")

    try:
        with_limit("report-exports", boom)
    except ValueError as error:
        return {"reraised": str(error)}
    return {"reraised": None}


@workflow(name="test_hold_slot")
def hold_and_return(input: dict) -> dict:
    with hold_slot("report-exports", label="ctx") as slot:
        return {"slot_id": slot.id, "limiter": slot.limiter}


@workflow(name="test_acquire_and_fail")
def acquire_and_fail(input: dict) -> dict:
    acquire_slot("voice-calls", label=input.get("label"))
    raise RuntimeError("the work failed after taking a slot")


def test_a_free_slot_is_taken_at_once_and_the_run_completes(one_line) -> None:
    run = start_run(place_call, {"call_id": "c1"})
    assert run.status == "completed"
    assert run.output["slot_id"].startswith("slot_")
    assert steps(run) == [(HOOK, "hook", "completed"), ("dial_out", "step", "completed")]
    assert Slot.objects.get(id=run.output["slot_id"]).label == "c1"


def test_runs_start_by_registered_name_too(one_line) -> None:
    assert start_run("place_call", {"call_id": "c1"}).status == "completed"


def test_a_full_limit_suspends_the_run_with_the_hook_step_until_another_workflow_releases(one_line) -> None:
    first = start_run(place_call, {"call_id": "c1"})
    second = start_run(place_call, {"call_id": "c2"})
    assert (second.status, second.suspended) == ("running", True)
    assert steps(second) == [(HOOK, "hook", "waiting")]
    assert queue("voice-calls") == [second.id]
    ended = start_run(call_ended, {"slot_id": first.output["slot_id"]})
    assert ended.output == {"released": True}
    second = fresh(second)
    assert second.status == "completed"
    assert steps(second) == [(HOOK, "hook", "completed"), ("dial_out", "step", "completed")]
    assert holders("voice-calls") == [(second.id, "busy")]
    assert_counters_match_rows("voice-calls")


def test_release_slot_is_idempotent_through_runs(one_line) -> None:
    first = start_run(place_call, {"call_id": "c1"})
    assert start_run(call_ended, {"slot_id": first.output["slot_id"]}).output == {"released": True}
    assert start_run(call_ended, {"slot_id": first.output["slot_id"]}).output == {"released": False}
    assert start_run(call_ended, {"slot_id": "slot_nope"}).output == {"released": False}


def test_release_slot_works_inside_a_step(one_line) -> None:
    first = start_run(place_call, {"call_id": "c1"})
    assert start_run(release_in_step, {"slot_id": first.output["slot_id"]}).output == {"released": True}


def test_acquire_slot_inside_a_step_is_a_clear_error(one_line) -> None:
    run = start_run(acquire_in_step)
    assert "cannot be called inside a step" in run.output["error"]
    assert Slot.objects.count() == 0


def test_acquire_slot_outside_a_run_is_a_clear_error(one_line) -> None:
    with pytest.raises(WorkflowError, match="must be called in a workflow body"):
        acquire_slot("voice-calls")


def test_a_wait_that_times_out_raises_slot_timeout_error_with_limiter_and_timeout(one_line, clock) -> None:
    start_run("sync_partner", {"label": "holder", "timeout": "30s"})  # completes and frees its slot
    holder = start_run(place_call, {"call_id": "c1"})
    late = start_run(place_call, {"call_id": "c2", "timeout": "30s"})
    assert fresh(late).suspended
    clock.advance(seconds=31)
    services.sweep()
    late = fresh(late)
    assert (late.status, late.output) == ("completed", {"slot_id": None})
    assert steps(late) == [(HOOK, "hook", "failed")]
    assert queue("voice-calls") == []
    assert holders("voice-calls") == [(holder.id, "busy")]


def test_slot_timeout_error_carries_its_fields_and_is_recognised() -> None:
    error = SlotTimeoutError("voice-calls", 30_000)
    assert (error.limiter, error.timeout) == ("voice-calls", 30_000)
    assert SlotTimeoutError.is_(error)
    assert not SlotTimeoutError.is_(ValueError("x"))

    class CopyOfIt(Exception):  # the same class from another copy of the module
        stackbone_error = "SlotTimeoutError"

    assert SlotTimeoutError.is_(CopyOfIt())
    copied = pickle.loads(pickle.dumps(error))  # Celery carries it
    assert (type(copied), copied.limiter, copied.timeout, str(copied)) == (
        SlotTimeoutError,
        "voice-calls",
        30_000,
        "no slot of 'voice-calls' within 30000 ms",
    )
    # the slot errors share their base (limits.workflow), not their names
    assert not SlotUnavailableError.is_(error) and not SlotReplacedError.is_(error)
    assert SlotUnavailableError.is_(SlotUnavailableError("voice-calls", "limit_full"))


def test_the_timeout_example_reports_limiter_and_timeout(one_line, clock) -> None:
    holder = start_run(place_call, {"call_id": "c1"})
    declare(
        voice_calls={"capacity": 1, "max_hold": "1h"},
        partner_api={"capacity": 1, "max_hold": "1h"},
        report_exports={"capacity": 1, "max_hold": "1h"},
    )
    slot = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run("sync_partner", {"timeout": "10s"})
    clock.advance(seconds=11)
    services.sweep()
    assert fresh(waiting).output == {"timed_out": True, "limiter": "partner-api", "timeout_ms": 10_000}
    assert holder and slot


def test_with_limit_releases_when_fn_returns(one_line) -> None:
    run = start_run("export_report", {"report_id": "r1"})
    assert run.output == {"report_id": "r1", "rows": 1000}
    assert holders("report-exports") == []
    assert [s.name for s in run.steps] == ["Esperando hueco · report-exports", "build_report", "release_slot"]


def test_with_limit_releases_and_reraises_when_fn_raises(one_line) -> None:
    run = start_run(with_limit_raises)
    assert run.output == {"reraised": "the export broke"}
    assert holders("report-exports") == []


def test_hold_slot_is_with_limit_as_a_context_manager(one_line) -> None:
    run = start_run(hold_and_return)
    assert run.output["limiter"] == "report-exports"  # 2.1: the handle has id and limiter
    assert Slot.objects.get(id=run.output["slot_id"]).state == "released"


def test_with_limit_waits_in_the_queue_and_keeps_its_slot_across_the_suspension(one_line) -> None:
    blocker = services.acquire("report-exports", run_id="blocker").slot_id
    run = start_run("export_report", {"report_id": "r2"})
    assert fresh(run).suspended
    services.release(blocker)
    run = fresh(run)
    assert run.status == "completed"
    assert holders("report-exports") == []


def test_a_run_that_ends_keeps_its_busy_slot(one_line) -> None:
    """2.7: completing or failing does not release a held slot."""
    run = start_run(acquire_and_fail, {"label": "x"})
    assert run.status == "failed"
    assert "the work failed" in run.error
    assert holders("voice-calls") == [(run.id, "busy")]


def test_cancelling_a_waiting_run_takes_it_out_of_the_queue(one_line) -> None:
    start_run(place_call, {"call_id": "c1"})
    waiting = start_run(place_call, {"call_id": "c2"})
    after = start_run(place_call, {"call_id": "c3"})
    assert cancel_run(waiting.id) is True
    assert fresh(waiting).status == "cancelled"
    assert steps(waiting) == [(HOOK, "hook", "failed")]
    assert queue("voice-calls") == [after.id]
    assert cancel_run(waiting.id) is False
    assert_counters_match_rows("voice-calls")


def test_a_failing_waiting_run_leaves_the_queue(one_line, no_worker) -> None:
    """3.4: a waiting run that fails leaves the queue (here its workflow was unregistered)."""
    services.acquire("voice-calls", run_id="holder")
    run = start_run(place_call, {"call_id": "c1"})
    assert advance(run.id) == "suspended"
    Run.objects.filter(id=run.id).update(workflow="no_longer_exists", suspended=False)
    assert advance(run.id) == "failed"
    assert queue("voice-calls") == []
    assert QueueEntry.objects.get(run_id=run.id).state == "cancelled"


def test_a_picked_run_cancelled_before_confirming_frees_the_slot_for_the_next(one_line, no_worker) -> None:
    """3.7 end to end: the box reserved a slot for a run that no worker advanced yet."""
    holder = services.acquire("voice-calls", run_id="holder").slot_id
    picked = start_run(place_call, {"call_id": "c1"})
    advance(picked.id)
    nxt = start_run(place_call, {"call_id": "c2"})
    advance(nxt.id)
    services.release(holder)
    assert holders("voice-calls") == [(picked.id, "reserved")]
    cancel_run(picked.id)
    assert holders("voice-calls") == [(nxt.id, "reserved")]
    assert advance(nxt.id) == "completed"
    assert holders("voice-calls") == [(nxt.id, "busy")]


def test_a_reservation_nobody_confirms_lapses_and_the_late_run_requeues_within_its_timeout(
    one_line, no_worker, clock
) -> None:
    """3.6 end to end: every worker is down while a run is reserved; past 2 minutes the sweep
    gives the slot to the next run, and the late run waits at the end with its deadline."""
    holder = services.acquire("voice-calls", run_id="holder").slot_id
    late = start_run(place_call, {"call_id": "late", "timeout": "1h"})
    advance(late.id)
    nxt = start_run(place_call, {"call_id": "next"})
    advance(nxt.id)
    deadline = fresh(late).wait_deadline
    services.release(holder)
    clock.advance(minutes=2, seconds=1)
    services.sweep()
    assert holders("voice-calls") == [(nxt.id, "reserved")]
    assert queue("voice-calls") == [late.id]
    assert advance(late.id) == "suspended"  # the late run wakes, finds itself queued again
    assert fresh(late).wait_deadline == deadline
    assert advance(nxt.id) == "completed"
    assert advance(start_run(call_ended, {"slot_id": fresh(nxt).output["slot_id"]}).id) == "completed"
    assert advance(late.id) == "completed"
    assert fresh(late).output["slot_id"]


def test_a_duplicate_wake_never_runs_a_step_twice(one_line, no_worker) -> None:
    run = start_run(place_call, {"call_id": "c1"})
    assert advance(run.id) == "completed"
    assert advance(run.id) == "skipped"
    assert [s.name for s in fresh(run).steps] == [HOOK, "dial_out"]


def test_a_run_leased_by_another_worker_is_skipped(one_line, no_worker, clock) -> None:
    run = start_run(place_call, {"call_id": "c1"})
    Run.objects.filter(id=run.id).update(
        lease_owner="other", lease_until=clock.now() + __import__("datetime").timedelta(minutes=1)
    )
    assert advance(run.id) == "skipped"


def test_recovery_dispatches_runs_that_lost_their_task(one_line, no_worker, clock) -> None:
    run = start_run(place_call, {"call_id": "c1"})  # its task went to a broker nobody reads
    assert recover() == 0  # dispatched just now: give the task time
    clock.advance(seconds=31)
    from tests.conftest import use_broker

    use_broker("memory://", eager=True)
    assert recover() == 1
    assert fresh(run).status == "completed"


def test_recovery_wakes_a_reserved_run_whose_wake_was_lost(one_line, no_worker, clock) -> None:
    holder = services.acquire("voice-calls", run_id="holder").slot_id
    run = start_run(place_call, {"call_id": "c1"})
    advance(run.id)
    Run.objects.filter(id=run.id).update(dispatched_at=clock.now())
    from limits.apps import _wake_runs
    from limits.signals import runs_woken

    runs_woken.disconnect(_wake_runs, dispatch_uid="limits-wake-runs")
    try:
        services.release(holder)  # the wake is lost
    finally:
        runs_woken.connect(_wake_runs, dispatch_uid="limits-wake-runs")
    assert fresh(run).suspended
    clock.advance(seconds=6)
    from tests.conftest import use_broker

    use_broker("memory://", eager=True)
    assert recover() == 1
    assert fresh(run).status == "completed"


def test_a_cancel_during_a_step_stops_the_run(one_line, no_worker) -> None:
    run = start_run(place_call, {"call_id": "c1"})
    cancel_run(run.id)
    assert advance(run.id) == "skipped"
    assert fresh(run).status == "cancelled"


def test_a_mass_wake_resumes_every_run_through_chunked_tasks(one_line, no_worker) -> None:
    """A capacity raise that grants more runs than one dispatch chunk still resumes every one."""
    from stackbone.runs import runtime
    from tests.conftest import use_broker

    holder = services.acquire("voice-calls", run_id="holder").slot_id
    runs = [start_run(place_call, {"call_id": f"c{i}"}) for i in range(runtime.DISPATCH_CHUNK + 5)]
    for run in runs:
        assert advance(run.id) == "suspended"
    use_broker("memory://", eager=True)
    services.set_capacity("voice-calls", len(runs) + 1)
    assert {fresh(run).status for run in runs} == {"completed"}
    assert holder


def test_a_mass_wake_goes_out_in_few_messages_that_cover_every_run(no_worker) -> None:
    """100,000 granted runs are 200 messages, not 2,000: publishing must not dominate a sweep's
    wake. Read back from the broker: every run once, in order, in at most DISPATCH_TASKS tasks."""
    from stackbone.runs import runtime
    from studio.celery import app

    def drain() -> list[list[str]]:
        """The run ids of every task waiting in the in-process broker, consumed."""
        taken = []
        with app.connection_for_read() as connection:
            queue = connection.SimpleQueue(app.conf.task_default_queue)
            while queue.qsize():
                message = queue.get(timeout=1)
                taken.append(message.payload[0][0])  # the task's positional args: (run_ids,)
                message.ack()
            queue.close()
        return taken

    drain()  # what earlier tests left in the shared in-process broker
    run_ids = [f"run-{n}" for n in range(20_000)]
    runtime._dispatch(run_ids)
    sent = drain()
    assert len(sent) == runtime.DISPATCH_TASKS
    assert [run_id for chunk in sent for run_id in chunk] == run_ids
    assert min(len(chunk) for chunk in sent) >= runtime.DISPATCH_CHUNK


OUTAGE = {"left": 0}


@workflow(name="test_database_outage")
def meets_a_database_outage(input: dict) -> dict:
    from django.db import OperationalError

    if OUTAGE["left"]:
        OUTAGE["left"] -= 1
        raise OperationalError("terminating connection due to administrator command")
    return {"done": True}


def test_a_database_outage_during_an_advance_does_not_fail_the_run(one_line, no_worker) -> None:
    """Found by the chaos run: a PostgreSQL restart under a running body failed the run. The
    advance must leave the run as it was (lease given back) for the retry or recovery."""
    from django.db import OperationalError

    run = start_run(meets_a_database_outage)
    OUTAGE["left"] = 1
    with pytest.raises(OperationalError):
        advance(run.id)
    run = fresh(run)
    assert (run.status, run.lease_owner, run.error) == ("running", "", "")
    assert advance(run.id) == "completed"
    assert fresh(run).output == {"done": True}
