"""Issue 29, item 4: `stackbone runs start|list|show|cancel --agent <id>` against a second running
installation (pytest-django's live_server), through its /api/runs/ (limits.runs.api). The live
server reads committed data, so these tests use transactional_db; runs stay where they are
started (no worker), so both sides see the same rows.

Must never happen: through an agent a verb prints something else than on the installation
itself (table or JSON), or a refused start or cancel creates or changes a run."""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.utils import timezone

from limits import cli, services
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.models import QueueEntry
from stackbone.models import Run
from tests.api.conftest import operator, reader
from tests.api.test_runs import run_operator
from tests.cli.conftest import closed_port, write_agents
from tests.factories import declare

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_worker")]


@dataclass
class Result:
    code: int
    out: str
    err: str


def runs(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main(list(argv), streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return Result(code, out.getvalue(), err.getvalue())


def make_run(workflow: str = "place_call", status: str = "pending", *, seconds_ago: int = 0, **fields: object) -> Run:
    now = timezone.now() - dt.timedelta(seconds=seconds_ago)
    return Run.objects.create(workflow=workflow, status=status, created_at=now, updated_at=now, **fields)


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second installation: voice-calls (capacity 1, per key 1), and an agents file naming
    it with a token of a user who may start and cancel runs ("box"), a reader's ("reader"), a
    limits operator's ("ops": limits.operate_limit only), a wrong token ("forged") and an address
    where nothing listens ("down")."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m", "per_key": 1})
    agents = {
        "box": {"url": live_server.url, "token": run_operator()[1]},
        "reader": {"url": live_server.url + "/", "token": reader()[1]},
        "ops": {"url": live_server.url, "token": operator()[1]},
        "forged": {"url": live_server.url, "token": "sbk_forged"},
        "down": {"url": f"http://127.0.0.1:{closed_port()}", "token": "sbk_whatever"},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))


def test_start_through_an_agent_prints_the_id_and_creates_the_run_there(box) -> None:
    result = runs("start", "place_call", "--input", '{"call_id": "c-1"}', "--agent", "box")

    assert result.code == 0, result.err
    run = Run.objects.get()
    assert (run.workflow, run.input, run.status) == ("place_call", {"call_id": "c-1"}, "pending")
    assert result.out == f"{run.id}\n"
    assert result.err == f"started {run.id} (place_call): pending\n"


def test_start_with_a_key_and_limits_through_an_agent(box) -> None:
    first = runs("start", "export_report", "--limits", "voice-calls", "--key", "acme", "--agent", "box", "--json")
    second = runs("start", "export_report", "--limits", "voice-calls", "--key", "acme", "--agent", "box", "--json")

    assert (first.code, second.code) == (0, 0), (first.err, second.err)
    assert json.loads(first.out)["holding"] == ["voice-calls"]
    assert (json.loads(second.out)["status"], json.loads(second.out)["waiting_for"]) == ("queued", ["voice-calls"])
    assert [(run.concurrency_key, run.bounds) for run in Run.objects.all()] == [("acme", ["voice-calls"])] * 2
    assert json.loads(second.out) == json.loads(runs("list", "--json", "--rows", "1").out)["runs"][0]


def test_list_show_and_cancel_through_an_agent_print_what_they_print_locally(box, clock) -> None:
    """With the clock stopped, so that both sides read "20s ago" at the same moment."""
    done = make_run("export_report", "completed", seconds_ago=30, finished_at=timezone.now())
    holder = make_run(status="running", seconds_ago=20, started_at=timezone.now() - dt.timedelta(seconds=20))
    waiter = make_run(status="running", seconds_ago=10, concurrency_key="acme", input={"call_id": "c-2"})
    services.acquire("voice-calls", run_id=holder.id, key="acme", label="call-1")
    services.acquire("voice-calls", run_id=waiter.id, key="acme", label="call-2", timeout="1h")

    for argv in (
        ["list"],
        ["list", "--status", "completed"],
        ["list", "--workflow", "place_call"],
        ["list", "--waiting-for", "voice-calls"],
        ["list", "--key", "acme", "--rows", "1"],
        ["list", "--status", "failed"],
        ["show", waiter.id],
    ):
        local = runs(*argv)
        remote = runs(*argv, "--agent", "box")
        assert (remote.code, remote.err) == (0, ""), (argv, remote.err)
        assert remote.out == local.out, argv
        assert json.loads(runs(*argv, "--agent", "box", "--json").out) == json.loads(runs(*argv, "--json").out), argv
    cut = runs("list", "--key", "acme", "--rows", "1", "--agent", "box").out
    assert cut.endswith("… more runs: raise --rows (at most 1000) or filter\n")
    assert "  waits for: voice-calls (label call-2)" in runs("show", waiter.id, "--agent", "box").out

    cancelled = runs("cancel", waiter.id, "--agent", "box")

    assert cancelled.code == 0, cancelled.err
    assert cancelled.out == f"cancelled {waiter.id} (place_call): it left every queue and freed what ends with it\n"
    assert Run.objects.get(id=waiter.id).status == "cancelled"
    assert QueueEntry.objects.get(run_id=waiter.id).state == "cancelled"
    assert {run.id: run.status for run in Run.objects.exclude(id=waiter.id)} == {
        done.id: "completed",
        holder.id: "running",
    }


def test_cancelling_a_finished_or_unknown_run_through_an_agent_exits_1_and_changes_nothing(box) -> None:
    run = make_run(status="completed", finished_at=timezone.now())
    before = Run.objects.filter(id=run.id).values().get()

    finished = runs("cancel", run.id, "--agent", "box")
    finished_json = runs("cancel", run.id, "--agent", "box", "--json")
    unknown = runs("cancel", "run_nope", "--agent", "box", "--json")

    assert (finished.code, finished.err) == (
        1,
        f"error: {run.id} had already finished (completed): nothing cancelled\n",
    )
    assert json.loads(finished_json.out) == json.loads(runs("cancel", run.id, "--json").out)
    assert (unknown.code, json.loads(unknown.out)) == (1, {"cancelled": False, "reason": "unknown"})
    assert json.loads(unknown.err) == {"error": "unknown run 'run_nope'", "field": "run"}
    assert runs("show", "run_nope", "--agent", "box").err == "error: unknown run 'run_nope'\n"
    assert Run.objects.filter(id=run.id).values().get() == before


@pytest.mark.parametrize(
    ("argv", "field", "message"),
    [
        (["start", "nope"], "workflow", "unknown workflow 'nope' (known: "),
        (["start", "place_call", "--key", "acme"], "key", "caps no runs"),
        (["start", "place_call", "--limits", "nope"], "limits", "unknown limit 'nope'"),
        (["start", "place_call", "--input", "[1]"], "input", "input must be a JSON object"),  # checked before asking
        (["start", "place_call", "--input", '{"a": NaN}'], "input", "are not JSON numbers"),  # the agent refuses it
        (["list", "--status", "done"], "status", "status must be one of"),
        (["list", "--rows", "0"], "rows", "--rows must be a whole number from 1 to 1000"),
    ],
)
def test_a_bad_value_through_an_agent_is_exit_2_naming_the_field_and_creates_nothing(box, argv, field, message) -> None:
    text = runs(*argv, "--agent", "box")
    as_json = runs(*argv, "--agent", "box", "--json")

    assert (text.code, as_json.code) == (2, 2)
    assert text.err.startswith("error: ") and message in text.err and text.err.count("\n") == 1
    assert json.loads(as_json.err)["field"] == field
    assert not Run.objects.exists()


def test_without_change_run_an_agent_lists_and_shows_but_starts_and_cancels_nothing(box) -> None:
    run = make_run()
    for agent in ("reader", "ops"):
        assert runs("list", "--agent", agent).code == 0
        assert runs("show", run.id, "--agent", agent).code == 0
        started = runs("start", "place_call", "--agent", agent)
        cancelled = runs("cancel", run.id, "--agent", agent)
        assert (started.code, cancelled.code) == (2, 2)
        assert f"error: agent '{agent}'" in started.err and "may not start or cancel runs" in started.err
    assert list(Run.objects.values_list("id", "status")) == [(run.id, "pending")]


def test_a_bad_token_an_unreachable_or_an_empty_agent_is_one_line(box) -> None:
    forged = runs("list", "--agent", "forged")
    down = runs("list", "--agent", "down")
    empty = runs("start", "place_call", "--agent", "", "--json")

    assert forged.code == 2 and "refused the token" in forged.err
    assert down.code == 1 and down.err.startswith("error: cannot reach agent 'down'")
    assert (empty.code, json.loads(empty.err)["field"]) == (2, "agent")
    assert not Run.objects.exists()


def test_the_console_script_with_an_agent_needs_no_local_settings(box) -> None:
    """The real `stackbone` process: with --agent it never sets Django up here, so settings that
    would stop a local verb (a DEBUG that is not a boolean) do not matter."""
    from tests.cli.test_script import stackbone

    broken = {"DEBUG": "maybe"}
    local = stackbone("runs", "list", env=broken)
    started = stackbone("runs", "start", "place_call", "--input", '{"call_id": "c-1"}', "--agent", "box", env=broken)
    listed = stackbone("runs", "list", "--agent", "box", "--json", env=broken)

    assert local.returncode == 2 and "settings are wrong" in local.stderr
    assert started.returncode == 0, started.stderr
    assert started.stdout == f"{Run.objects.get().id}\n"
    assert [run["id"] for run in json.loads(listed.stdout)["runs"]] == [Run.objects.get().id]
