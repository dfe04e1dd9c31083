"""`stackbone runs` as a user runs it: a real process that sets Django up itself, acts on the
database, exits with the documented codes, and prints an error as one line (JSON with --json),
never a traceback; a refused start creates nothing."""

from __future__ import annotations

import json

import pytest

from stackbone.models import Run
from tests.cli.test_script import assert_one_clean_line, database_url_of_the_tests, stackbone

pytestmark = pytest.mark.django_db(transaction=True)


def env() -> dict[str, str]:
    return {"DATABASE_URL": database_url_of_the_tests()}


def test_start_list_show_and_cancel_through_the_console_script() -> None:
    started = stackbone("runs", "start", "place_call", "--input", '{"call_id": "c-1"}', "--json", env=env())
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["id"]
    assert Run.objects.get(id=run_id).input == {"call_id": "c-1"}

    listed = stackbone("runs", "list", "--workflow", "place_call", "--json", env=env())
    assert listed.returncode == 0, listed.stderr
    assert [run["id"] for run in json.loads(listed.stdout)["runs"]] == [run_id]

    shown = stackbone("runs", "show", run_id, env=env())
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"{run_id}  place_call  ")

    cancelled = stackbone("runs", "cancel", run_id, env=env())
    assert cancelled.returncode == 0, cancelled.stderr
    assert Run.objects.get(id=run_id).status == "cancelled"

    again = stackbone("runs", "cancel", run_id, env=env())
    assert again.returncode == 1
    assert_one_clean_line(again)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["start", "no_such_flow"], "workflow"),
        (["start", "place_call", "--input", "{not json"], "input"),
        (["start", "place_call", "--input", "[]"], "input"),
        (["start", "place_call", "--key", "acme"], "key"),
    ],
)
def test_a_refused_start_is_one_line_exit_2_json_with_json_and_creates_nothing(argv: list[str], field: str) -> None:
    plain = stackbone("runs", *argv, env=env())
    as_json = stackbone("runs", *argv, "--json", env=env())

    assert plain.returncode == 2
    assert_one_clean_line(plain)
    assert as_json.returncode == 2
    assert as_json.stdout == ""
    assert as_json.stderr.count("\n") == 1
    assert json.loads(as_json.stderr)["field"] == field
    assert not Run.objects.exists()


def test_show_of_an_unknown_run_exits_1() -> None:
    result = stackbone("runs", "show", "run_nope", env=env())
    assert result.returncode == 1
    assert_one_clean_line(result)


@pytest.mark.one_database  # never reaches the configured database (tests/conftest.py)
def test_runs_help_lists_the_verbs_and_bad_usage_exits_2() -> None:
    result = stackbone("runs", "--help")
    assert result.returncode == 0
    for verb in ("start", "list", "show", "cancel"):
        assert verb in result.stdout
    assert stackbone("runs").returncode == 2
    assert stackbone("runs", "start").returncode == 2


def test_start_prints_only_the_run_id_on_stdout_so_a_shell_can_keep_it() -> None:
    """`R=$(stackbone runs start ...)` holds the id and nothing else; the human line goes to stderr."""
    result = stackbone("runs", "start", "place_call", "--input", '{"call_id": "c-9"}', env=env())

    assert result.returncode == 0, result.stderr
    run = Run.objects.get()
    assert result.stdout == f"{run.id}\n"
    assert result.stderr == f"started {run.id} (place_call): pending\n"
