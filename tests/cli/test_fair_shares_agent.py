"""SPEC 13.5 with `--agent <id>` (issue 28): `share`, `weight`, `min` and the fair shares and
passes of `keys`, and (13.7, issue 43) a fair queue in the order it is served, against a second
running installation (pytest-django's live_server) through the JSON API: the same output, --json
and exit codes as locally, audited as the token's owner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limits import cli
from limits.models import AuditEvent, Limit, LimitKey
from tests.api.conftest import operator, reader
from tests.cli.conftest import run_cli, seed_fair, write_agents

# one_database (tests/conftest.py): the CLI's HTTP client against a live server; the routes
# are proved on both databases by tests/api/test_fair_shares.py.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_fair()
    agents = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url, "token": reader()[1]},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))


@pytest.mark.parametrize(
    "argv",
    [
        ("keys", "tenant-jobs"),
        ("keys", "tenant-jobs", "--key", "acme"),
        ("slots", "tenant-jobs", "--key", "globex"),
        ("slots", "tenant-jobs"),  # SPEC 13.7: the queue in the order it is served, and why
        ("slots", "tenant-jobs", "--rows", "2"),
    ],
)
def test_fair_shares_through_an_agent_match_the_local_output(clock, box, argv) -> None:
    """With the clock stopped, so that both sides read "1s ago" at the same moment."""
    run_cli("weight", "tenant-jobs", "3", "--key", "acme")
    local = run_cli(*argv, "--json")
    through = run_cli(*argv, "--agent", "reader", "--json")
    assert (through.code, through.err) == (0, "")
    assert json.loads(through.out) == json.loads(local.out)
    assert run_cli(*argv, "--agent", "reader").out == run_cli(*argv).out


def test_share_weight_and_min_through_an_agent_are_audited_as_the_token_owner(box) -> None:
    assert run_cli("share", "tenant-jobs", "fifo", "--agent", "box").out == "tenant-jobs share: fair → fifo\n"
    answer = json.loads(run_cli("share", "tenant-jobs", "reset", "--agent", "box", "--json").out)
    assert (answer["share"], answer["share_overridden"]) == ("fair", False)
    assert run_cli("weight", "tenant-jobs", "4", "--key", "globex", "--agent", "box").out == (
        "tenant-jobs key globex weight: 1 → 4\n"
    )
    row = json.loads(run_cli("min", "tenant-jobs", "2", "--key", "initech", "--agent", "box", "--json").out)
    assert (row["limit"], row["key"], row["min"], row["weight"]) == ("tenant-jobs", "initech", 2, 1)
    assert row["fair_share"] == 0.57  # 4 x 1 / (1 + 4 + 1 + 1)
    actors = set(AuditEvent.objects.filter(action__in=["share", "weight", "min"]).values_list("actor", flat=True))
    assert actors == {"api:ops"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("share", "tenant-jobs", "lottery"), "error: share must be 'fifo' or 'fair', not 'lottery'\n"),
        (
            ("weight", "tenant-jobs", "0", "--key", "acme"),
            "error: weight must be a whole number from 1 to 100, not 0\n",
        ),
        (
            ("min", "tenant-jobs", "9", "--key", "acme"),
            "error: min must be a whole number from 0 to capacity (4), not 9\n",
        ),
        (("weight", "nope", "2", "--key", "acme"), "error: unknown limit 'nope'\n"),
    ],
)
def test_bad_input_through_an_agent_is_the_same_line_and_changes_nothing(box, argv, message) -> None:
    local, through = run_cli(*argv), run_cli(*argv, "--agent", "box")
    assert (through.code, through.out, through.err) == (local.code, "", message)
    assert local.err == message
    assert Limit.objects.get(name="tenant-jobs").share_override == ""
    assert not LimitKey.objects.exclude(weight=1).exclude(minimum=0).exists()
    assert not AuditEvent.objects.filter(action__in=["share", "weight", "min"]).exists()


def test_a_token_without_the_operate_permission_cannot_change_shares(box) -> None:
    result = run_cli("share", "tenant-jobs", "fifo", "--agent", "reader")
    assert result.code == 2
    assert "may not operate limits" in result.err
    assert Limit.objects.get(name="tenant-jobs").share == "fair"
