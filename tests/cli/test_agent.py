"""SPEC 7.2 and issue 5: every verb with `--agent <id>` against a second running installation
(pytest-django's live_server), through the JSON API. The live server reads committed data, so
these tests use transactional_db."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limits import cli
from limits.cli import remote
from limits.models import AuditEvent, Limit, Slot
from limits.services import acquire
from tests.api.conftest import operator, reader
from tests.cli.conftest import closed_port, run_cli, write_agents
from tests.factories import declare, holders, queue

# one_database (tests/conftest.py): the CLI's HTTP client and its output against a live server;
# the server's routes are proved on both databases by tests/api.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The second installation: voice-calls (capacity 2) with r1, r2 busy and r3, r4 waiting,
    and an agents file naming it with an operator's token ("box"), a reader's ("reader"), a
    wrong token ("forged") and an address where nothing listens ("down")."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    slots = [acquire("voice-calls", run_id=f"r{n}", label=f"call-{n}").slot_id for n in (1, 2)]
    for n in (3, 4):
        acquire("voice-calls", run_id=f"r{n}", timeout="1h")
    agents = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url + "/", "token": reader()[1]},
        "forged": {"url": live_server.url, "token": "sbk_forged"},
        "down": {"url": f"http://127.0.0.1:{closed_port()}", "token": "sbk_whatever"},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))
    return slots


def test_list_through_an_agent(box) -> None:
    result = run_cli("list", "--agent", "box")
    assert result.code == 0, result.err
    assert any(line.split()[:3] == ["voice-calls", "2/2", "2"] for line in result.out.splitlines())
    local = run_cli("list", "--json")
    assert json.loads(run_cli("list", "--agent", "reader", "--json").out) == json.loads(local.out)


def test_slots_through_an_agent_match_the_local_output(box) -> None:
    remote = json.loads(run_cli("slots", "voice-calls", "--agent", "box", "--json").out)
    local = json.loads(run_cli("slots", "voice-calls", "--json").out)
    assert remote == local
    assert [slot["run"] for slot in remote["slots"]] == ["r1", "r2"]
    assert [entry["position"] for entry in remote["queue"]] == [1, 2]
    text = run_cli("slots", "voice-calls", "--agent", "box").out
    assert text.splitlines()[0] == "voice-calls: 2/2 in use, 2 waiting, max hold 45m"


def test_slots_through_an_agent_follow_pages_and_cut(box, monkeypatch) -> None:
    monkeypatch.setattr(remote, "API_PAGE_SIZE", 1)
    for n in range(5, 9):
        acquire("voice-calls", run_id=f"r{n}", timeout="1h")
    whole = json.loads(run_cli("slots", "voice-calls", "--agent", "box", "--json").out)
    assert [entry["run"] for entry in whole["queue"]] == ["r3", "r4", "r5", "r6", "r7", "r8"]
    assert [entry["position"] for entry in whole["queue"]] == [1, 2, 3, 4, 5, 6]
    cut = run_cli("slots", "voice-calls", "--agent", "box", "--limit", "2")
    assert "… and 4 more waiting" in cut.out.splitlines()
    assert [line.split()[1] for line in cut.out.splitlines() if line[:1].isdigit()] == ["r3", "r4"]


def test_slots_of_an_unknown_limit_through_an_agent_exits_1(box) -> None:
    result = run_cli("slots", "nope", "--agent", "box")
    assert (result.code, result.err) == (1, "error: unknown limit 'nope'\n")


def test_release_through_an_agent_records_the_token_owner(box) -> None:
    result = run_cli("release", box[0], "--yes", "--agent", "box")
    assert result.code == 0, result.err
    assert result.out == f"released {box[0]} of voice-calls (was busy, run r1)\n"
    assert holders("voice-calls") == [("r2", "busy"), ("r3", "reserved")]
    assert AuditEvent.objects.get(action="release").actor == "api:ops"
    again = run_cli("release", box[0], "--yes", "--agent", "box", "--json")
    assert (again.code, json.loads(again.out)) == (
        1,
        {"released": False, "reason": "already free", "state": "released"},
    )
    assert json.loads(again.err)["field"] == "slot_id" and "already free" in json.loads(again.err)["error"]


def test_release_of_an_unknown_slot_through_an_agent_exits_1(box) -> None:
    result = run_cli("release", "slot_nope", "--yes", "--agent", "box")
    assert (result.code, result.err) == (1, "error: unknown slot 'slot_nope'\n")


def test_release_through_an_agent_without_yes_refuses_with_no_terminal(box) -> None:
    assert run_cli("release", box[0], "--agent", "box").code == 2
    assert Slot.objects.get(id=box[0]).state == "busy"


def test_capacity_and_max_hold_through_an_agent(box) -> None:
    assert run_cli("capacity", "voice-calls", "3", "--agent", "box").out == "voice-calls capacity: 2 → 3\n"
    assert queue("voice-calls") == ["r4"]
    assert run_cli("capacity", "voice-calls", "reset", "--agent", "box").out == (
        "voice-calls capacity: 3 → 2 (declared)\n"
    )
    payload = json.loads(run_cli("max-hold", "voice-calls", "2h", "--agent", "box", "--json").out)
    assert (payload["name"], payload["max_hold_ms"], payload["max_hold_overridden"]) == ("voice-calls", 7_200_000, True)
    reset = run_cli("max-hold", "voice-calls", "reset", "--agent", "box")
    assert reset.out == "voice-calls max hold: 2h → 45m (declared)\n"
    assert set(AuditEvent.objects.exclude(action="sync").values_list("actor", flat=True)) == {"api:ops"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("capacity", "voice-calls", "0"), "error: capacity must be a whole number from 1 to 100000, not 0\n"),
        (("capacity", "voice-calls", "abc"), "error: capacity must be a whole number from 1 to 100000, not 'abc'\n"),
        (("max-hold", "voice-calls", "31d"), None),
    ],
)
def test_bad_values_through_an_agent_exit_2(box, argv, message) -> None:
    result = run_cli(*argv, "--agent", "box")
    assert result.code == 2
    if message:
        assert result.err == message
    assert "at most 30 days" in result.err or "1 to 100000" in result.err
    limit = Limit.objects.get(name="voice-calls")
    assert (limit.capacity_override, limit.max_hold_override_ms) == (None, None)


def test_unknown_limit_writes_through_an_agent_exit_1(box) -> None:
    assert run_cli("capacity", "nope", "3", "--agent", "box").code == 1
    assert run_cli("max-hold", "nope", "1h", "--agent", "box").code == 1


def test_a_token_without_the_operate_permission_is_refused(box) -> None:
    result = run_cli("capacity", "voice-calls", "5", "--agent", "reader")
    assert result.code == 2
    assert result.err.startswith("error: agent 'reader'")
    assert "may not operate limits" in result.err
    assert run_cli("release", box[0], "--yes", "--agent", "reader").code == 2
    assert Limit.objects.get(name="voice-calls").capacity == 2
    assert Slot.objects.get(id=box[0]).state == "busy"


def test_a_forged_token_is_refused(box) -> None:
    result = run_cli("list", "--agent", "forged")
    assert result.code == 2
    assert "refused the token" in result.err
    assert result.err.count("\n") == 1


def test_an_unreachable_agent_is_one_line_and_exit_1(box) -> None:
    for argv in (("list",), ("slots", "voice-calls"), ("capacity", "voice-calls", "3"), ("release", "slot_x", "--yes")):
        result = run_cli(*argv, "--agent", "down")
        assert result.code == 1
        assert result.err.startswith("error: cannot reach agent 'down' (http://127.0.0.1:")
        assert result.err.count("\n") == 1


def test_an_unknown_agent_id_exits_2(box) -> None:
    result = run_cli("list", "--agent", "elsewhere")
    assert result.code == 2
    assert result.err == (
        f"error: --agent elsewhere: unknown agent in {cli.agents_file()} (known: box, down, forged, reader)\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no agents file at"),
        ("[agents.box\n", "cannot read the agents file"),
        ('[agents.box]\nurl = "ftp://x"\ntoken = "t"\n', "must be an http:// or https:// address"),
        ('[agents.box]\nurl = "http://x"\n', "no 'token'"),
    ],
)
def test_a_bad_agents_file_exits_2(tmp_path, monkeypatch, content, message) -> None:
    path = tmp_path / "agents.toml"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(path))
    result = run_cli("list", "--agent", "box")
    assert result.code == 2
    assert message in result.err
    assert result.err.count("\n") == 1
    as_json = run_cli("list", "--agent", "box", "--json")
    assert json.loads(as_json.err)["field"] == "agent"  # the argument at fault, as the docs say


def test_a_token_may_come_from_an_environment_variable(box, tmp_path, monkeypatch, live_server) -> None:
    monkeypatch.setenv("BOX_TOKEN", reader("env-reader")[1])
    path = tmp_path / "env-agents.toml"
    path.write_text(f'[agents.box]\nurl = "{live_server.url}"\ntoken_env = "BOX_TOKEN"\n')
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(path))
    assert run_cli("list", "--agent", "box").code == 0
