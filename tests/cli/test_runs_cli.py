"""`stackbone runs start|list|show|cancel` in-process: what each verb prints (table and JSON), its
exit code (0 done, 1 not found or nothing cancelled, 2 bad usage or value), and that a refused
start or cancel changes nothing. The console script itself: tests/cli/test_runs_script.py."""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass

import pytest
from django.utils import timezone

from limits import services
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.models import QueueEntry
from limits.runs import bounds as run_bounds
from limits.runs import listing
from stackbone.models import Run
from tests.factories import declare

pytestmark = pytest.mark.django_db

SUMMARY_KEYS = {
    "id",
    "workflow",
    "status",
    "key",
    "keys",
    "reference",
    "suspended",
    "created_at",
    "started_at",
    "finished_at",
    "duration_ms",
    "waiting_for",
    "holding",
    "labels",
    "end_reason",
    "end_reason_text",
    "end_limit",
    "caused_by",
}


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


def assert_one_error_line(result: Result, code: int, *, contains: str) -> None:
    assert result.code == code, (result.out, result.err)
    assert result.err.count("\n") == 1 and result.err.startswith("error: "), result.err
    assert contains in result.err, result.err
    assert "Traceback" not in result.err


def json_error(result: Result) -> dict[str, object]:
    assert result.err.count("\n") == 1, result.err
    error: dict[str, object] = json.loads(result.err)
    assert set(error) == {"error", "field"}
    return error


# --- start --------------------------------------------------------------------------------------


def test_start_creates_a_run_with_the_input_and_prints_its_id() -> None:
    result = runs("start", "place_call", "--input", '{"call_id": "c-1"}')

    assert result.code == 0, result.err
    run = Run.objects.get()
    assert (run.workflow, run.input, run.status) == ("place_call", {"call_id": "c-1"}, "pending")
    assert result.out == f"{run.id}\n"
    assert result.err == f"started {run.id} (place_call): pending\n"


def test_start_without_input_gives_the_run_an_empty_object() -> None:
    assert runs("start", "export_report").code == 0
    assert Run.objects.get().input == {}


def test_start_json_prints_the_run_summary() -> None:
    result = runs("start", "place_call", "--input", '{"call_id": "c-2"}', "--json")

    assert result.code == 0, result.err
    answer = json.loads(result.out)
    assert set(answer) == SUMMARY_KEYS
    assert (answer["id"], answer["workflow"], answer["status"], answer["key"]) == (
        Run.objects.get().id,
        "place_call",
        "pending",
        "",
    )


def test_the_key_is_the_runs_concurrency_key() -> None:
    run_bounds.sync(["sync_tenant"])
    first = runs("start", "sync_tenant", "--input", '{"tenant": "acme"}', "--key", "acme", "--json")
    second = runs("start", "sync_tenant", "--input", '{"tenant": "acme"}', "--key", "acme", "--json")

    assert (first.code, second.code) == (0, 0), (first.err, second.err)
    assert [run.concurrency_key for run in Run.objects.all()] == ["acme", "acme"]
    assert json.loads(first.out)["key"] == "acme"
    # sync_tenant runs one at a time per tenant: the second waits for acme's pool.
    assert json.loads(second.out)["status"] == "queued"
    assert json.loads(second.out)["waiting_for"] == ["workflow.sync_tenant"]


def test_limits_are_the_named_limits_the_run_holds_instead_of_the_workflows() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    first = runs("start", "export_report", "--limits", "voice-calls", "--json")
    second = runs("start", "export_report", "--limits", " voice-calls ", "--key", "acme", "--json")

    assert (first.code, second.code) == (0, 0), (first.err, second.err)
    assert json.loads(first.out)["holding"] == ["voice-calls"]
    assert (json.loads(second.out)["status"], json.loads(second.out)["waiting_for"]) == ("queued", ["voice-calls"])
    assert [run.bounds for run in Run.objects.all()] == [["voice-calls"], ["voice-calls"]]


BAD_STARTS = [
    pytest.param(
        ["start", "no_such_flow"], "workflow", "unknown workflow 'no_such_flow' (known: ", id="unknown-workflow"
    ),
    pytest.param(["start", "place_call", "--input", '{"call_id": '], "input", "input is not valid JSON", id="bad-json"),
    pytest.param(["start", "place_call", "--input", "[1, 2]"], "input", "input must be a JSON object", id="a-list"),
    pytest.param(["start", "place_call", "--input", '"text"'], "input", "not a string", id="a-string"),
    pytest.param(["start", "place_call", "--input", "null"], "input", "not null", id="null"),
    pytest.param(["start", "place_call", "--key", "acme"], "key", "caps no runs", id="key-without-bounds"),
    pytest.param(["start", "sync_tenant", "--key", "a\x1bb"], "key", "control characters", id="control-key"),
    pytest.param(["start", "sync_tenant", "--key", "k" * 129], "key", "1 to 128 characters", id="long-key"),
    pytest.param(["start", "place_call", "--limits", "nope"], "limits", "unknown limit 'nope'", id="unknown-limit"),
    pytest.param(["start", "place_call", "--limits", "a,b,c"], "limits", "at most 2 named limits", id="three-limits"),
    # JSON that Python reads and PostgreSQL's jsonb refuses: refused on every database.
    *(
        pytest.param(["start", "place_call", "--input", text], "input", message, id=name)
        for name, text, message in [
            ("nan", '{"a": NaN}', "are not JSON numbers"),
            ("infinity", '{"a": -Infinity}', "are not JSON numbers"),
            ("1e999", '{"a": 1e999}', "are not JSON numbers"),
            ("nul", '{"a": "\\u0000"}', "must not contain the NUL character"),
            ("lone-surrogate", '{"a": "\\ud800"}', "must not contain a lone surrogate"),
            ("deep", '{"a": ' + "[" * 30_000 + "]" * 30_000 + "}", "input is nested too deeply"),
        ]
    ),
]


@pytest.mark.parametrize(("argv", "field", "message"), BAD_STARTS)
def test_a_bad_start_is_one_line_exit_2_and_creates_nothing(argv: list[str], field: str, message: str) -> None:
    run_bounds.sync(["sync_tenant"])
    result = runs(*argv)

    assert_one_error_line(result, 2, contains=message)
    assert result.out == ""
    assert not Run.objects.exists()
    assert not QueueEntry.objects.exists()


@pytest.mark.parametrize(("argv", "field", "message"), BAD_STARTS)
def test_with_json_a_bad_starts_error_is_json_on_stderr_naming_the_field(
    argv: list[str], field: str, message: str
) -> None:
    run_bounds.sync(["sync_tenant"])
    result = runs(*argv, "--json")

    assert result.code == 2
    error = json_error(result)
    assert error["field"] == field
    assert message in str(error["error"])
    assert not Run.objects.exists()


def test_the_unknown_workflow_message_lists_the_known_ones() -> None:
    result = runs("start", "nope")
    for name in ("place_call", "sync_tenant", "export_report"):
        assert name in result.err


@pytest.mark.django_db(transaction=True)  # the live server reads committed rows
@pytest.mark.usefixtures("no_worker")
def test_agent_runs_each_verb_on_another_installation(live_server, tmp_path, monkeypatch) -> None:
    """Issue 29: `--agent` starts, lists, shows and cancels runs over the other installation's
    /api/runs/ (it was "not supported yet"); tests/cli/test_runs_agent.py has the rest."""
    from limits.cli import AGENTS_FILE_ENV
    from tests.api.test_runs import run_operator
    from tests.cli.conftest import write_agents

    agents = write_agents(tmp_path / "agents.toml", {"prod": {"url": live_server.url, "token": run_operator()[1]}})
    monkeypatch.setenv(AGENTS_FILE_ENV, str(agents))

    started = runs("start", "place_call", "--input", '{"call_id": "c-1"}', "--agent", "prod")
    run_id = started.out.strip()
    listed = json.loads(runs("list", "--agent", "prod", "--json").out)
    shown = json.loads(runs("show", run_id, "--agent", "prod", "--json").out)
    cancelled = runs("cancel", run_id, "--agent", "prod")

    assert started.code == 0, started.err
    assert Run.objects.get().id == run_id
    assert [run["id"] for run in listed["runs"]] == [run_id]
    assert (shown["input"], shown["status"]) == ({"call_id": "c-1"}, "pending")
    assert cancelled.code == 0, cancelled.err
    assert Run.objects.get().status == "cancelled"
    assert json_error(runs("list", "--agent", "", "--json"))["field"] == "agent"


# --- list ---------------------------------------------------------------------------------------


def test_list_shows_runs_newest_first_with_what_they_wait_for_and_hold() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    old = make_run(seconds_ago=30)
    holder = make_run(seconds_ago=20, status="running")
    waiter = make_run(seconds_ago=10, status="running")
    services.acquire("voice-calls", run_id=holder.id, label="call-1")
    services.acquire("voice-calls", run_id=waiter.id, label="call-2", timeout="1h")

    result = runs("list")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["RUN", "WORKFLOW", "STATUS", "KEY", "CREATED", "STARTED", "DURATION", "LIMITS"]
    assert [line.split()[0] for line in lines[1:]] == [waiter.id, holder.id, old.id]
    assert lines[1].endswith("waits voice-calls")
    assert lines[2].endswith("holds voice-calls")


def test_list_json_has_one_summary_per_run_and_says_if_there_are_more() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    made = [make_run(seconds_ago=10 - n) for n in range(3)]
    services.acquire("voice-calls", run_id=made[0].id, label="call-0")

    result = runs("list", "--json", "--rows", "2")

    answer = json.loads(result.out)
    assert set(answer) == {"runs", "more"}
    assert answer["more"] is True
    assert [run["id"] for run in answer["runs"]] == [made[2].id, made[1].id]
    assert all(set(run) == SUMMARY_KEYS for run in answer["runs"])
    everything = json.loads(runs("list", "--json").out)
    assert everything["more"] is False
    assert everything["runs"][-1]["holding"] == ["voice-calls"] and everything["runs"][-1]["labels"] == ["call-0"]


def test_list_filters_by_status_workflow_and_the_limit_runs_wait_for() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"}, partner_api={"capacity": 1, "max_hold": "10m"})
    done = make_run("export_report", "completed", seconds_ago=5)
    running = make_run("place_call", "running", seconds_ago=4)
    waiting = make_run("place_call", "running", seconds_ago=3)
    services.acquire("voice-calls", run_id=running.id)
    services.acquire("voice-calls", run_id=waiting.id, timeout="1h")

    def ids(*argv: str) -> list[str]:
        result = runs("list", "--json", *argv)
        assert result.code == 0, result.err
        return [run["id"] for run in json.loads(result.out)["runs"]]

    assert ids("--status", "completed") == [done.id]
    assert ids("--workflow", "place_call") == [waiting.id, running.id]
    assert ids("--limit", "voice-calls") == [waiting.id]  # the issue's `--limit L`: the limit runs wait for
    assert ids("--limit", "partner-api") == []
    assert ids("--waiting-for", "voice-calls") == [waiting.id]  # the same, by its other name
    assert ids("--limit", "voice-calls", "--rows", "1", "--status", "running") == [waiting.id]
    assert ids("--status", "running", "--workflow", "export_report") == []


@pytest.mark.parametrize(
    ("argv", "field", "message"),
    [
        (["--status", "done"], "status", "status must be one of queued, pending, running"),
        (["--rows", "0"], "rows", "--rows must be a whole number from 1 to 1000, not '0'"),
        (["--rows", "1001"], "rows", "not '1001'"),
        (["--rows", "ten"], "rows", "not 'ten'"),
    ],
)
def test_a_bad_list_filter_is_exit_2(argv: list[str], field: str, message: str) -> None:
    assert_one_error_line(runs("list", *argv), 2, contains=message)
    assert json_error(runs("list", *argv, "--json"))["field"] == field


def test_list_without_runs_says_so() -> None:
    assert runs("list").out == "no runs yet\n"
    assert runs("list", "--status", "failed").out == "no runs match\n"


# --- show ---------------------------------------------------------------------------------------


def test_show_prints_the_run_its_waits_and_steps() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    holder = make_run(status="running")
    run = make_run(status="running", input={"call_id": "c-9"})
    services.acquire("voice-calls", run_id=holder.id)
    services.acquire("voice-calls", run_id=run.id, label="c-9", timeout="1h")
    run.step_records.create(seq=1, name="Esperando hueco · voice-calls", kind="hook", status="waiting",
                            started_at=timezone.now())  # fmt: skip

    text = runs("show", run.id)
    details = json.loads(runs("show", run.id, "--json").out)

    assert text.code == 0, text.err
    assert text.out.splitlines()[0] == f"{run.id}  place_call  running"
    assert '  input:     {"call_id": "c-9"}' in text.out
    assert "  waits for: voice-calls (label c-9): the limit is full" in text.out  # SPEC 6.5
    assert "Esperando hueco · voice-calls" in text.out
    assert set(details) == SUMMARY_KEYS | {"input", "output", "error", "starts_at", "waits", "slots", "steps"}
    assert details["input"] == {"call_id": "c-9"}
    assert [wait["limit"] for wait in details["waits"]] == ["voice-calls"]
    assert details["waits"][0]["reason"] == {"code": "limit_full", "text": "the limit is full", "limit": "voice-calls"}
    assert [step["name"] for step in details["steps"]] == ["Esperando hueco · voice-calls"]


def test_show_of_an_unknown_run_is_exit_1() -> None:
    assert_one_error_line(runs("show", "run_nope"), 1, contains="unknown run 'run_nope'")
    assert json_error(runs("show", "run_nope", "--json")) == {"error": "unknown run 'run_nope'", "field": "run"}


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_ends_the_run_and_takes_it_out_of_every_queue() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    holder = make_run(status="running")
    run = make_run(status="running")
    services.acquire("voice-calls", run_id=holder.id)
    services.acquire("voice-calls", run_id=run.id, timeout="1h")

    result = runs("cancel", run.id)

    assert result.code == 0, result.err
    assert result.out.startswith(f"cancelled {run.id} (place_call)")
    assert Run.objects.get(id=run.id).status == "cancelled"
    assert QueueEntry.objects.get(run_id=run.id).state == "cancelled"
    assert Run.objects.get(id=holder.id).status == "running"


def test_cancel_json_says_what_happened() -> None:
    run = make_run()
    first = runs("cancel", run.id, "--json")
    again = runs("cancel", run.id, "--json")
    unknown = runs("cancel", "run_nope", "--json")

    assert (first.code, json.loads(first.out)) == (0, {"cancelled": True, "id": run.id, "status": "cancelled"})
    assert again.code == 1
    assert json.loads(again.out) == {
        "cancelled": False,
        "id": run.id,
        "status": "cancelled",
        "reason": "already finished",
    }
    assert json_error(again)["field"] == "run"
    assert unknown.code == 1
    assert json.loads(unknown.out) == {"cancelled": False, "reason": "unknown"}
    assert json_error(unknown)["error"] == "unknown run 'run_nope'"


def test_cancelling_a_finished_run_changes_nothing() -> None:
    run = make_run(status="completed", finished_at=timezone.now())
    before = Run.objects.filter(id=run.id).values().get()

    result = runs("cancel", run.id)

    assert_one_error_line(result, 1, contains=f"{run.id} had already finished (completed): nothing cancelled")
    assert Run.objects.filter(id=run.id).values().get() == before


def test_a_nul_or_non_utf8_in_a_run_id_is_unknown_not_a_crash() -> None:
    for run_id in ("run_\x00x", "run_\udcff"):  # a non-UTF-8 argument arrives with lone surrogates
        assert_one_error_line(runs("show", run_id), 1, contains="unknown run")
        assert_one_error_line(runs("cancel", run_id), 1, contains="unknown run")


def test_non_utf8_input_is_refused_and_creates_nothing() -> None:
    assert_one_error_line(runs("start", "place_call", "--input", '{"call_id": "\udcff"}'), 2, contains="UTF-8")
    assert not Run.objects.exists()


def test_the_runs_of_the_list_are_those_of_run_list() -> None:
    """The CLI and the Runs screen read the same way: one page of listing.runs_page."""
    made = [make_run(seconds_ago=5 - n) for n in range(3)]
    page = listing.runs_page(listing.RunFilter(), size=2)
    assert [row.run.id for row in page.rows] == [
        run["id"] for run in json.loads(runs("list", "--json", "--rows", "2").out)["runs"]
    ]
    assert [row.run.id for row in page.rows] == [made[2].id, made[1].id]


def test_list_filters_by_key_and_shows_the_key_of_every_acquisition() -> None:
    """Issue 30: a run that took a key inside its body (with_limit, acquire_slot) shows it, and
    --key finds it, as it finds a run by its concurrency key."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m", "per_key": 1})
    run_bounds.sync(["sync_tenant"])
    synced = make_run("sync_tenant", "completed", seconds_ago=30, concurrency_key="acme")
    holder = make_run(seconds_ago=20, status="running")
    other = make_run(seconds_ago=10, status="running")
    services.acquire("voice-calls", run_id=holder.id, key="acme")
    services.acquire("voice-calls", run_id=other.id, key="globex")

    result = runs("list", "--key", "acme")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == [holder.id, synced.id]
    assert all(line.split()[3] == "acme" for line in lines[1:])
    answer = json.loads(runs("list", "--json").out)["runs"]
    assert [run["keys"] for run in answer] == [["globex"], ["acme"], ["acme"]]
    assert [run["key"] for run in answer] == ["", "", "acme"]  # the concurrency key, as before
    assert_one_error_line(runs("list", "--key", "k" * 129), 2, contains="key must be a string of 1 to 128")


def test_list_shows_started_and_duration() -> None:
    now = timezone.now()
    make_run(
        "export_report",
        "completed",
        seconds_ago=100,
        started_at=now - dt.timedelta(seconds=90),
        finished_at=now - dt.timedelta(seconds=30),
    )
    result = runs("list")
    header, row = result.out.splitlines()[:2]
    assert header.split() == ["RUN", "WORKFLOW", "STATUS", "KEY", "CREATED", "STARTED", "DURATION", "LIMITS"]
    assert "  1m 40s ago  1m 30s ago  1m  " in row  # created, started, ran for a minute
    assert json.loads(runs("list", "--json").out)["runs"][0]["duration_ms"] == 60_000
