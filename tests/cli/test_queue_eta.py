"""`stackbone limits slots`: queue rows carry `position` (1-based) and `eta_seconds` (limits.eta,
null when unknown) in --json, and an ETA column in the table; the same figures locally, through
an agent (the JSON API) and on the run page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from limits import cli, services
from tests.api.conftest import reader
from tests.cli.conftest import run_cli, write_agents
from tests.factories import declare, rolled_up_grants


def seed(clock) -> None:
    """partner-api (capacity 3, 1 per key, max hold 1h) granted 3 slots in the last 10 rolled-up
    minutes (one every 200 s); then 4 runs wait: acme, globex, acme, (no key)."""
    declare(partner_api={"capacity": 3, "max_hold": "1h", "per_key": 1})

    def grants() -> None:
        for key in ("acme", "globex", "initech"):
            services.acquire("partner-api", run_id=f"holder-{key}", key=key, label=f"holder {key}")

    rolled_up_grants(clock, grants)
    for run_id, key in [("w1", "acme"), ("w2", "globex"), ("w3", "acme"), ("w4", None)]:
        assert services.acquire("partner-api", run_id=run_id, key=key, label=f"call {run_id}", timeout="1h").state == (
            "waiting"
        )


@pytest.fixture
def tenants(db, clock) -> None:
    seed(clock)


def _json(*argv: str) -> dict[str, object]:
    result = run_cli("slots", "partner-api", "--json", *argv)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _rows(payload: dict[str, object]) -> list[tuple[object, ...]]:
    return [(row["run"], row["position"], row["eta_seconds"]) for row in payload["queue"]]  # type: ignore[attr-defined]


def test_json_queue_rows_carry_position_and_eta_seconds(tenants) -> None:
    assert _rows(_json()) == [("w1", 1, 200), ("w2", 2, 400), ("w3", 3, 600), ("w4", 4, 800)]


def test_json_with_a_key_counts_the_position_in_the_key_and_the_eta_in_the_limit(tenants) -> None:
    assert _rows(_json("--key", "acme")) == [("w1", 1, 200), ("w3", 2, 600)]


def test_json_with_a_cut_keeps_the_figures(tenants) -> None:
    assert _rows(_json("--limit", "2")) == [("w1", 1, 200), ("w2", 2, 400)]


def test_eta_seconds_is_null_when_nothing_was_granted_recently(tenants, clock) -> None:
    clock.advance(minutes=12)
    services.sweep()
    assert _rows(_json()) == [("w1", 1, None), ("w2", 2, None), ("w3", 3, None), ("w4", 4, None)]


def test_the_table_has_an_eta_column(tenants) -> None:
    result = run_cli("slots", "partner-api")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    header = next(line for line in lines if line.startswith("POSITION"))
    assert header.split()[:6] == ["POSITION", "RUN", "LABEL", "KEY", "ETA", "WAITING"]
    column = header.index("ETA")
    rows = lines[lines.index(header) + 1 : lines.index(header) + 5]
    assert [row[column:].split("  ")[0] for row in rows] == [
        "about 3 min",  # 200 s
        "about 7 min",  # 400 s
        "about 10 min",
        "about 13 min",  # 800 s
    ]


def test_the_table_says_unknown_when_nothing_was_granted_recently(tenants, clock) -> None:
    clock.advance(minutes=12)
    services.sweep()
    lines = run_cli("slots", "partner-api").out.splitlines()
    header = next(line for line in lines if line.startswith("POSITION"))
    column = header.index("ETA")
    assert all(row[column:].startswith("unknown") for row in lines[lines.index(header) + 1 :])


@pytest.mark.django_db(transaction=True)
def test_through_an_agent_the_figures_are_the_same(live_server, clock, tmp_path: Path, monkeypatch) -> None:
    seed(clock)
    agents = {"box": {"url": live_server.url, "token": reader()[1]}}
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))
    for argv in ([], ["--key", "acme"]):
        remote = json.loads(run_cli("slots", "partner-api", "--agent", "box", "--json", *argv).out)
        assert remote == _json(*argv)
    text = run_cli("slots", "partner-api", "--agent", "box").out
    assert "ETA" in text and "about 3 min" in text
