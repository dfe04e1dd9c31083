"""Issue 13 with `--agent <id>`: `keys`, `slots --key` and `per-key` against a second running
installation (pytest-django's live_server) through the JSON API, with the same output, the
same --json and the same exit codes as locally. The live server reads committed data, so these
tests use transactional_db."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limits import cli
from limits.cli import remote
from limits.models import AuditEvent, Limit, LimitKey
from limits.services import acquire
from tests.api.conftest import operator, reader
from tests.cli.conftest import closed_port, run_cli, seed_tenants, write_agents
from tests.factories import holders

# one_database (tests/conftest.py): the CLI's HTTP client and its output against a live server;
# the server's routes are proved on both databases by tests/api.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second installation holds the tenants of seed_tenants; the agents file names it with
    an operator's token ("box"), a reader's ("reader") and an address where nothing listens."""
    seed_tenants()
    agents = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url, "token": reader()[1]},
        "down": {"url": f"http://127.0.0.1:{closed_port()}", "token": "sbk_whatever"},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))


@pytest.mark.parametrize(
    "argv",
    [
        ("keys", "voice-calls"),
        ("keys", "voice-calls", "--key", "globex"),
        ("keys", "voice-calls", "--key", "nobody"),
        ("keys", "voice-calls", "--search", "CM"),
        ("keys", "voice-calls", "--limit", "1"),
        ("keys", "partner-api"),
        ("slots", "voice-calls"),
        ("slots", "voice-calls", "--key", "acme"),
        ("slots", "voice-calls", "--key", "initech"),
    ],
)
def test_reads_through_an_agent_match_the_local_output(box, argv) -> None:
    local = run_cli(*argv, "--json")
    through = run_cli(*argv, "--agent", "reader", "--json")
    assert (through.code, through.err) == (0, "")
    assert json.loads(through.out) == json.loads(local.out)
    text = run_cli(*argv, "--agent", "reader")
    assert text.out.splitlines()[0] == run_cli(*argv).out.splitlines()[0]


def test_keys_through_an_agent_print_the_table(box) -> None:
    result = run_cli("keys", "voice-calls", "--agent", "box")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "voice-calls: 4/4 in use, 2 waiting, per key 2"
    assert [line.split()[:5] for line in lines[3:5]] == [["acme", "2", "2", "1", "-"], ["globex", "1", "2", "1", "-"]]
    assert lines[-1] == "without a key: 1/2 in use, 0 waiting"


def test_keys_through_an_agent_follow_pages_and_cut(box, monkeypatch) -> None:
    monkeypatch.setattr(remote, "API_PAGE_SIZE", 1)
    for n, key in enumerate(["initech", "umbrella", "hooli"]):
        acquire("voice-calls", run_id=f"k{n}", key=key, timeout="1h")
    whole = json.loads(run_cli("keys", "voice-calls", "--agent", "box", "--json").out)
    assert [row["key"] for row in whole["keys"]] == ["acme", "globex", "hooli", "initech", "umbrella"]
    cut = json.loads(run_cli("keys", "voice-calls", "--agent", "box", "--limit", "2", "--json").out)
    assert ([row["key"] for row in cut["keys"]], cut["more_keys"]) == (["acme", "globex"], 3)


def test_slots_by_key_through_an_agent_follow_pages(box, monkeypatch) -> None:
    monkeypatch.setattr(remote, "API_PAGE_SIZE", 1)
    acquire("voice-calls", run_id="r7", key="acme", timeout="1h")
    payload = json.loads(run_cli("slots", "voice-calls", "--key", "acme", "--agent", "box", "--json").out)
    assert [slot["run"] for slot in payload["slots"]] == ["r1", "r2"]
    assert [(entry["position"], entry["run"]) for entry in payload["queue"]] == [(1, "r3"), (2, "r7")]


def test_per_key_through_an_agent_records_the_token_owner(box) -> None:
    assert run_cli("per-key", "voice-calls", "3", "--agent", "box").out == "voice-calls per key: 2 → 3\n"
    assert run_cli("per-key", "voice-calls", "reset", "--agent", "box").out == (
        "voice-calls per key: 3 → 2 (declared)\n"
    )
    payload = json.loads(run_cli("per-key", "voice-calls", "1", "--key", "globex", "--agent", "box", "--json").out)
    assert (payload["limit"], payload["key"], payload["pool"], payload["pool_overridden"]) == (
        "voice-calls",
        "globex",
        1,
        True,
    )
    reset = run_cli("per-key", "voice-calls", "reset", "--key", "globex", "--agent", "box")
    assert reset.out == "voice-calls key globex pool: 1 → 2 (the limit's per key)\n"
    assert set(AuditEvent.objects.filter(action="per_key").values_list("actor", flat=True)) == {"api:ops"}


def test_per_key_through_an_agent_grants_at_once(box) -> None:
    run_cli("capacity", "voice-calls", "6", "--agent", "box")
    result = run_cli("per-key", "voice-calls", "3", "--key", "acme", "--agent", "box")
    assert result.out == "voice-calls key acme pool: 2 → 3\n"
    assert ("r3", "reserved") in holders("voice-calls")


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (("per-key", "voice-calls", "0"), "error: per_key must "),
        (("per-key", "voice-calls", "5", "--key", "acme"), "error: per_key must "),
        (("per-key", "voice-calls", "abc"), "error: per_key must "),
        (("per-key", "voice-calls", "3", "--key", ""), "error: key must "),
        (("keys", "voice-calls", "--key", "a\x1bb"), "error: key must "),
        (("slots", "voice-calls", "--key", "k" * 129), "error: key must "),
    ],
)
def test_bad_values_through_an_agent_exit_2_and_change_nothing(box, argv, start) -> None:
    result = run_cli(*argv, "--agent", "box")
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(start) and result.err.count("\n") == 1
    assert Limit.objects.get(name="voice-calls").per_key_override is None
    assert not LimitKey.objects.filter(pool_override__isnull=False).exists()
    assert not AuditEvent.objects.filter(action="per_key").exists()


def test_unknown_limits_through_an_agent_exit_1(box) -> None:
    for argv in (("keys", "nope"), ("slots", "nope", "--key", "acme"), ("per-key", "nope", "3", "--key", "acme")):
        result = run_cli(*argv, "--agent", "box")
        assert (result.code, result.err) == (1, "error: unknown limit 'nope'\n")


def test_a_token_without_the_operate_permission_cannot_change_per_key(box) -> None:
    result = run_cli("per-key", "voice-calls", "3", "--agent", "reader")
    assert result.code == 2
    assert "may not operate limits" in result.err
    assert Limit.objects.get(name="voice-calls").per_key_override is None


def test_an_unreachable_agent_is_one_line_and_exit_1(box) -> None:
    for argv in (("keys", "voice-calls"), ("slots", "voice-calls", "--key", "acme"), ("per-key", "voice-calls", "3")):
        result = run_cli(*argv, "--agent", "down")
        assert result.code == 1
        assert result.err.startswith("error: cannot reach agent 'down'")
        assert result.err.count("\n") == 1
