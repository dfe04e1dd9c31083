"""SPEC 7.2 for the verbs issue 30 added: `stackbone limits forget` and `stackbone workers` with
`--agent <id>` against a second running installation (pytest-django's live_server), through the
JSON API, with the output, --json and exit codes they have locally. Forget is an operator's
write: a reader's token is refused and nothing is removed. The live server reads committed
data, so these tests use transactional_db."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from limits import cli, workers
from limits.cli import workers as workers_cli
from limits.models import ForgottenLimit, Limit
from limits.services import acquire, release
from tests.api.conftest import operator, reader
from tests.cli.conftest import closed_port, run_cli, write_agents
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)

TWO = workers.Workers(
    (
        workers.Worker("celery@box-a", "box-a", "prefork", 2, 2),
        workers.Worker("celery@box-b", "box-b", "prefork", 1, 0),
    )
)


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The second installation: old-calls, which held a slot and left the config, and voice-calls
    (capacity 20) with a busy slot; its workers answer TWO. The agents file names it with an
    operator's token ("box"), a reader's ("reader") and an address where nothing listens."""
    declare(old_calls={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 20, "max_hold": "1h"})
    release(acquire("old-calls", run_id="r1").slot_id)
    acquire("voice-calls", run_id="r2")
    declare(voice_calls={"capacity": 20, "max_hold": "1h"})
    monkeypatch.setattr(workers, "ask", lambda: TWO)
    workers.forget_answers()
    agents = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url, "token": reader()[1]},
        "down": {"url": f"http://127.0.0.1:{closed_port()}", "token": "sbk_whatever"},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))
    yield
    workers.forget_answers()


def run_workers(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = workers_cli.main(list(argv), streams=cli.Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


# --- forget ------------------------------------------------------------------------------------------


def test_forget_through_an_agent_removes_the_limit_and_records_the_token_owner(box) -> None:
    result = run_cli("forget", "old-calls", "--yes", "--agent", "box")

    assert (result.code, result.err) == (0, ""), result.err
    assert result.out == (
        "forgot old-calls: removed 1 slot, 0 queue entries, 0 keys, 1 audit row and 0 insights rows "
        "(recorded as forgotten by api:ops)\n"
    )
    assert not Limit.objects.filter(name="old-calls").exists()
    record = ForgottenLimit.objects.get()
    assert (record.name, record.actor, record.removed["slots"]) == ("old-calls", "api:ops", 1)


def test_forget_json_through_an_agent_has_the_local_keys(box) -> None:
    answer = json.loads(run_cli("forget", "old-calls", "--yes", "--agent", "box", "--json").out)
    assert set(answer) == {"forgotten", "limit", "kind", "at", "actor", "removed"}
    assert (answer["forgotten"], answer["limit"], answer["kind"], answer["actor"]) == (
        True,
        "old-calls",
        "limit",
        "api:ops",
    )
    assert set(answer["removed"]) == {
        "slots",
        "queue_entries",
        "keys",
        "audit_events",
        "minutes",
        "key_spans",
        "totals",
    }


def test_forget_of_a_declared_limit_through_an_agent_is_refused_as_locally(box) -> None:
    local = run_cli("forget", "voice-calls", "--yes")
    through = run_cli("forget", "voice-calls", "--yes", "--agent", "box")
    assert (through.code, through.out, through.err) == (1, "", local.err)
    assert "still declared" in through.err
    refused = run_cli("forget", "voice-calls", "--yes", "--agent", "box", "--json")
    assert json.loads(refused.err)["field"] == "limit"
    assert Limit.objects.filter(name="voice-calls").exists() and not ForgottenLimit.objects.exists()


def test_forget_of_an_unknown_limit_through_an_agent_exits_1(box) -> None:
    result = run_cli("forget", "nope", "--yes", "--agent", "box")
    assert (result.code, result.err) == (1, "error: unknown limit 'nope'\n")


def test_forget_with_a_readers_token_is_refused_and_forgets_nothing(box) -> None:
    result = run_cli("forget", "old-calls", "--yes", "--agent", "reader")
    assert result.code == 2
    assert result.err.startswith("error: agent 'reader'") and "may not operate limits" in result.err
    assert Limit.objects.filter(name="old-calls").exists() and not ForgottenLimit.objects.exists()


def test_forget_through_an_agent_without_yes_refuses_with_no_terminal(box) -> None:
    result = run_cli("forget", "old-calls", "--agent", "box")
    assert result.code == 2 and "pass --yes" in result.err
    assert Limit.objects.filter(name="old-calls").exists()


# --- workers -----------------------------------------------------------------------------------------


def test_workers_through_an_agent_print_what_they_print_locally(box) -> None:
    local = run_workers()
    through = run_workers("--agent", "reader")
    assert (through[0], through[2]) == (0, "")
    assert through[1] == local[1]
    lines = through[1].splitlines()
    assert lines[1].split() == ["celery@box-a", "box-a", "prefork", "2", "2"]
    assert "voice-calls: capacity 20 is more than the workers' 3 processes" in through[1]


def test_workers_json_through_an_agent_matches_the_local_json(box) -> None:
    code, out, _ = run_workers("--agent", "reader", "--json")
    assert code == 0
    assert json.loads(out) == json.loads(run_workers("--json")[1])
    assert json.loads(out)["concurrency"] == 3


def test_workers_through_an_agent_without_workers_exits_1_and_says_why(box, monkeypatch) -> None:
    monkeypatch.setattr(workers, "ask", lambda: workers.Workers(note=workers.IN_PROCESS))
    workers.forget_answers()
    code, out, _ = run_workers("--agent", "box")
    assert code == 1
    assert out.splitlines()[0] == f"no worker answered: {workers.IN_PROCESS}"


@pytest.mark.parametrize(
    ("agent", "code", "start"),
    [
        ("", 2, "error: --agent needs an agent id"),
        ("nobody", 2, "error: --agent nobody: unknown agent"),
        ("down", 1, "error: cannot reach agent 'down'"),
    ],
)
def test_workers_with_a_bad_or_unreachable_agent_fail_in_one_line(box, agent, code, start) -> None:
    result = run_workers("--agent", agent)
    assert (result[0], result[1]) == (code, "")
    assert result[2].startswith(start) and result[2].count("\n") == 1
    as_json = run_workers("--agent", agent, "--json")
    assert json.loads(as_json[2])["error"]
