"""The production path keeps the database's time (issue 25): a host whose clock is ten minutes
off, behind or ahead, stamps nothing with it.

Must never happen: a grant, an expiry, a reservation, a wait's deadline, a run's lease or a step's
times written from a host's own clock; the sweep or recovery judging "due" by it. The pytest
process normally takes its time from the process (STACKBONE_CLOCK = "process", so time_machine
moves it); these tests put it back on "database" and move the process's clock instead, which is
what a skewed host is. PostgreSQL only: on SQLite the database's clock is the one host's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
import time_machine
from django.db import connection
from django.test import override_settings

from limits import services
from limits.models import QueueEntry, Slot
from limits.verify import verify
from stackbone.plumbing import clock
from stackbone.plumbing.models import ClockSkew
from stackbone.runs import runtime
from stackbone.runs.models import Run, Step
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = [requires_postgres, pytest.mark.django_db]

SKEW = dt.timedelta(minutes=10)
CLOSE = dt.timedelta(seconds=5)  # a statement's time against a reading just before or after


def database_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        value: dt.datetime = cursor.fetchone()[0]
    return value


def near(moment: dt.datetime | None, expected: dt.datetime) -> bool:
    return moment is not None and abs(moment - expected) < CLOSE


@pytest.fixture(params=[-1, 1], ids=["host-behind", "host-ahead"])
def skewed(request: pytest.FixtureRequest) -> Iterator[int]:
    """The production clock setting, on a host ten minutes behind or ahead of the database."""
    sign: int = request.param
    with (
        override_settings(STACKBONE_CLOCK=clock.DATABASE),
        time_machine.travel(dt.datetime.now(dt.UTC) + sign * SKEW, tick=True),
    ):
        assert abs(dt.datetime.now(dt.UTC) - database_now()) > SKEW - CLOSE  # the host is off
        yield sign


def test_the_clock_reads_the_database_on_postgresql_and_the_process_in_tests(skewed) -> None:
    assert clock.mode() == clock.DATABASE and clock.param() is None
    assert near(clock.now(), database_now())
    with override_settings(STACKBONE_CLOCK=clock.PROCESS):
        assert clock.mode() == clock.PROCESS
        assert near(clock.now(), dt.datetime.now(dt.UTC))


def test_grants_expiries_and_deadlines_are_the_databases_on_every_engine_path(skewed) -> None:
    declare(calls={"capacity": 1, "max_hold": "45s"}, tenants={"capacity": 2, "max_hold": "45s", "per_key": 1})
    held = services.acquire("calls", run_id="r1")  # the database function's path
    queued = services.acquire("calls", run_id="r2", timeout="60s")
    keyed = services.acquire_group(["tenants"], run_id="r3", key="acme")  # the Python rules' path
    now = database_now()
    slot = Slot.objects.get(id=held.slot_id)
    assert near(slot.granted_at, now) and slot.expires_at == slot.granted_at + dt.timedelta(seconds=45)
    entry = QueueEntry.objects.get(request=queued.request)
    assert near(entry.enqueued_at, now) and entry.deadline == entry.enqueued_at + dt.timedelta(seconds=60)
    assert near(Slot.objects.get(id=keyed.slot_id).granted_at, now)

    # The sweep on this host judges expiry and deadlines by the database's clock: 10 minutes
    # ahead it takes nothing back, 10 minutes behind it still takes back what is due.
    services.sweep()
    assert Slot.objects.get(id=held.slot_id).state == "busy"
    assert QueueEntry.objects.get(request=queued.request).state == "waiting"

    services.release(held.slot_id)  # hands over: the reservation's two minutes from now
    reserved = Slot.objects.get(request=queued.request)
    assert near(reserved.granted_at, database_now())
    assert reserved.reserved_until == reserved.granted_at + dt.timedelta(minutes=2)
    assert verify().violations == []


def test_a_runs_lease_steps_and_recovery_are_the_databases(skewed, no_worker) -> None:
    declare(partner_api={"capacity": 1, "max_hold": "1h"})
    run = runtime.start_run("sync_partner", {})
    assert near(Run.objects.get(id=run.id).created_at, database_now())
    seen: dict[str, dt.datetime | None] = {}
    real = runtime.lock_own_run

    def lock_and_look(ctx: runtime.RunContext) -> None:  # each recording: the lease it renewed
        real(ctx)
        seen["lease_until"] = Run.objects.get(id=run.id).lease_until

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime, "lock_own_run", lock_and_look)
        assert runtime.advance(run.id) == "completed"
    now = database_now()
    assert near(seen["lease_until"], now + runtime.LEASE)
    stored = Run.objects.get(id=run.id)
    assert near(stored.started_at, now) and near(stored.finished_at, now)
    for step in Step.objects.filter(run_id=run.id):
        assert near(step.started_at, now) and near(step.finished_at, now), step.name

    # A run whose lease is alive by the database's clock is not taken over by recovery on a host
    # ten minutes ahead (the old code did: its lease looked expired there).
    stuck = runtime.start_run("sync_partner", {})
    Run.objects.filter(id=stuck.id).update(
        status=Run.Status.RUNNING, lease_owner="someone", lease_until=database_now() + runtime.LEASE,
        dispatched_at=database_now() - dt.timedelta(minutes=5),
    )  # fmt: skip
    runtime.recover()
    assert Run.objects.get(id=stuck.id).lease_owner == "someone"
    assert near(Run.objects.get(id=stuck.id).dispatched_at, database_now() - dt.timedelta(minutes=5))


def test_a_host_measures_and_records_its_skew(skewed) -> None:
    skew = clock.check_skew("worker")
    assert abs(skew - skewed * SKEW.total_seconds()) < CLOSE.total_seconds()
    row = ClockSkew.objects.get(host=clock.host_name(), role="worker")
    assert row.skew_seconds == skew and near(row.measured_at, database_now())
    assert list(clock.recent_skews()) == [row]


def test_pages_count_down_in_the_databases_time(skewed, monkeypatch) -> None:
    """The "expires in 44s" of a page, on a web host whose clock is off: its clock corrected by its skew."""
    from limits.templatetags.limits_ui import time_until

    monkeypatch.setattr(clock, "_display_offset", None)
    assert near(clock.display_now(), database_now())
    assert time_until(database_now() + dt.timedelta(seconds=44)) in ("44s", "43s")
