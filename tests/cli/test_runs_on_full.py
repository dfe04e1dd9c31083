"""SPEC 14.1, 14.2, 14.5, 14.6 through `stackbone runs start --on-full` (issue 47), on this
installation and with `--agent` on another (a live server, its POST /api/runs/): one start or a
`--from` batch chooses on_full as start_run(on_full=) does; a skipped run is not an error (it was
created and ended at once): exit 0, its id on stdout, its status and why on stderr, and in the
`--json` answer; a bad value is one line on stderr naming it, exit 2, nothing written. Both
databases.

Must never happen: a refused start writes a row; a skipped run is told as started or queued."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from limits import cli
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.models import Limit, QueueEntry
from limits.runs import workflow
from stackbone.models import Run
from tests.api.test_runs import run_operator
from tests.cli.conftest import Result, write_agents

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_worker")]

WAITS = "test_cli_on_full_waits"
CAPPED = "test_cli_on_full_capped"
BOUND = f"workflow.{WAITS}"


@workflow(name=WAITS, concurrency={"total": 1})
def waits(input: dict) -> None:
    return None


@workflow(name=CAPPED, concurrency={"total": 1, "max_waiting": 1})
def capped(input: dict) -> None:
    return None


def runs(*argv: str, stdin: str = "") -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main(list(argv), streams=Streams(stdin=io.StringIO(stdin), stdout=out, stderr=err))
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture(params=["here", "agent"])
def where(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The options that pick the installation: this one, or another through `--agent`."""
    if request.param == "here":
        return []
    live_server = request.getfixturevalue("live_server")
    agents = write_agents(tmp_path / "agents.toml", {"box": {"url": live_server.url, "token": run_operator()[1]}})
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(agents))
    return ["--agent", "box"]


def rows() -> tuple[list[tuple[str, str]], int, list[str]]:
    return (
        sorted(Run.objects.values_list("id", "status")),
        QueueEntry.objects.count(),
        sorted(Limit.objects.values_list("name", flat=True)),
    )


def test_a_start_with_on_full_skip_says_skipped_and_why(where: list[str]) -> None:
    holder = runs("start", WAITS, *where)
    skipped = runs("start", WAITS, "--on-full", "skip", *where)
    waiting = runs("start", WAITS, "--on-full", "wait", "--json", *where)

    assert (holder.code, skipped.code, waiting.code) == (0, 0, 0), (holder.err, skipped.err, waiting.err)
    run_id = skipped.out.strip()
    assert skipped.err == f"started {run_id} ({WAITS}): skipped, never started: the limit is full ({BOUND})\n"
    assert holder.err == f"started {holder.out.strip()} ({WAITS}): pending\n"
    row = Run.objects.get(id=run_id)
    assert (row.status, row.end_reason, row.end_limit) == ("skipped", "limit_full", BOUND)
    assert not QueueEntry.objects.filter(run_id=run_id).exists()
    assert json.loads(waiting.out)["status"] == "queued"

    as_json = runs("start", WAITS, "--on-full", "skip", "--json", *where)
    answer = json.loads(as_json.out)
    assert (answer["status"], answer["end_reason"], answer["end_reason_text"], answer["end_limit"]) == (
        "skipped",
        "limit_full",
        "the limit is full",
        BOUND,
    )
    assert Run.objects.get(id=answer["id"]).status == "skipped"


def test_a_batch_from_a_file_with_on_full_skip_counts_the_skipped(where: list[str], tmp_path: Path) -> None:
    (tmp_path / "runs.jsonl").write_text('{"input": {"n": 0}}\n{"input": {"n": 1}}\n\n{"input": {"n": 2}}\n')

    result = runs("start", WAITS, "--from", str(tmp_path / "runs.jsonl"), "--on-full", "skip", *where)

    assert result.code == 0, result.err
    assert result.err == f"started 3 runs ({WAITS}): 1 pending, 2 skipped\n"
    ids = result.out.splitlines()
    found = Run.objects.in_bulk(ids)
    assert [(found[i].input, found[i].status, found[i].end_reason) for i in ids] == [
        ({"n": 0}, "pending", None),
        ({"n": 1}, "skipped", "limit_full"),
        ({"n": 2}, "skipped", "limit_full"),
    ]
    piped = runs("start", WAITS, "--from", "-", "--on-full", "skip", "--json", *where, stdin="{}\n")
    [answer] = json.loads(piped.out)["runs"]
    assert (answer["status"], answer["end_reason"], answer["end_limit"]) == ("skipped", "limit_full", BOUND)


def test_a_queue_at_its_cap_answers_the_start_skipped(where: list[str]) -> None:
    told = [runs("start", CAPPED, *where).err for _ in range(3)]

    assert [line.rsplit(": ", 1)[-1] for line in told[:2]] == ["pending\n", "queued\n"]
    assert told[2].endswith(f"): skipped, never started: the queue is full (workflow.{CAPPED})\n")


@pytest.mark.parametrize("value", ["drop", "", "Skip"])
def test_a_bad_on_full_is_one_line_naming_it_and_nothing_is_written(
    where: list[str], tmp_path: Path, value: str
) -> None:
    assert runs("start", WAITS, *where).code == 0
    before = rows()
    (tmp_path / "runs.jsonl").write_text("{}\n{}\n")

    one = runs("start", WAITS, "--on-full", value, *where)
    batch = runs("start", WAITS, "--from", str(tmp_path / "runs.jsonl"), "--on-full", value, *where)
    as_json = runs("start", WAITS, "--on-full", value, "--json", *where)

    for result in (one, batch):
        assert (result.code, result.out) == (2, "")
        assert result.err.startswith(f"error: workflow {WAITS!r}: on_full must be one of ")
        assert result.err.endswith(f"not {value!r}\n") and result.err.count("\n") == 1
    assert as_json.code == 2 and json.loads(as_json.err)["field"] == "on_full"
    assert rows() == before
