"""Issue 30: a reserved slot has two timers, and `stackbone limits slots` says which applies, as
Studio and the run page do. Until its run confirms, the confirm deadline does (CONFIRM WITHIN;
past it the slot lapses to the next run); max hold (EXPIRES IN) counts only once it is confirmed.
The column appears only while a slot is reserved; --json keeps its keys (`reserved_until` was
there already)."""

from __future__ import annotations

import json

import pytest

from limits.services import acquire
from tests.cli.conftest import run_cli
from tests.factories import declare

pytestmark = pytest.mark.django_db

NOTE = (
    "reserved: its run confirms within CONFIRM WITHIN or the slot lapses to the next run; "
    "max hold counts only once it is confirmed"
)


@pytest.fixture
def reserved(clock) -> None:
    """voice-calls (capacity 2, max hold 45m): r1 and r2 busy, r3 waits; 30 s later r1 is
    released, so r3 holds a reserved slot (2 minutes to confirm) and r2 stays busy."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    first = acquire("voice-calls", run_id="r1", label="call-1").slot_id
    acquire("voice-calls", run_id="r2", label="call-2")
    acquire("voice-calls", run_id="r3", label="call-3", timeout="1h")
    clock.advance(seconds=30)
    assert run_cli("release", first, "--yes").code == 0


def slot_table(text: str) -> list[list[str]]:
    """The slot table's header and rows, split on runs of two spaces (a cell may hold one)."""
    lines = text.split("\n\n")[1].splitlines()
    return [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in lines]


def test_a_reserved_slot_shows_its_confirm_deadline_and_when_max_hold_applies(reserved, clock) -> None:
    clock.advance(seconds=20)
    result = run_cli("slots", "voice-calls")

    assert result.code == 0, result.err
    header, busy, held, note = slot_table(result.out)
    assert header == ["SLOT", "STATE", "RUN", "LABEL", "GRANTED", "EXPIRES IN", "CONFIRM WITHIN"]
    assert busy[1:] == ["busy", "r2", "call-2", "50s ago", "44m 10s", "-"]
    assert held[1:] == ["reserved", "r3", "call-3", "20s ago", "44m 40s once confirmed", "1m 40s"]
    assert note == [NOTE]


def test_past_its_confirm_deadline_a_reserved_slot_says_it_is_lapsing(reserved, clock) -> None:
    clock.advance(minutes=2, seconds=1)  # the sweep has not taken it back yet
    held = slot_table(run_cli("slots", "voice-calls").out)[2]
    assert held[1] == "reserved" and held[-1] == "lapsing"


def test_without_a_reserved_slot_the_table_has_no_confirm_column(clock) -> None:
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    acquire("voice-calls", run_id="r1", label="call-1")
    text = run_cli("slots", "voice-calls").out
    assert slot_table(text)[0] == ["SLOT", "STATE", "RUN", "LABEL", "GRANTED", "EXPIRES IN"]
    assert NOTE not in text


def test_a_workflow_bounds_reserved_slot_shows_its_confirm_deadline_too(clock) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    from limits import services
    from limits.runs import bounds as run_bounds

    run_bounds.sync(["sync_tenant"])
    bound = "workflow.sync_tenant"
    services.set_capacity(bound, 1, actor="test")
    first = acquire(bound, run_id="run_a").slot_id
    acquire(bound, run_id="run_b", timeout="1h")
    clock.advance(seconds=10)
    services.release(first, actor="test")
    header, held, _ = slot_table(run_cli("slots", bound).out)
    assert header == ["SLOT", "STATE", "RUN", "LABEL", "GRANTED", "CONFIRM WITHIN"]  # a bound has no max hold
    assert held[1:] == ["reserved", "run_b", "-", "just now", "2m"]


def test_slots_json_keeps_its_keys_and_gives_the_deadline(reserved) -> None:
    slots = json.loads(run_cli("slots", "voice-calls", "--json").out)["slots"]
    keys = {"id", "state", "run", "label", "key", "group_size", "group", "granted_at", "expires_at", "reserved_until"}
    assert [set(slot) for slot in slots] == [keys, keys]
    assert [slot["reserved_until"] is None for slot in slots] == [True, False]
