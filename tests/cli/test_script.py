"""The `stackbone` console script as a user runs it: a real process that bootstraps Django
itself, exits with the documented codes, and never shows a traceback."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from limits.models import AuditEvent, Slot
from tests.cli.conftest import closed_port, write_agents

STACKBONE = Path(sys.executable).parent / "stackbone"


def stackbone(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STACKBONE), *argv],
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def database_url_of_the_tests() -> str:
    """A DATABASE_URL naming the test database, so a child process sees the committed test data."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = quote(settings["USER"] or "")
    password = f":{quote(settings['PASSWORD'])}" if settings.get("PASSWORD") else ""
    host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings['NAME']}"


def assert_one_clean_line(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ")


@pytest.mark.one_database  # never reaches the configured database (tests/conftest.py)
def test_the_console_script_is_installed() -> None:
    assert STACKBONE.exists(), "run `pip install -e .`: pyproject.toml declares stackbone = limits.cli.script:main"
    result = stackbone("limits", "--help")
    assert result.returncode == 0
    for verb in ("list", "slots", "release", "capacity", "max-hold"):
        assert verb in result.stdout


@pytest.mark.django_db(transaction=True)
def test_the_script_acts_on_the_local_database(calls) -> None:
    env = {"DATABASE_URL": database_url_of_the_tests()}
    listed = stackbone("limits", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert {limit["name"]: limit["busy"] for limit in json.loads(listed.stdout)}["voice-calls"] == 2
    released = stackbone("limits", "release", calls[0], "--yes", env=env)
    assert (released.returncode, released.stdout) == (0, f"released {calls[0]} of voice-calls (was busy, run r1)\n")
    assert Slot.objects.get(id=calls[0]).state == "released"
    assert AuditEvent.objects.get(action="release").actor == f"cli:{getpass.getuser()}"
    bad = stackbone("limits", "capacity", "voice-calls", "0", env=env)
    assert bad.returncode == 2
    assert_one_clean_line(bad)
    unknown = stackbone("limits", "slots", "nope", env=env)
    assert unknown.returncode == 1
    assert_one_clean_line(unknown)


@pytest.mark.django_db(transaction=True)
def test_release_without_yes_refuses_when_stdin_is_not_a_terminal(calls) -> None:
    result = stackbone("limits", "release", calls[0], env={"DATABASE_URL": database_url_of_the_tests()})
    assert result.returncode == 2
    assert_one_clean_line(result)
    assert Slot.objects.get(id=calls[0]).state == "busy"


@pytest.mark.one_database  # both databases named here, neither the configured one
@pytest.mark.parametrize(
    "database_url",
    [f"postgres://postgres@127.0.0.1:{closed_port()}/stackbone", "sqlite:////nonexistent-dir/stackbone.sqlite3"],
    ids=["postgres", "sqlite"],  # the same ids in every process that collects them (pytest-xdist)
)
def test_an_unreachable_database_is_one_line_and_exit_1(database_url: str) -> None:
    result = stackbone("limits", "list", env={"DATABASE_URL": database_url})
    assert result.returncode == 1
    assert_one_clean_line(result)
    assert "cannot use the database" in result.stderr


@pytest.mark.one_database  # never reaches the configured database (tests/conftest.py)
def test_bad_settings_are_one_line_and_exit_2() -> None:
    result = stackbone("limits", "list", env={"DEBUG": "maybe"})
    assert result.returncode == 2
    assert_one_clean_line(result)


@pytest.mark.one_database  # never reaches the configured database (tests/conftest.py)
def test_an_unreachable_agent_is_one_line_and_exit_1(tmp_path: Path) -> None:
    down = {"url": f"http://127.0.0.1:{closed_port()}", "token": "t"}
    agents = write_agents(tmp_path / "agents.toml", {"down": down})
    result = stackbone("limits", "list", "--agent", "down", env={"STACKBONE_AGENTS_FILE": str(agents)})
    assert result.returncode == 1
    assert_one_clean_line(result)
    assert "cannot reach agent 'down'" in result.stderr


@pytest.mark.one_database  # never reaches the configured database (tests/conftest.py)
def test_bad_usage_exits_2() -> None:
    assert stackbone().returncode == 2
    assert stackbone("limits", "capacity").returncode == 2


@pytest.mark.django_db(transaction=True)
def test_release_without_yes_asks_on_a_real_terminal(calls) -> None:
    import pty

    controller, terminal = pty.openpty()
    try:
        os.write(controller, b"y\n")
        result = subprocess.run(
            [str(STACKBONE), "limits", "release", calls[0]],
            env={**os.environ, "DATABASE_URL": database_url_of_the_tests()},
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(controller)
        os.close(terminal)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"Release {calls[0]} of voice-calls (busy, run r1, label call-1)? [y/N] ")
    assert Slot.objects.get(id=calls[0]).state == "released"


@pytest.mark.django_db(transaction=True)
def test_the_script_reads_a_negative_value_as_the_value_and_answers_json_errors_in_json(calls) -> None:
    """Issue 15, item 14, through the real console script: `-5s` was an unknown option."""
    env = {"DATABASE_URL": database_url_of_the_tests()}
    negative = stackbone("limits", "max-hold", "voice-calls", "-5s", env=env)
    assert negative.returncode == 2
    assert negative.stderr.startswith("error: max hold must be more than 0, not '-5s'"), negative.stderr
    in_json = stackbone("limits", "max-hold", "voice-calls", "45", "--json", env=env)
    assert (in_json.returncode, in_json.stdout) == (2, "")
    assert json.loads(in_json.stderr) == {"error": "max hold '45' needs a unit: 45s, 45m, 45h", "field": "max_hold"}
    usage = stackbone("limits", "capacity", "voice-calls", "--json", env=env)
    assert usage.returncode == 2
    assert json.loads(usage.stderr) == {
        "error": "stackbone limits capacity: the following arguments are required: value",
        "field": None,
    }
