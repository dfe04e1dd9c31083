"""Issue 44: `stackbone runs start <workflow> --from FILE` starts a batch (limits.runs.start_runs,
one transaction, the file's order) on this installation and, with `--agent`, on another one
through its `POST /api/runs/` with `runs` (a live server, as tests/cli/test_runs_agent.py).

Must never happen: a batch partly written (a bad line refuses it whole); a refusal that does not
name the line; ids printed in another order than the file's."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from limits import cli
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.models import QueueEntry
from limits.runs import bounds as run_bounds
from limits.runs.values import MAX_BATCH_SIZE
from stackbone.models import Run
from tests.api.test_runs import run_operator
from tests.cli.conftest import Result, write_agents

pytestmark = pytest.mark.usefixtures("no_worker")

# Line 2 is blank (skipped); the runs are lines 1, 3 and 4.
BATCH = (
    '{"input": {"tenant": "acme", "n": 0}, "key": "acme"}\n\n{"input": {"n": 1}, "key": "globex"}\n{"key": "acme"}\n'
)


def runs(*argv: str, stdin: str = "") -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main(list(argv), streams=Streams(stdin=io.StringIO(stdin), stdout=out, stderr=err))
    return Result(code, out.getvalue(), err.getvalue())


def assert_started_in_order(result: Result) -> list[str]:
    """The ids printed are the batch's runs, in the file's order, with each line's input and key."""
    assert result.code == 0, result.err
    ids = result.out.splitlines()
    rows = Run.objects.in_bulk(ids)
    assert [(rows[i].input, rows[i].concurrency_key, rows[i].status) for i in ids] == [
        ({"tenant": "acme", "n": 0}, "acme", "pending"),
        ({"n": 1}, "globex", "pending"),
        ({}, "acme", "queued"),  # acme's pool (per key 1) is full: it waits, after the first
    ]
    assert result.err == "started 3 runs (sync_tenant): 2 pending, 1 queued\n"
    return ids


@pytest.mark.django_db
def test_from_a_file_or_stdin_starts_the_batch_and_prints_the_ids_in_order(tmp_path: Path) -> None:
    run_bounds.sync(["sync_tenant"])
    (tmp_path / "runs.jsonl").write_text(BATCH)

    assert_started_in_order(runs("start", "sync_tenant", "--from", str(tmp_path / "runs.jsonl")))
    piped = runs("start", "sync_tenant", "--from", "-", "--json", stdin='{"key": "initech"}\n{}')

    assert piped.code == 0, piped.err
    answer = json.loads(piped.out)["runs"]
    assert [(run["key"], run["status"]) for run in answer] == [("initech", "pending"), ("", "pending")]
    rows = Run.objects.in_bulk([run["id"] for run in answer])
    assert [rows[run["id"]].concurrency_key for run in answer] == ["initech", ""]


@pytest.mark.django_db
def test_a_bad_line_or_batch_refuses_it_all_naming_the_line(tmp_path: Path) -> None:
    run_bounds.sync(["sync_tenant"])
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "acme"}\n\n{"input": {"n": 1}}\n{"input": [1]}\n')

    bad = runs("start", "sync_tenant", "--from", str(path))
    as_json = runs("start", "sync_tenant", "--from", str(path), "--json")
    unstorable = runs("start", "sync_tenant", "--from", "-", stdin='{}\n{"input": {"t": "a\\u0000"}}')
    both = runs("start", "sync_tenant", "--from", str(path), "--key", "acme")
    too_many = runs("start", "sync_tenant", "--from", "-", stdin="{}\n" * (MAX_BATCH_SIZE + 1))
    missing = runs("start", "sync_tenant", "--from", str(tmp_path / "nope.jsonl"))

    assert (bad.code, bad.out, bad.err) == (
        2,
        "",
        f"error: {path} line 4: input must be a JSON object ({{...}}), not a list\n",
    )
    assert json.loads(as_json.err) == {
        "error": f"{path} line 4: input must be a JSON object ({{...}}), not a list",
        "field": "runs[2].input",
    }
    assert unstorable.code == 2 and unstorable.err.startswith("error: stdin line 2: input must be JSON-serializable")
    assert (both.code, both.err) == (2, "error: --from takes each run's input and key from the file: leave out --key\n")
    assert too_many.code == 2 and f"a batch holds at most {MAX_BATCH_SIZE} runs" in too_many.err
    assert missing.code == 2 and missing.err.startswith(f"error: --from {tmp_path / 'nope.jsonl'}: cannot read it")
    assert not Run.objects.exists() and not QueueEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_from_a_file_through_an_agent_starts_the_batch_there_or_refuses_it_naming_the_line(
    live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_bounds.sync(["sync_tenant"])
    agents = write_agents(tmp_path / "agents.toml", {"box": {"url": live_server.url, "token": run_operator()[1]}})
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(agents))
    (tmp_path / "runs.jsonl").write_text(BATCH)
    # Line 3 passes this side's checks (an object, a string key); the installation refuses its key.
    (tmp_path / "bad.jsonl").write_text('{"key": "acme"}\n{}\n{"key": "a\\u0007"}\n')

    bad = runs("start", "sync_tenant", "--from", str(tmp_path / "bad.jsonl"), "--agent", "box", "--json")

    assert bad.code == 2, bad.err
    assert json.loads(bad.err) == {
        "error": f"{tmp_path / 'bad.jsonl'} line 3: key must not contain control characters",
        "field": "runs[2].key",
    }
    assert not Run.objects.exists()
    assert_started_in_order(runs("start", "sync_tenant", "--from", str(tmp_path / "runs.jsonl"), "--agent", "box"))
