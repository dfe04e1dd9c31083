"""SPEC 11.5 in the CLI: `stackbone limits` shows a workflow's own bound like a limit, says it is
one (`kind` in JSON, a note in the table), filters by kind, and operates its total and per-key
(never a max hold: a bound has none), on this installation and through `--agent`."""

from __future__ import annotations

import getpass
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from limits import cli, services
from limits.cli import BAD_KIND
from limits.models import AuditEvent, Limit, Slot
from tests.api.conftest import operator
from tests.cli.conftest import run_cli, write_agents
from tests.factories import declare, holders, queue

BOUND = "workflow.place_orders"
ACTOR = f"cli:{getpass.getuser()}"


def start(run_id: str, key: str | None = None) -> services.Acquisition:
    """What run_bounds does when a run of place_orders is created: take the bound, or queue."""
    return services.acquire_group([BOUND], run_id=run_id, request=f"{run_id}:start", key=key, label="place_orders")


def seed() -> None:
    """place_orders runs at most 2 at once, 1 per key: run_a (acme) and run_b (globex) run;
    run_c (acme) and run_d (initech) are queued, in that order. voice-calls is a limit beside it."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    services.sync_workflow_bounds({BOUND: (2, 1)})
    for run_id, key in (("run_a", "acme"), ("run_b", "globex"), ("run_c", "acme"), ("run_d", "initech")):
        start(run_id, key)


@pytest.fixture
def bound(db) -> None:
    seed()


def _rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith("*")}


# --- list ---------------------------------------------------------------------------------------


def test_list_notes_a_bound_and_shows_no_max_hold_for_it(bound) -> None:
    result = run_cli("list")
    assert result.code == 0, result.err
    assert result.out.splitlines()[0].split() == ["NAME", "IN", "USE/CAPACITY", "WAITING", "MAX", "HOLD", "NOTES"]
    rows = _rows(result.out)
    assert rows[BOUND].split()[1:4] == ["2/2", "2", "-"]
    assert rows[BOUND].split("  ")[-1].strip() == "workflow bound, per key 1"
    assert rows["voice-calls"].split()[1:4] == ["0/2", "0", "45m"]
    assert "workflow bound" not in rows["voice-calls"]


def test_list_json_gives_the_kind_of_every_limit(bound) -> None:
    payload = json.loads(run_cli("list", "--json").out)
    assert all(limit["kind"] in ("limit", "workflow") for limit in payload)
    by_name = {limit["name"]: limit for limit in payload}
    assert (by_name[BOUND]["kind"], by_name[BOUND]["capacity"], by_name[BOUND]["per_key"]) == ("workflow", 2, 1)
    assert (by_name[BOUND]["max_hold_ms"], by_name[BOUND]["declared_max_hold_ms"]) == (None, None)
    assert (by_name["voice-calls"]["kind"], by_name["voice-calls"]["max_hold_ms"]) == ("limit", 45 * 60_000)


@pytest.mark.parametrize("kind", ["workflow", "limit"])
def test_list_filters_by_kind(bound, kind) -> None:
    payload = json.loads(run_cli("list", "--kind", kind, "--json").out)
    expected = Limit.objects.filter(kind=kind).values_list("name", flat=True)
    assert payload and sorted(limit["name"] for limit in payload) == sorted(expected)
    assert {limit["kind"] for limit in payload} == {kind}
    table = run_cli("list", "--kind", kind)
    assert (BOUND in _rows(table.out), "voice-calls" in _rows(table.out)) == (kind == "workflow", kind == "limit")


def test_list_of_a_kind_with_no_limits_says_so(db) -> None:
    Limit.objects.filter(kind="workflow").delete()  # the bounds migrate synced: never used here
    result = run_cli("list", "--kind", "workflow")
    assert (result.code, result.out) == (
        0,
        "no workflow bounds: no workflow caps its runs with @workflow(concurrency=...)\n",
    )
    assert json.loads(run_cli("list", "--kind", "workflow", "--json").out) == []


@pytest.mark.parametrize("value", ["bogus", "", "WORKFLOW", "workflows", "limit "])
def test_a_bad_kind_is_a_one_line_error_exit_2(bound, value) -> None:
    result = run_cli("list", "--kind", value)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"error: {BAD_KIND.format(value=value)}\n"
    assert len(result.err.splitlines()) == 1


def test_a_bad_kind_through_manage_py_is_a_command_error_with_exit_2(bound) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("limits", "list", "--kind", "nope", stdout=io.StringIO(), stderr=io.StringIO())
    assert (raised.value.returncode, str(raised.value)) == (2, BAD_KIND.format(value="nope"))
    out = io.StringIO()
    call_command("limits", "list", "--kind", "workflow", stdout=out, stderr=io.StringIO())
    assert BOUND in out.getvalue() and "voice-calls" not in out.getvalue()


# --- slots and keys of a bound --------------------------------------------------------------------


def test_slots_of_a_bound_lists_its_running_then_its_queued_runs(bound) -> None:
    payload = json.loads(run_cli("slots", BOUND, "--json").out)
    assert (payload["limit"], payload["kind"]) == (BOUND, "workflow")
    assert [(slot["run"], slot["state"], slot["key"]) for slot in payload["slots"]] == [
        ("run_a", "busy", "acme"),
        ("run_b", "busy", "globex"),
    ]
    assert all(slot["expires_at"] is None for slot in payload["slots"])  # held until the run ends
    assert [(entry["position"], entry["run"]) for entry in payload["queue"]] == [(1, "run_c"), (2, "run_d")]


def test_slots_of_a_bound_as_a_table_says_queued_and_no_max_hold(bound) -> None:
    result = run_cli("slots", BOUND)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == (
        f"{BOUND}: 2/2 in use, 2 queued, no max hold, per key 1 "
        "(workflow bound: each running run holds a slot until it ends)"
    )
    header = next(line for line in lines if line.startswith("SLOT"))
    assert header.split() == ["SLOT", "STATE", "RUN", "LABEL", "KEY", "GRANTED"]
    queued = next(line for line in lines if line.startswith("POSITION"))
    assert "QUEUED SINCE" in queued


def test_slots_of_a_limit_say_its_kind_too(bound) -> None:
    assert json.loads(run_cli("slots", "voice-calls", "--json").out)["kind"] == "limit"


def test_keys_of_a_bound_are_its_concurrency_keys(bound) -> None:
    keys = json.loads(run_cli("keys", BOUND, "--json").out)
    assert [(key["key"], key["busy"], key["waiting"], key["pool"]) for key in keys["keys"]] == [
        ("acme", 1, 1, 1),
        ("globex", 1, 0, 1),
        ("initech", 0, 1, 1),
    ]


def test_a_bound_slot_shows_no_expiry_when_asked_for_before_release(bound) -> None:
    slot = Slot.objects.get(limit__name=BOUND, run_id="run_a", state="busy")
    backend = cli.LocalBackend(ACTOR)
    assert backend.slot(slot.id)["expires_at"] is None
    assert backend.slot(slot.id)["limit"] == BOUND


# --- operating a bound ----------------------------------------------------------------------------


def test_max_hold_of_a_bound_is_refused_with_exit_2_and_changes_nothing(bound) -> None:
    for value in ("1h", "reset"):
        result = run_cli("max-hold", BOUND, value)
        assert result.code == 2
        assert result.err == (
            f"error: {BOUND!r} is a workflow's own bound: its runs hold their slot until they end (no max hold)\n"
        )
    assert Limit.objects.get(name=BOUND).max_hold_override_ms is None
    assert not AuditEvent.objects.filter(action="max_hold").exists()


def test_raising_a_bounds_total_starts_the_oldest_queued_run_that_can_start(bound) -> None:
    """run_c (acme) is older, but acme's pool (per key 1) is full with run_a: run_d starts."""
    result = run_cli("capacity", BOUND, "3")
    assert (result.code, result.out) == (0, f"{BOUND} capacity: 2 → 3\n")
    assert holders(BOUND) == [("run_a", "busy"), ("run_b", "busy"), ("run_d", "reserved")]
    assert queue(BOUND) == ["run_c"]
    assert AuditEvent.objects.get(action="capacity").actor == ACTOR
    assert run_cli("capacity", BOUND, "reset").out == f"{BOUND} capacity: 3 → 2 (declared)\n"


def test_per_key_of_a_bound_is_overridden_like_a_limits(bound) -> None:
    result = run_cli("per-key", BOUND, "2", "--json")
    assert result.code == 0, result.err
    assert (json.loads(result.out)["per_key"], json.loads(result.out)["kind"]) == (2, "workflow")
    assert holders(BOUND) == [("run_a", "busy"), ("run_b", "busy")]  # the total is still full


def test_releasing_a_running_runs_slot_lets_the_next_queued_run_start(bound) -> None:
    slot = Slot.objects.get(limit__name=BOUND, run_id="run_a", state="busy")
    result = run_cli("release", slot.id, "--yes")
    assert (result.code, result.out) == (0, f"released {slot.id} of {BOUND} (was busy, run run_a)\n")
    assert holders(BOUND) == [("run_b", "busy"), ("run_c", "reserved")]
    assert AuditEvent.objects.filter(action="release", slot_id=slot.id, actor=ACTOR).exists()


# --- through --agent --------------------------------------------------------------------------------


@pytest.fixture
def box(live_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed()
    agents = {"box": {"url": live_server.url, "token": operator()[1]}}
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(write_agents(tmp_path / "agents.toml", agents)))


@pytest.mark.django_db(transaction=True)
def test_list_by_kind_through_an_agent_matches_the_local_output(box) -> None:
    for kind in ("workflow", "limit"):
        remote = json.loads(run_cli("list", "--kind", kind, "--agent", "box", "--json").out)
        assert remote == json.loads(run_cli("list", "--kind", kind, "--json").out)
        assert {limit["kind"] for limit in remote} == {kind}
    table = run_cli("list", "--agent", "box", "--kind", "workflow")
    assert _rows(table.out)[BOUND].split()[1:4] == ["2/2", "2", "-"]


@pytest.mark.django_db(transaction=True)
def test_a_bad_kind_through_an_agent_is_the_same_one_line_error(box) -> None:
    result = run_cli("list", "--kind", "bogus", "--agent", "box")
    assert (result.code, result.err) == (2, f"error: {BAD_KIND.format(value='bogus')}\n")


@pytest.mark.django_db(transaction=True)
def test_slots_of_a_bound_through_an_agent_match_the_local_output(box) -> None:
    remote = json.loads(run_cli("slots", BOUND, "--agent", "box", "--json").out)
    assert remote == json.loads(run_cli("slots", BOUND, "--json").out)
    assert remote["kind"] == "workflow"
    assert run_cli("slots", BOUND, "--agent", "box").out.splitlines()[0].startswith(f"{BOUND}: 2/2 in use, 2 queued")


@pytest.mark.django_db(transaction=True)
def test_an_agent_whose_api_predates_kind_still_filters(box, monkeypatch) -> None:
    """An older installation ignores ?kind= and sends no `kind`: its limits are all 'limit'."""
    old = {"limits": [{"name": "voice-calls", "busy": 0}, {"name": "partner-api", "busy": 0}]}
    monkeypatch.setattr(cli.AgentBackend, "_call", lambda self, method, path, body=None, **kw: old)
    backend = cli.AgentBackend(cli.load_agent("box"))
    assert [limit["name"] for limit in backend.limits("limit")] == ["voice-calls", "partner-api"]
    assert backend.limits("workflow") == []
