"""The statements one run of the shipped `sync_partner` sends (issue 17: every statement of the
run layer is paid per run). A first advance has no recorded steps to read; an advance after a
suspension reads them (a replay that did not would run its steps again)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from limits import services
from stackbone.runs import statements
from stackbone.runs.models import Run, Step
from stackbone.runs.runtime import LEASE, UNFINISHED, WAITING_STATUSES, advance
from studio.workflows import start_run
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def partner(clock, no_worker):
    declare(partner_api={"capacity": 1, "max_hold": "1h"})


def sent_by_advance(run_id: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        advance(run_id)
    return [query["sql"] for query in captured.captured_queries]


def reads_steps(sql: list[str]) -> bool:
    return any(q.startswith("SELECT") and 'FROM "studio_step"' in q and "EXISTS" not in q for q in sql)


def test_a_first_advance_reads_no_steps_and_sends_a_known_number_of_statements(partner) -> None:
    run = start_run("sync_partner", {})
    sql = sent_by_advance(run.id)
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED
    assert not reads_steps(sql), sql
    if connection.vendor == "postgresql":  # SQLite runs the engine's rules in Python
        # The lease's compare-and-set; the run, with whether it has steps; three recordings
        # (BEGIN, the lease's UPDATE, the engine's one call for the two hooks, the step's INSERT,
        # COMMIT); the finish (BEGIN, UPDATE, the limits the run ends in, COMMIT). Every run pays
        # each statement here: change the figure on purpose.
        assert len(sql) == 20, sql


def test_an_advance_after_a_suspension_reads_the_recorded_steps(partner) -> None:
    holder = services.acquire("partner-api", run_id="holder")
    run = start_run("sync_partner", {})
    advance(run.id)
    assert Run.objects.get(id=run.id).suspended  # waits for the slot
    services.release(holder.slot_id)  # reserves it for the run and wakes it
    sql = sent_by_advance(run.id)
    assert reads_steps(sql), sql
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED
    assert [s.name for s in Run.objects.get(id=run.id).steps] == [
        "Esperando hueco · partner-api",
        "call_partner",
        "release_slot",
    ]


# --- stackbone.runs.statements, row for row against the ORM calls they stand for -------------------

RUN_FIELDS = [f.name for f in Run._meta.concrete_fields if f.name != "id"]
STEP_FIELDS = [f.attname for f in Step._meta.concrete_fields if f.name != "id"]


def twins(**fields: object) -> tuple[str, str]:
    """Two runs alike in every field but their id."""
    now = timezone.now()
    base = {"workflow": "sync_partner", "created_at": now, "updated_at": now, **fields}
    return Run.objects.create(**base).id, Run.objects.create(**base).id


def same_rows(a: str, b: str) -> None:
    row_a, row_b = (Run.objects.filter(id=i).values(*RUN_FIELDS).get() for i in (a, b))
    assert row_a == row_b


def run_states() -> list[dict[str, object]]:
    now = timezone.now()
    states: list[dict[str, object]] = []
    for status in Run.Status.values:
        for suspended in (False, True):
            for lease_owner, lease_until in (("", None), ("w", now - dt.timedelta(seconds=1)), ("w", now + LEASE)):
                for started_at in (None, now - dt.timedelta(minutes=1)):
                    states.append(
                        {
                            "status": status,
                            "suspended": suspended,
                            "lease_owner": lease_owner,
                            "lease_until": lease_until,
                            "started_at": started_at,
                        }
                    )
    return states


def test_take_lease_does_what_the_orm_compare_and_set_does(clock) -> None:
    for state in run_states():
        raw, orm = twins(**state)
        now = timezone.now()
        taken = statements.take_lease(raw, "me", LEASE, now)
        updated = (
            Run.objects.filter(id=orm, status__in=UNFINISHED, suspended=False)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .update(
                lease_owner="me",
                lease_until=now + LEASE,
                updated_at=now,
                status=Case(When(status=Run.Status.PENDING, then=Value(Run.Status.RUNNING)), default=F("status")),
                started_at=Case(
                    When(status=Run.Status.QUEUED, then=F("started_at")),
                    default=Coalesce(F("started_at"), Value(now)),
                ),
            )
        )
        assert taken == (updated == 1), state
        same_rows(raw, orm)
        clock.advance(milliseconds=3)


def test_renew_own_lease_does_what_the_orm_update_does(clock) -> None:
    for state in run_states():
        for owner in ("w", "someone else"):
            raw, orm = twins(**state)
            now = timezone.now()
            renewed = statements.renew_own_lease(raw, owner, LEASE, now)
            updated = Run.objects.filter(id=orm, lease_owner=owner, status=Run.Status.RUNNING).update(
                lease_until=now + LEASE, updated_at=now
            )
            assert renewed == (updated == 1), (state, owner)
            same_rows(raw, orm)


OUTPUTS: list[object] = [None, {"ok": True, "n": [1, 2.5, "é"]}, ["a", None], "text", 7, False]


def test_finish_does_what_the_orm_update_does(clock) -> None:
    for state in run_states():
        for owner, output, status, error in (
            ("w", OUTPUTS[len(str(state)) % len(OUTPUTS)], Run.Status.COMPLETED, ""),
            ("w", None, Run.Status.FAILED, "ValueError: it broke"),
            ("someone else", {"x": 1}, Run.Status.COMPLETED, ""),
        ):
            raw, orm = twins(**state)
            now = timezone.now()
            done = statements.finish(raw, owner, status, output, error, now)
            updated = Run.objects.filter(id=orm, lease_owner=owner, status__in=WAITING_STATUSES).update(
                status=status,
                output=output,
                error=error,
                finished_at=now,
                updated_at=now,
                lease_owner="",
                lease_until=None,
            )
            assert done == (updated == 1), (state, owner)
            same_rows(raw, orm)
    for output in OUTPUTS:
        raw, orm = twins(status=Run.Status.RUNNING, lease_owner="w")
        now = timezone.now()
        assert statements.finish(raw, "w", Run.Status.COMPLETED, output, "", now)
        Run.objects.filter(id=orm).update(
            status=Run.Status.COMPLETED, output=output, finished_at=now, updated_at=now, lease_owner=""
        )
        same_rows(raw, orm)
        assert Run.objects.get(id=raw).output == output


def test_wake_does_what_the_orm_update_does(clock) -> None:
    """Every run state, woken in one call with an id that names no run and one given twice."""
    pairs = [twins(**state, waiting_for="hook:1", wait_deadline=timezone.now()) for state in run_states()]
    now = timezone.now()
    raw = [a for a, _ in pairs]
    woken = statements.wake([*raw, "run_nobody", raw[0]], now)
    updated = Run.objects.filter(id__in=[b for _, b in pairs], status__in=WAITING_STATUSES, suspended=True).update(
        suspended=False, waiting_for="", wait_deadline=None, dispatched_at=now
    )
    assert woken == updated > 0
    for a, b in pairs:
        same_rows(a, b)
    assert statements.wake([], now) == 0


def test_insert_step_writes_the_row_step_objects_create_writes(clock) -> None:
    raw_run, orm_run = twins(status=Run.Status.RUNNING)
    now = timezone.now()
    cases: list[dict[str, object]] = [
        {"kind": Step.Kind.HOOK, "status": Step.Status.WAITING, "result": {"deadline": now.isoformat()}},
        {"kind": Step.Kind.HOOK, "key": "acquire:a,b", "status": Step.Status.WAITING, "result": None},
        {"kind": Step.Kind.STEP, "status": Step.Status.COMPLETED, "result": None, "finished_at": now},
        {"status": Step.Status.COMPLETED, "result": {"released": True}, "finished_at": now},
        {"kind": Step.Kind.STEP, "status": Step.Status.FAILED, "error": "ValueError: x", "finished_at": now},
        *({"kind": Step.Kind.STEP, "status": Step.Status.COMPLETED, "result": r, "finished_at": now} for r in OUTPUTS),
    ]
    for seq, values in enumerate(cases, start=1):
        ran_for = dt.timedelta(seconds=seq)
        given = {k: v for k, v in values.items() if k != "finished_at"}
        step = statements.insert_step(raw_run, seq, f"step {seq}", given, now=now, ran_for=ran_for)
        Step.objects.create(run_id=orm_run, seq=seq, name=f"step {seq}", started_at=now - ran_for, **values)
        stored = Step.objects.get(id=step.id)
        assert not step._state.adding
        assert {f: getattr(step, f) for f in STEP_FIELDS} == {f: getattr(stored, f) for f in STEP_FIELDS}
    rows = [
        [{k: v for k, v in row.items() if k != "run_id"} for row in Step.objects.filter(run_id=i).values(*STEP_FIELDS)]
        for i in (raw_run, orm_run)
    ]
    assert rows[0] == rows[1]
