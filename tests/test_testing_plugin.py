"""Issue 45, item 4: the test helpers ship with the package (limits/testing.py, a pytest plugin
registered through the `pytest11` entry point; docs/testing-your-workflows.md). Each fixture as a
project's own test uses it: runs that move as they are started and woken, runs that move only when
advanced, slots held across a test's steps (a per-key pool of 2), the box's clock moved by the
test, and why a run waits. tests/test_embedding.py runs a fresh project's own test with them.

Must never happen: a helper that leaves a run or a slot otherwise than the box would (a held slot
that waits, a release whose woken run does not move, a wait that outlives its timeout once the
clock is past it), or loading the plugin importing Django or Celery (it loads in every project
where the package is installed, Django or not)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from limits.runs import step, workflow
from limits.testing import NO_ROOM, Runs
from limits.workflow import SlotTimeoutError, acquire_slot, with_limit
from tests.factories import declare

pytestmark = pytest.mark.django_db


@step
def call_partner(tenant: str) -> str:
    return f"synced {tenant}"


@workflow(name="test_plugin_sync_tenant")
def sync_tenant(input: dict) -> dict:
    tenant = input["tenant"]
    return {"said": with_limit("partner-api", lambda: call_partner(tenant), label=tenant, key=tenant)}


@workflow(name="test_plugin_patient_call")
def patient_call(input: dict) -> dict:
    try:
        slot = acquire_slot("partner-api", label="call", timeout="5m")
    except SlotTimeoutError:
        return {"slot": None}
    return {"slot": slot.id}


@pytest.fixture
def partner_api() -> None:
    declare(partner_api={"capacity": 3, "max_hold": "10m", "per_key": 2})


@pytest.mark.one_database
def test_the_plugin_is_registered_and_loading_it_imports_neither_django_nor_celery() -> None:
    plugins = {entry.name: entry.value for entry in importlib.metadata.entry_points(group="pytest11")}
    assert plugins["stackbone"] == "limits.testing"
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, limits.testing; print(sorted({m.split('.')[0] for m in sys.modules}))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "'django'" not in loaded.stdout and "'celery'" not in loaded.stdout, loaded.stdout


def test_a_per_key_pool_of_two_held_across_steps(partner_api, stackbone_runs, stackbone_slots) -> None:
    """Hold acme's two slots, start acme's run: it waits because its key's pool is full, while
    globex's run goes through; release one, and acme's run completes at once."""
    held = [stackbone_slots.hold("partner-api", key="acme", label=f"held-{n}") for n in range(2)]
    acme = stackbone_runs.start(sync_tenant, {"tenant": "acme"})
    globex = stackbone_runs.start("test_plugin_sync_tenant", {"tenant": "globex"})
    assert (acme.status, globex.status) == ("running", "completed")
    reason = stackbone_runs.assert_waiting(acme, "partner-api", because="key_pool_full")
    assert (reason.key, reason.text) == ("acme", "its key's pool is full")
    assert stackbone_slots.waiting("partner-api") == [acme.id]
    assert stackbone_slots.in_use("partner-api", key="acme") == 2

    assert stackbone_slots.release(held[0]) is True
    assert stackbone_runs.output(acme) == {"said": "synced acme"}
    assert stackbone_slots.in_use("partner-api", key="acme") == 1  # with_limit gave its slot back
    assert stackbone_slots.release(held[0]) is False  # already free


def test_a_hold_never_waits_it_says_why_there_is_no_room(partner_api, stackbone_slots) -> None:
    stackbone_slots.hold("partner-api", key="acme")
    stackbone_slots.hold("partner-api", key="acme")
    with pytest.raises(AssertionError) as refused:
        stackbone_slots.hold("partner-api", key="acme")
    assert str(refused.value) == NO_ROOM.format(
        limit="partner-api", key=" (key 'acme')", reason="its key's pool is full"
    )
    assert stackbone_slots.waiting("partner-api") == []  # it left the queue it joined
    assert stackbone_slots.in_use("partner-api") == 2


def test_assert_waiting_says_what_the_run_waits_for_instead(partner_api, stackbone_runs, stackbone_slots) -> None:
    for key in ("a", "b", "c"):
        stackbone_slots.hold("partner-api", key=key)
    run = stackbone_runs.start(patient_call, {})
    assert stackbone_runs.why_waiting(run)["partner-api"].code == "limit_full"
    with pytest.raises(AssertionError, match=r"waits for partner-api because 'limit_full' \(the limit is full\)"):
        stackbone_runs.assert_waiting(run, "partner-api", because="key_pool_full")
    with pytest.raises(AssertionError, match="does not wait for voice-calls: it waits for partner-api"):
        stackbone_runs.assert_waiting(run, "voice-calls")


def test_with_no_worker_a_run_moves_only_when_advanced(partner_api, stackbone_no_worker: Runs) -> None:
    run = stackbone_no_worker.start(sync_tenant, {"tenant": "acme"})
    assert run.status == "pending"
    assert stackbone_no_worker.advance(run).status == "completed"
    assert stackbone_no_worker.get(run.id).output == {"said": "synced acme"}


def test_moving_the_clock_times_a_wait_out_and_takes_back_a_slot_past_max_hold(
    partner_api, stackbone_runs, stackbone_slots, stackbone_clock
) -> None:
    held = [stackbone_slots.hold("partner-api", key=key) for key in ("a", "b", "c")]
    run = stackbone_runs.start(patient_call, {})
    stackbone_runs.assert_waiting(run, "partner-api", because="limit_full")

    started = stackbone_clock.now()
    report = stackbone_clock.advance(minutes=5, seconds=1)  # past the wait's 5 minutes
    assert (stackbone_clock.now() - started).total_seconds() == 301  # it stands still otherwise
    assert report is not None and report.timed_out == 1
    assert stackbone_runs.get(run).output == {"slot": None}

    stackbone_clock.advance(minutes=5)  # 10 min 1 s after the holds: past their max hold
    assert stackbone_slots.in_use("partner-api") == 0
    assert stackbone_slots.release(held[0]) is False  # taken back already


@workflow(name="test_plugin_take_report")
def take_report(input: dict) -> dict:
    slot = acquire_slot("reports", key=input["tenant"], label=input["tenant"])
    return {"slot": slot.id}  # the slot stays busy after the run: the report is still being made


def test_fair_shares_serve_the_tenant_holding_least_first(stackbone_runs, stackbone_slots) -> None:
    """docs/testing-your-workflows.md's fairness example: acme holds both slots of a fair limit;
    globex's run, which came after acme's, gets the next one."""
    declare(reports={"capacity": 2, "max_hold": "1h", "share": "fair"})
    first = stackbone_slots.hold("reports", key="acme")
    stackbone_slots.hold("reports", key="acme")
    acme = stackbone_runs.start(take_report, {"tenant": "acme"})
    globex = stackbone_runs.start(take_report, {"tenant": "globex"})
    stackbone_runs.assert_waiting(globex, "reports", because="limit_full")  # next in line once a slot frees
    stackbone_runs.assert_waiting(acme, "reports", because="fair_turn")  # acme holds more than its share

    stackbone_slots.release(first)
    assert (stackbone_runs.status(globex), stackbone_runs.status(acme)) == ("completed", "running")
    stackbone_runs.assert_waiting(acme, "reports", because="limit_full")
