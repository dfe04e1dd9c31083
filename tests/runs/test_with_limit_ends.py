"""SPEC 2.5: the slot `with_limit` takes guards its work inside this run. It is given back when
the work ends (fn returned or raised an error of its own) or the run ends while inside it; never
while the work may still run or be replayed (an interruption: the connection went away).

tests/runs/test_connection_cut.py shows the same with a real worker and a killed connection."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from limits import services
from limits.models import Slot
from limits.verify import verify
from limits.workflow import acquire_slot, hold_slot
from stackbone.models import Run
from stackbone.runs import runtime
from stackbone.runs.runtime import advance
from studio.workflows import cancel_run, start_run, step, workflow
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

EXECUTED: list[str] = []
CUT = {"left": 0}


@pytest.fixture
def two_limits(clock):
    declare(
        report_exports={"capacity": 1, "max_hold": "1h"},
        partner_api={"capacity": 1, "max_hold": "1h"},
    )
    EXECUTED.clear()


@step
def export(slot_id: str) -> dict:
    EXECUTED.append(slot_id)
    return {"slot": slot_id}


@workflow(name="test_export_then_cut")
def export_then_cut(input: dict) -> dict:
    with hold_slot("report-exports") as slot:
        return export(slot.id)


@workflow(name="test_with_limit_around_a_wait")
def with_limit_around_a_wait(input: dict) -> dict:
    with hold_slot("report-exports") as slot:
        inner = acquire_slot("partner-api")
        return {"outer": slot.id, "inner": inner.id}


def cut_the_recording_of(name: str):
    """The recording of step `name` meets a dead connection once: what a killed connection does
    under a running step (the real thing: tests/runs/test_connection_cut.py)."""
    real = runtime.record_step

    def record_step(ctx, seq, step_name, **values):
        if step_name == name and CUT["left"]:
            CUT["left"] -= 1
            raise OperationalError("terminating connection due to administrator command")
        return real(ctx, seq, step_name, **values)

    return record_step


def test_an_interruption_inside_with_limit_keeps_the_slot_and_the_replay_runs_the_work_inside_it(
    two_limits, no_worker, monkeypatch
) -> None:
    run = start_run(export_then_cut)
    waiting = start_run("export_report", {"report_id": "next"})
    CUT["left"] = 1
    monkeypatch.setattr(runtime, "record_step", cut_the_recording_of("export"))
    with pytest.raises(OperationalError):
        advance(run.id)
    (slot,) = Slot.objects.filter(run_id=run.id)
    assert (slot.state, EXECUTED) == ("busy", [slot.id]), "the interrupted work still holds its slot"
    assert advance(waiting.id) == "suspended"
    assert queue("report-exports") == [waiting.id]

    assert advance(run.id) == "completed"
    assert [slot.id, slot.id] == EXECUTED, "the replay ran the unrecorded step again, with the same slot"
    slot.refresh_from_db()
    assert slot.state == "released"
    assert holders("report-exports") == [(waiting.id, "reserved")]
    assert_counters_match_rows("report-exports")


def test_an_interruption_while_releasing_keeps_the_slot_until_the_replay_releases_it(
    two_limits, no_worker, monkeypatch
) -> None:
    """The release is an atomic step: a cut connection rolls it back with its record; it is not
    recorded as a failed step (that would fail the run), and the replay releases."""
    run = start_run(export_then_cut)
    CUT["left"] = 1
    monkeypatch.setattr(runtime, "record_step", cut_the_recording_of("release_slot"))
    with pytest.raises(OperationalError):
        advance(run.id)
    assert holders("report-exports") == [(run.id, "busy")]
    assert [s.name for s in Run.objects.get(id=run.id).steps] == ["Esperando hueco · report-exports", "export"]
    assert advance(run.id) == "completed"
    assert holders("report-exports") == []


def test_cancelling_a_run_suspended_inside_with_limit_frees_its_slot_for_the_next_run(two_limits) -> None:
    blocker = services.acquire("partner-api", run_id="blocker").slot_id
    run = start_run(with_limit_around_a_wait)
    assert Run.objects.get(id=run.id).suspended
    assert holders("report-exports") == [(run.id, "busy")]
    nxt = start_run("export_report", {"report_id": "next"})
    assert Run.objects.get(id=nxt.id).suspended

    assert cancel_run(run.id) is True
    assert queue("partner-api") == []
    assert Run.objects.get(id=nxt.id).status == "completed", "the freed slot went to the next run"
    assert Slot.objects.get(run_id=run.id, limit__name="report-exports").state == "run_ended"
    assert holders("partner-api") == [("blocker", "busy")]
    assert blocker
    assert verify().ok, verify().violations
    assert_counters_match_rows("report-exports")


def test_a_run_failing_inside_with_limit_frees_its_slot_and_an_acquire_slot_slot_stays(two_limits, no_worker) -> None:
    """2.5 against 2.7: a run that ends frees the with_limit slot, not a slot from acquire_slot."""
    services.acquire("partner-api", run_id="blocker")
    run = start_run(with_limit_around_a_wait)
    assert advance(run.id) == "suspended"
    Run.objects.filter(id=run.id).update(workflow="no_longer_exists", suspended=False)
    assert advance(run.id) == "failed"
    assert holders("report-exports") == []
    assert holders("partner-api") == [("blocker", "busy")]


def test_verify_reports_a_with_limit_slot_left_busy_after_its_run_ended(two_limits) -> None:
    run = start_run(with_limit_around_a_wait)  # holds report-exports, then takes partner-api
    assert Run.objects.get(id=run.id).status == "completed"
    assert verify().ok
    Slot.objects.filter(run_id=run.id, limit__name="report-exports").update(state="busy", freed_at=None)
    found = verify(["report-exports"]).violations
    assert any("still busy for with_limit" in violation and run.id in violation for violation in found), found
