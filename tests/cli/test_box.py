"""SPEC 12.5 and 12.6 on the CLI: `stackbone limits box [--base N|reset] [--burst F|reset]`
shows and changes the box's run concurrency with real runs executing and waiting; `list --json`
has the box's row; a workflow's bound capped by the base says so (SPEC 12.3). A bad value is one
line naming the field, exit 2, and nothing changes (no value, no audit row)."""

from __future__ import annotations

import getpass
import json

import pytest

from limits import cli, services
from limits.config import define_workspace
from limits.engine.operator_actions import NO_BOX
from limits.models import AuditEvent, Limit
from studio.workflows import start_run, step, workflow
from tests.cli.conftest import run_cli
from tests.factories import assert_counters_match_rows, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

ACTOR = f"cli:{getpass.getuser()}"


@step
def work(label: str) -> str:
    return label


@workflow(name="cli_box_one")
def one(input: dict) -> str:
    return work(input["label"])


@workflow(name="cli_box_two", concurrency={"total": 5})
def two(input: dict) -> str:
    return work(input["label"])


def declare_box(base: int, burst: float) -> None:
    services.sync_workspace(
        define_workspace(
            limits={"partner-api": {"capacity": 3, "max_hold": "1h"}}, run_concurrency={"base": base, "burst": burst}
        )
    )


@pytest.fixture
def busy_box(no_worker) -> list[str]:
    """A box of base 1, burst 2 (ceiling 2): one run of each workflow executes, a third waits."""
    declare_box(1, 2.0)
    runs = [start_run(one, {"label": "a"}), start_run(two, {"label": "b"}), start_run(two, {"label": "c"})]
    return [run.id for run in runs]


def box_values() -> tuple[int | None, float | None, int]:
    box = Limit.objects.get(name="box")
    return box.per_key, box.burst, box.capacity


def test_box_shows_runs_executing_the_ceiling_runs_waiting_base_and_burst(busy_box) -> None:
    result = run_cli("box")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "box: 2/2 runs executing, 1 waiting for the box",
        "base  1: no single workflow executes more than 1 run at once",
        "burst 2: the box executes at most 2 runs at once (floor(1 x 2))",
        "runs executing and waiting: `stackbone limits slots box`; per workflow: `stackbone limits keys box`",
    ]
    as_json = json.loads(run_cli("box", "--json").out)
    assert {k: as_json[k] for k in ("name", "kind", "capacity", "base", "burst", "in_use", "waiting")} == {
        "name": "box",
        "kind": "box",
        "capacity": 2,
        "base": 1,
        "burst": 2.0,
        "in_use": 2,
        "waiting": 1,
    }
    assert as_json["max_hold_ms"] is None  # no max hold


def test_box_base_and_burst_change_together_audited_and_raising_grants_at_once(busy_box) -> None:
    result = run_cli("box", "--base", "2", "--burst", "1.5")
    assert (result.code, result.err) == (0, "")
    assert result.out == "box: base 1, burst 2, ceiling 2 → base 2, burst 1.5, ceiling 3\n"
    assert box_values() == (2, 1.5, 3)
    assert holders("box")[-1] == (busy_box[2], "reserved")  # the waiting run got the place at once
    assert queue("box") == []
    events = AuditEvent.objects.filter(action="box").values_list("actor", "old_value", "new_value")
    assert list(events) == [(ACTOR, "base 1, burst 2, ceiling 2", "base 2, burst 1.5, ceiling 3")]
    assert_counters_match_rows("box")


def test_box_reset_brings_back_the_declared_value_and_takes_nothing_back(busy_box) -> None:
    assert run_cli("box", "--base", "3").code == 0
    assert box_values() == (3, 2.0, 6)
    result = run_cli("box", "--base", "reset", "--json")
    assert result.code == 0, result.err
    row = json.loads(result.out)
    assert (row["base"], row["base_overridden"], row["burst"], row["capacity"]) == (1, False, 2.0, 2)
    assert Limit.objects.get(name="box").in_use == 3  # lowering takes nothing back
    plain = run_cli("box", "--burst", "reset")
    assert (
        plain.out
        == "box: base 1, burst 2, ceiling 2 → base 1, burst 2, ceiling 2 (burst reset to the declared value)\n"
    )


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        (("--base", "0"), "base", "base must be a whole number from 1 to 100000, not 0"),
        (("--base", "-3"), "base", "base must be a whole number from 1 to 100000, not -3"),
        (("--base", "lots"), "base", "base must be a whole number from 1 to 100000, not 'lots'"),
        (("--base", "2.5"), "base", "base must be a whole number from 1 to 100000, not '2.5'"),
        (("--burst", "11"), "burst", "burst must be from 1.0 to 10.0, not 11.0"),
        (("--burst", "nan"), "burst", "burst must be from 1.0 to 10.0, not 'nan'"),
        (("--burst", ""), "burst", "burst must be from 1.0 to 10.0, not ''"),
        (("--base", "5", "--burst", "0.5"), "burst", "burst must be from 1.0 to 10.0, not 0.5"),
        (("--base", "100000", "--burst", "3"), "base", "base x burst must be at most 100000, not 300000"),
    ],
)
def test_a_bad_value_is_one_line_exit_2_and_changes_nothing(busy_box, args, field, message) -> None:
    result = run_cli("box", *args)
    assert (result.code, result.out, result.err) == (2, "", f"error: {message}\n")
    as_json = run_cli("box", *args, "--json")
    assert (as_json.code, json.loads(as_json.err)) == (2, {"error": message, "field": field})
    assert box_values() == (1, 2.0, 2)
    assert not AuditEvent.objects.filter(action="box").exists()
    assert queue("box") == [busy_box[2]]


def test_capacity_of_the_box_points_at_the_box_verb(busy_box) -> None:
    result = run_cli("capacity", "box", "9")
    assert result.code == 2 and result.err.count("\n") == 1
    assert "stackbone limits box --base/--burst" in result.err
    assert box_values() == (1, 2.0, 2)


def test_without_run_concurrency_box_says_how_to_declare_it(db) -> None:
    services.sync_workspace(define_workspace(limits={"partner-api": {"capacity": 3, "max_hold": "1h"}}))
    shown = run_cli("box")
    assert (shown.code, shown.out, shown.err) == (1, "", f"error: {NO_BOX}\n")
    assert cli.errors.NO_BOX == NO_BOX  # the CLI's copy (it imports no Django) says the engine's words
    changed = run_cli("box", "--base", "4")
    assert (changed.code, changed.err) == (2, f"error: {NO_BOX}\n")
    assert not Limit.objects.filter(name="box").exists()


def test_list_json_has_the_box_row_first_and_a_capped_bound_says_so(busy_box) -> None:
    rows = json.loads(run_cli("list", "--json").out)
    box = rows[0]
    assert {k: box[k] for k in ("name", "kind", "capacity", "base", "burst", "busy", "waiting")} == {
        "name": "box",
        "kind": "box",
        "capacity": 2,
        "base": 1,
        "burst": 2.0,
        "busy": 2,
        "waiting": 1,
    }
    assert {"declared_capacity", "max_hold_ms", "in_use", "reserved", "per_key", "paused"} <= set(box)
    bound = next(row for row in rows if row["name"] == "workflow.cli_box_two")
    assert (bound["capacity"], bound["in_force"], bound["capped_by_box"]) == (5, 1, True)
    partner = next(row for row in rows if row["name"] == "partner-api")  # whole runs capped at the base (12.3)
    assert (partner["whole_runs_in_force"], partner["capped_by_box"]) == (
        min(partner["capacity"], 1),
        partner["capacity"] > 1,
    )
    assert "in_force" not in partner  # its slots taken in run bodies have the whole capacity

    table = run_cli("list").out.splitlines()
    assert table[1].split()[:3] == ["box", "2/2", "1"]
    assert table[1].endswith("box: base 1, burst 2")
    assert "capped by the box's base: 1 at once" in next(line for line in table if "cli_box_two" in line)
    assert [row["name"] for row in json.loads(run_cli("list", "--kind", "box", "--json").out)] == ["box"]


def test_slots_of_the_box_lists_executing_runs_then_waiting_ones_in_order(busy_box) -> None:
    result = run_cli("slots", "box")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("box: 2/2 in use, 1 queued, no max hold, base 1, burst 2")
    ran = [line.split()[2] for line in lines if line.startswith("slot_")]
    assert ran == busy_box[:2]
    assert any(line.split()[:2] == ["1", busy_box[2]] for line in lines)


# --- through another installation's API (--agent) ---------------------------------------------


@pytest.fixture
def agents(busy_box, live_server, tmp_path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Agents "box" (an operator's token) and "reader" (without the operate permission)."""
    from tests.api.conftest import operator, reader
    from tests.cli.conftest import write_agents

    found = {
        "box": {"url": live_server.url, "token": operator()[1]},
        "reader": {"url": live_server.url, "token": reader()[1]},
    }
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", found)))
    return busy_box


def test_box_through_an_agent_reads_and_changes_as_locally_audited_as_the_token_owner(agents) -> None:
    shown = run_cli("box", "--agent", "box")
    assert (shown.code, shown.out) == (0, run_cli("box").out)
    assert json.loads(run_cli("box", "--agent", "box", "--json").out) == json.loads(run_cli("box", "--json").out)
    changed = run_cli("box", "--base", "2", "--burst", "1.5", "--agent", "box")
    assert (changed.code, changed.err) == (0, "")
    assert changed.out == "box: base 1, burst 2, ceiling 2 → base 2, burst 1.5, ceiling 3\n"
    assert box_values() == (2, 1.5, 3)
    assert holders("box")[-1] == (agents[2], "reserved")
    assert list(AuditEvent.objects.filter(action="box").values_list("actor", flat=True)) == ["api:ops"]
    listed = json.loads(run_cli("list", "--json", "--agent", "box").out)
    assert (listed[0]["name"], listed[0]["base"], listed[0]["burst"]) == ("box", 2, 1.5)


def test_a_bad_value_through_an_agent_is_one_line_exit_2_naming_the_field(agents) -> None:
    result = run_cli("box", "--burst", "12", "--agent", "box", "--json")
    assert (result.code, json.loads(result.err)) == (
        2,
        {"error": "burst must be from 1.0 to 10.0, not 12.0", "field": "burst"},
    )
    refused = run_cli("box", "--base", "4", "--agent", "reader")
    assert refused.code == 2 and refused.err.count("\n") == 1 and "limits.operate_limit" in refused.err
    assert box_values() == (1, 2.0, 2)
    assert not AuditEvent.objects.filter(action="box").exists()
