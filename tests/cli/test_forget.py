"""`stackbone limits forget <limit>` (issue 30): a limit that left the config, with no slot in use
and no run waiting, is removed with its history, and the removal is recorded; anything else is
refused in one line and changes nothing.

Must never happen: a limit forgotten while a slot of it is in use or a run waits for it, or while
the workspace still declares it."""

from __future__ import annotations

import getpass
import json

import pytest

from limits.models import AuditEvent, ForgottenLimit, Limit, LimitKey, QueueEntry, Slot
from limits.services import acquire, acquire_group, release
from tests.cli.conftest import Terminal, run_cli
from tests.factories import declare

pytestmark = pytest.mark.django_db

ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def old_limit() -> str:
    """old-calls held a slot, queued a run, granted it and freed both; then the config dropped it."""
    declare(old_calls={"capacity": 1, "max_hold": "1h", "per_key": 1}, voice_calls={"capacity": 2, "max_hold": "1h"})
    first = acquire("old-calls", run_id="r1", key="acme").slot_id
    assert acquire("old-calls", run_id="r2", key="acme", request="q2", timeout="1h").state == "waiting"
    release(first)
    second = acquire("old-calls", run_id="r2", key="acme", request="q2").slot_id  # confirms its reservation
    release(second, actor="alice")
    declare(voice_calls={"capacity": 2, "max_hold": "1h"})
    assert not Limit.objects.get(name="old-calls").declared
    return "old-calls"


def test_forget_removes_an_undeclared_idle_limit_with_its_history_and_records_it(old_limit) -> None:
    result = run_cli("forget", old_limit, "--yes")

    assert (result.code, result.err) == (0, ""), result.err
    assert result.out == (
        "forgot old-calls: removed 2 slots, 1 queue entry, 1 key, 2 audit rows and 0 insights rows "
        f"(recorded as forgotten by {ACTOR})\n"
    )
    assert not Limit.objects.filter(name=old_limit).exists()
    assert not Slot.objects.filter(limit__name=old_limit).exists()
    assert not QueueEntry.objects.filter(limit__name=old_limit).exists()
    assert not LimitKey.objects.filter(limit__name=old_limit).exists()
    record = ForgottenLimit.objects.get()
    assert (record.name, record.kind, record.actor, record.declared_capacity) == (old_limit, "limit", ACTOR, 1)
    assert record.removed["slots"] == 2 and record.removed["audit_events"] >= 2
    assert Limit.objects.filter(name="voice-calls").exists()  # the others stay
    assert old_limit not in run_cli("list").out
    assert run_cli("verify").code == 0


def test_forget_json_says_what_was_removed(old_limit) -> None:
    answer = json.loads(run_cli("forget", old_limit, "--yes", "--json").out)
    assert (answer["forgotten"], answer["limit"], answer["kind"], answer["actor"]) == (True, old_limit, "limit", ACTOR)
    assert answer["removed"]["slots"] == 2


def test_forget_of_a_declared_limit_is_refused_in_one_line(old_limit) -> None:
    result = run_cli("forget", "voice-calls", "--yes")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error: limit 'voice-calls' is still declared in the workspace: remove it from the config and "
        "deploy (migrate or limits sync) first; nothing forgotten\n"
    )
    assert Limit.objects.filter(name="voice-calls").exists() and not ForgottenLimit.objects.exists()


@pytest.mark.parametrize("what", ["slot", "waiting run"])
def test_forget_of_a_limit_with_a_live_slot_or_a_waiting_run_is_refused(what: str) -> None:
    declare(old_calls={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 1, "max_hold": "1h"})
    if what == "slot":
        acquire("old-calls", run_id="r1")
    else:  # r2 waits for both limits, voice-calls being full: old-calls has nothing in use
        acquire("voice-calls", run_id="r1")
        assert acquire_group(["old-calls", "voice-calls"], run_id="r2", timeout="1h").state == "waiting"
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})  # old-calls leaves the config
    result = run_cli("forget", "old-calls", "--yes")

    assert (result.code, result.out) == (1, "")
    expected = "1 slot(s) in use and 0 run(s) waiting" if what == "slot" else "0 slot(s) in use and 1 run(s) waiting"
    assert result.err == (
        f"error: limit 'old-calls' still has {expected}: release them or let them end first; nothing forgotten\n"
    )
    assert Limit.objects.filter(name="old-calls").exists() and not ForgottenLimit.objects.exists()


def test_forget_of_an_unknown_limit_exits_1(old_limit) -> None:
    result = run_cli("forget", "nope", "--yes")
    assert (result.code, result.out, result.err) == (1, "", "error: unknown limit 'nope'\n")


def test_forget_without_yes_asks_on_a_terminal_and_refuses_without_one(old_limit) -> None:
    refused = run_cli("forget", old_limit)
    assert refused.code == 2 and "pass --yes" in refused.err
    declined = run_cli("forget", old_limit, stdin=Terminal("n\n"))
    assert declined.code == 1 and Limit.objects.filter(name=old_limit).exists()
    confirmed = run_cli("forget", old_limit, stdin=Terminal("y\n"))
    assert confirmed.code == 0, confirmed.err
    assert "Forget old-calls" in confirmed.err
    assert not Limit.objects.filter(name=old_limit).exists()


def test_forget_with_an_unknown_agent_exits_2_and_forgets_nothing(old_limit, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STACKBONE_AGENTS_FILE", str(tmp_path / "none.toml"))
    result = run_cli("forget", old_limit, "--yes", "--agent", "box")
    assert result.code == 2 and "--agent box: no agents file" in result.err
    assert Limit.objects.filter(name=old_limit).exists() and not ForgottenLimit.objects.exists()


def test_a_forgotten_limit_declared_again_starts_afresh(old_limit) -> None:
    before = Limit.objects.get(name=old_limit).id
    run_cli("forget", old_limit, "--yes")
    declare(old_calls={"capacity": 3, "max_hold": "1h"}, voice_calls={"capacity": 2, "max_hold": "1h"})
    limit = Limit.objects.get(name=old_limit)
    assert (limit.declared, limit.capacity, limit.busy_count, limit.id != before) == (True, 3, 0, True)
    assert acquire(old_limit, run_id="r9").state == "busy"
    assert not AuditEvent.objects.filter(limit=limit, action="release").exists()  # none of the old history
