"""SPEC 5.6 and 7.2: `stackbone limits pause|resume <limit> --agent <id>` against a second running
installation (pytest-django's live_server), through the JSON API, with the output, --json and
exit codes they have locally, audited as the token's owner. A reader's token is refused and
nothing changes. The live server reads committed data, so these tests use transactional_db."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limits import cli
from limits.models import AuditEvent, Limit
from limits.services import acquire, set_capacity
from tests.api.conftest import operator, reader
from tests.cli.conftest import run_cli, write_agents
from tests.factories import declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """voice-calls (capacity 2): r1 and r2 busy, r3 waits; agents "box" (an operator's token) and
    "reader" (a token without the operate permission)."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    for n in (1, 2, 3):
        acquire("voice-calls", run_id=f"r{n}", timeout="1h")
    agents = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url, "token": reader()[1]},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))


def test_pause_and_resume_through_an_agent_match_the_local_output_and_record_the_token_owner(box) -> None:
    paused = run_cli("pause", "voice-calls", "--agent", "box")
    assert paused.code == 0, paused.err
    assert paused.out.startswith("voice-calls: running → paused (grants nothing until")
    assert Limit.objects.get(name="voice-calls").paused
    again = run_cli("pause", "voice-calls", "--agent", "box", "--json")
    assert json.loads(again.out) == json.loads(run_cli("list", "--json").out)[0]
    assert json.loads(again.out)["paused"] is True
    listed = run_cli("list", "--agent", "box")
    assert listed.out.splitlines()[1].split()[4] == "paused"

    set_capacity("voice-calls", 3, actor="test")  # a free slot, not granted while paused
    assert queue("voice-calls") == ["r3"]
    resumed = run_cli("resume", "voice-calls", "--agent", "box")
    assert (resumed.code, resumed.out) == (0, "voice-calls: paused → running (3/3 in use, 0 waiting)\n")
    assert holders("voice-calls")[-1] == ("r3", "reserved")
    rows = AuditEvent.objects.filter(action__in=["pause", "resume"]).order_by("id")
    assert [(row.action, row.actor) for row in rows] == [("pause", "api:ops"), ("resume", "api:ops")]


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_an_unknown_limit_through_an_agent_exits_1_with_one_line(box, verb) -> None:
    result = run_cli(verb, "nope", "--agent", "box")
    assert (result.code, result.out, result.err) == (1, "", "error: unknown limit 'nope'\n")
    as_json = run_cli(verb, "nope", "--agent", "box", "--json")
    assert json.loads(as_json.err) == {"error": "unknown limit 'nope'", "field": "limit"}
    assert not AuditEvent.objects.filter(action__in=["pause", "resume"]).exists()


def test_a_token_without_the_operate_permission_is_refused_and_nothing_changes(box) -> None:
    result = run_cli("pause", "voice-calls", "--agent", "reader")
    assert result.code == 2
    assert result.err.count("\n") == 1 and "limits.operate_limit" in result.err
    assert not Limit.objects.get(name="voice-calls").paused
    assert not AuditEvent.objects.filter(action="pause").exists()
