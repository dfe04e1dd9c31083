"""`stackbone dev --reset-demo` (issue 15, item 16): leaving the demo, its runs no longer hold the
limits; nothing of any other run is touched, and the freed capacity goes to the next run waiting."""

from __future__ import annotations

import pytest
from django.utils import timezone

from limits import services
from limits.models import AuditEvent, QueueEntry, Slot
from stackbone.models import Run
from studio.demo.reset import ACTOR, reset_demo
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


def run(workflow: str, input: dict, status: str = "running") -> Run:
    now = timezone.now()
    return Run.objects.create(workflow=workflow, input=input, status=status, created_at=now, updated_at=now)


def test_reset_demo_clears_the_demos_runs_slots_and_queue_entries_and_nothing_else(no_worker) -> None:
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    # The demo: a finished call still holding its busy slot, and a call waiting; a call from
    # before the "demo" mark; a call_ended of the demo.
    held = run("place_call", {"call_id": "demo-1", "demo": True}, status="completed")
    held_slot = services.acquire("voice-calls", run_id=held.id, label="demo-1").slot_id
    legacy = run("place_call", {"call_id": "demo-2", "timeout": "2m"})
    services.acquire("voice-calls", run_id=legacy.id, label="demo-2")
    ended = run("call_ended", {"slot_id": held_slot}, status="completed")
    # Yours: a run waiting behind the demo, on the same limit.
    mine = run("place_call", {"call_id": "my-call"})
    services.acquire("voice-calls", run_id=mine.id, label="my-call")
    assert queue("voice-calls") == [mine.id]

    report = reset_demo()

    assert (report.runs, report.cancelled, report.released) == (3, 1, 2)
    assert set(Run.objects.values_list("id", flat=True)) == {mine.id}
    assert not Slot.objects.filter(run_id__in=[held.id, legacy.id, ended.id]).exists()
    assert not QueueEntry.objects.filter(run_id__in=[held.id, legacy.id, ended.id]).exists()
    assert holders("voice-calls") == [(mine.id, "reserved")]  # the freed capacity went to the next run
    assert_counters_match_rows("voice-calls")
    assert AuditEvent.objects.filter(actor=ACTOR, action="release").count() == 2
    assert str(reset_demo()) == "no demo data to clear"


def test_reset_demo_clears_partner_calls_holding_or_waiting_for_two_limits(no_worker) -> None:
    """The demo's partner calls take partner-api (the account's pool) and voice-calls together:
    the reset frees both slots of the one holding them, takes the one waiting out of both queues,
    and a keyed run of yours gets the freed capacity."""
    declare(
        partner_api={"capacity": 5, "max_hold": "20s", "per_key": 1},
        voice_calls={"capacity": 1, "max_hold": "45s"},
    )
    both = ["partner-api", "voice-calls"]
    holding = run("partner_call", {"call_id": "bridge-1", "account": "acme", "demo": True})
    services.acquire_group(both, run_id=holding.id, request=f"{holding.id}:1", key="acme")
    waiting = run("partner_call", {"call_id": "bridge-2", "account": "globex", "demo": True})
    services.acquire_group(both, run_id=waiting.id, request=f"{waiting.id}:1", key="globex")
    mine = run("my_call", {"account": "acme"})
    services.acquire_group(both, run_id=mine.id, request=f"{mine.id}:1", key="acme")
    assert queue("voice-calls") == [waiting.id, mine.id] and queue("partner-api") == [waiting.id, mine.id]

    report = reset_demo()

    assert (report.runs, report.cancelled, report.released) == (2, 2, 2)
    assert set(Run.objects.values_list("id", flat=True)) == {mine.id}
    assert holders("partner-api") == [(mine.id, "reserved")] and holders("voice-calls") == [(mine.id, "reserved")]
    assert_counters_match_rows("partner-api")
    assert_counters_match_rows("voice-calls")


def test_reset_demo_clears_the_tenant_jobs_of_the_fair_limit(no_worker) -> None:
    """The demo's tenant jobs (issue 28) on its fair limit: the one holding a slot is released,
    the one waiting cancelled, and a run of yours gets the slot."""
    declare(tenant_jobs={"capacity": 1, "max_hold": "30s", "share": "fair"})
    held = run("tenant_job", {"tenant": "acme", "job": "job-1", "demo": True}, status="completed")
    services.acquire("tenant-jobs", run_id=held.id, key="acme", label="job-1")
    waiting = run("tenant_job", {"tenant": "globex", "job": "job-2", "demo": True})
    services.acquire("tenant-jobs", run_id=waiting.id, key="globex", label="job-2", timeout="2m")
    mine = run("my_job", {"tenant": "initech"})
    services.acquire("tenant-jobs", run_id=mine.id, key="initech", timeout="1h")

    report = reset_demo()

    assert (report.runs, report.cancelled, report.released) == (2, 1, 1)
    assert set(Run.objects.values_list("id", flat=True)) == {mine.id}
    assert holders("tenant-jobs") == [(mine.id, "reserved")]
    assert_counters_match_rows("tenant-jobs")
