"""SPEC 14.6 with `--agent <id>` (issue 47): `show`, `on-full` and `max-waiting` against a second
running installation (pytest-django's live_server) through the JSON API: the same output, --json
and exit codes as locally, audited as the token's owner; a token without the operate permission
changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limits import cli
from limits.models import AuditEvent, Limit
from tests.api.conftest import operator, reader
from tests.cli.conftest import run_cli, seed_when_full, write_agents

# one_database (tests/conftest.py): the CLI's HTTP client against a live server; the routes
# are proved on both databases by tests/api/test_on_full.py.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]

ACTIONS = ["on_full", "max_waiting", "max_waiting_key"]


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_when_full()
    agents = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url, "token": reader()[1]},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))


def _values(name: str) -> tuple[str, int | None, int | None]:
    limit = Limit.objects.get(name=name)
    return limit.on_full, limit.max_waiting, limit.max_waiting_per_key


@pytest.mark.parametrize(
    "argv", [("show", "partner-api"), ("show", "report-exports"), ("list",), ("list", "--kind", "limit")]
)
def test_show_and_list_through_an_agent_match_the_local_output(clock, box, argv) -> None:
    """With the clock stopped, as every comparison of the two sides."""
    run_cli("on-full", "partner-api", "skip")
    run_cli("max-waiting", "partner-api", "9", "--per-key")
    local = run_cli(*argv, "--json")
    through = run_cli(*argv, "--agent", "reader", "--json")
    assert (through.code, through.err) == (0, "")
    assert json.loads(through.out) == json.loads(local.out)
    assert run_cli(*argv, "--agent", "reader").out == run_cli(*argv).out


def test_on_full_and_max_waiting_through_an_agent_are_audited_as_the_token_owner(box) -> None:
    assert run_cli("on-full", "partner-api", "skip", "--agent", "box").out == "partner-api on full: wait → skip\n"
    assert run_cli("max-waiting", "partner-api", "5", "--agent", "box").out == "partner-api max waiting: 2 → 5\n"
    assert run_cli("max-waiting", "partner-api", "3", "--per-key", "--agent", "box").out == (
        "partner-api max waiting per key: 1 → 3\n"
    )
    assert _values("partner-api") == ("skip", 5, 3)
    answer = json.loads(run_cli("on-full", "partner-api", "reset", "--agent", "box", "--json").out)
    assert (answer["on_full"], answer["on_full_overridden"]) == ("wait", False)
    assert run_cli("max-waiting", "partner-api", "reset", "--per-key", "--agent", "box").out == (
        "partner-api max waiting per key: 3 → 1 (declared)\n"
    )
    assert _values("partner-api") == ("wait", 5, 1)
    actors = set(AuditEvent.objects.filter(action__in=ACTIONS).values_list("actor", flat=True))
    assert actors == {"api:ops"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("on-full", "partner-api", "drop"), "error: on_full must be 'wait', 'skip' or 'replace', not 'drop'\n"),
        (
            ("on-full", "partner-api", "cancel_running"),
            "error: on_full must be 'wait', 'skip' or 'replace', not 'cancel_running': it is a workflow's own "
            "bound's only (SPEC 14.4), not a named limit's or an acquisition's\n",
        ),
        (
            ("max-waiting", "partner-api", "0"),
            "error: max_waiting must be a whole number from 1 to 1,000,000, not 0\n",
        ),
        (
            ("max-waiting", "partner-api", "lots", "--per-key"),
            "error: max_waiting_per_key must be a whole number from 1 to 1,000,000, not 'lots'\n",
        ),
        (("on-full", "nope", "skip"), "error: unknown limit 'nope'\n"),
        (("max-waiting", "nope", "3"), "error: unknown limit 'nope'\n"),
        (("show", "nope"), "error: unknown limit 'nope'\n"),
    ],
)
def test_bad_input_through_an_agent_is_the_same_line_and_changes_nothing(box, argv, message) -> None:
    local, through = run_cli(*argv), run_cli(*argv, "--agent", "box")
    assert (through.code, through.out, through.err) == (local.code, "", message)
    assert local.err == message
    assert (_values("partner-api"), _values("report-exports")) == (("wait", 2, 1), ("skip", None, None))
    assert not AuditEvent.objects.filter(action__in=ACTIONS).exists()


@pytest.mark.parametrize("argv", [("on-full", "partner-api", "skip"), ("max-waiting", "partner-api", "9")])
def test_a_token_without_the_operate_permission_cannot_change_them(box, argv) -> None:
    result = run_cli(*argv, "--agent", "reader")
    assert result.code == 2
    assert "may not operate limits" in result.err
    assert _values("partner-api") == ("wait", 2, 1)
