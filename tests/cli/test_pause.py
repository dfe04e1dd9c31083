"""SPEC 5.6 and issue 30 on the CLI: `stackbone limits pause|resume <limit>` on this installation,
with their output, --json, exit codes and audit rows; `list` and `slots` show a paused limit.
No confirmation, like capacity: a pause takes no slot back, and resume undoes it at once."""

from __future__ import annotations

import getpass
import json

import pytest

from limits.models import AuditEvent, Limit
from limits.services import pause_limit
from tests.cli.conftest import run_cli
from tests.cli.test_script import assert_one_clean_line, database_url_of_the_tests, stackbone
from tests.factories import assert_counters_match_rows, holders, queue

pytestmark = pytest.mark.django_db

ACTOR = f"cli:{getpass.getuser()}"


def _pauses() -> list[tuple[str, str, str, str, str]]:
    return list(
        AuditEvent.objects.filter(action__in=["pause", "resume"])
        .order_by("id")
        .values_list("action", "limit__name", "actor", "old_value", "new_value")
    )


def test_pause_stops_grants_and_says_so_and_resume_grants_at_once(calls) -> None:
    result = run_cli("pause", "voice-calls")
    assert result.code == 0, result.err
    assert result.out == (
        "voice-calls: running → paused (grants nothing until `stackbone limits resume voice-calls`; "
        "2 in use stay, 2 waiting keep their places)\n"
    )
    assert run_cli("release", calls[0], "--yes").code == 0
    assert holders("voice-calls") == [("r2", "busy")]  # the freed slot went to nobody
    assert queue("voice-calls") == ["r3", "r4"]

    result = run_cli("resume", "voice-calls")
    assert result.code == 0, result.err
    assert result.out == "voice-calls: paused → running (2/2 in use, 1 waiting)\n"
    assert holders("voice-calls") == [("r2", "busy"), ("r3", "reserved")]
    assert _pauses() == [
        ("pause", "voice-calls", ACTOR, "running", "paused"),
        ("resume", "voice-calls", ACTOR, "paused", "running"),
    ]
    assert_counters_match_rows("voice-calls")


def test_a_second_pause_or_resume_says_nothing_changed_exits_0_and_records_nothing(calls) -> None:
    assert run_cli("resume", "voice-calls").out == "voice-calls was already running: nothing changed\n"
    run_cli("pause", "voice-calls")
    again = run_cli("pause", "voice-calls")
    assert (again.code, again.out, again.err) == (0, "voice-calls was already paused: nothing changed\n", "")
    assert [row[0] for row in _pauses()] == ["pause"]


def test_pause_and_resume_json_print_the_limit_as_in_list_with_paused(calls) -> None:
    paused = json.loads(run_cli("pause", "voice-calls", "--json").out)
    listed = {limit["name"]: limit for limit in json.loads(run_cli("list", "--json").out)}
    assert paused == listed["voice-calls"]
    assert paused["paused"] is True
    assert paused["paused_at"] == Limit.objects.get(name="voice-calls").paused_at.isoformat()
    assert (listed["partner-api"]["paused"], listed["partner-api"]["paused_at"]) == (False, None)
    resumed = json.loads(run_cli("resume", "voice-calls", "--json").out)
    assert (resumed["paused"], resumed["paused_at"]) == (False, None)


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_an_unknown_limit_is_one_line_exit_1_and_changes_nothing(calls, verb) -> None:
    result = run_cli(verb, "nope")
    assert (result.code, result.out, result.err) == (1, "", "error: unknown limit 'nope'\n")
    as_json = run_cli(verb, "nope", "--json")
    assert as_json.code == 1
    assert json.loads(as_json.err) == {"error": "unknown limit 'nope'", "field": "limit"}
    assert _pauses() == []
    assert not Limit.objects.filter(paused_at__isnull=False).exists()


@pytest.mark.parametrize("argv", [("pause",), ("resume",), ("pause", "voice-calls", "partner-api")])
def test_bad_usage_exits_2_and_changes_nothing(calls, argv, capsys) -> None:
    assert run_cli(*argv).code == 2
    assert "usage:" in capsys.readouterr().err
    assert _pauses() == []


def test_list_and_slots_show_a_paused_limit(calls) -> None:
    pause_limit("voice-calls", actor="test")
    rows = {line.split()[0]: line for line in run_cli("list").out.splitlines()[1:]}
    assert rows["voice-calls"].split()[1:3] == ["2/2", "2"]
    assert rows["voice-calls"].split()[4] == "paused"  # first in NOTES
    assert "paused" not in rows["partner-api"]
    header = run_cli("slots", "voice-calls").out.splitlines()[0]
    assert header == (
        "voice-calls: 2/2 in use, 2 waiting, max hold 45m "
        "(paused: grants nothing until resumed; waiting runs keep their places)"
    )
    assert "paused" not in run_cli("slots", "partner-api").out.splitlines()[0]


def test_the_management_command_pauses_too(calls) -> None:
    from django.core.management import call_command

    call_command("limits", "pause", "voice-calls")
    assert Limit.objects.get(name="voice-calls").paused
    call_command("limits", "resume", "voice-calls")
    assert not Limit.objects.get(name="voice-calls").paused


@pytest.mark.django_db(transaction=True)
def test_the_console_script_pauses_and_resumes_and_refuses_an_unknown_limit(calls) -> None:
    env = {"DATABASE_URL": database_url_of_the_tests()}
    paused = stackbone("limits", "pause", "voice-calls", env=env)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("voice-calls: running → paused")
    assert Limit.objects.get(name="voice-calls").paused
    listed = json.loads(stackbone("limits", "list", "--json", env=env).stdout)
    paused_names = {limit["name"] for limit in listed if limit["paused"]}
    assert paused_names == {"voice-calls"}
    unknown = stackbone("limits", "resume", "nope", env=env)
    assert unknown.returncode == 1
    assert_one_clean_line(unknown)
    assert Limit.objects.get(name="voice-calls").paused
    resumed = stackbone("limits", "resume", "voice-calls", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert not Limit.objects.get(name="voice-calls").paused
