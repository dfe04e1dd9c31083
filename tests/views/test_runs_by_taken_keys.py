"""Issue 45, item 5 and the fault run's small items: a run keeps the keys it took slots under
inside its body (with_limit, acquire_slot), so a tenant's runs are found by key after their slots
are freed and they end, in Studio, `stackbone runs list --key` and the API; a start names a key
only for a workflow that bounds its runs (the box does not take one), and never the box as a
named limit.

Must never happen: a finished run of a key missing from that key's list; a run listed under a key
it never took, or twice; a key kept twice for one run (a replay, a wait then a grant); a start
refused or accepted otherwise on one surface than on the others."""

from __future__ import annotations

import io
import json

import pytest

from limits import services
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.config import define_workspace
from limits.models import QueueEntry
from limits.runs import WorkflowError, listing, workflow
from limits.runs.bounds import BOX_NAMED
from limits.workflow import acquire_slot, with_limit
from stackbone.models import Run, RunKey
from tests.api.test_runs import RunsApi, run_operator
from tests.factories import declare
from tests.views.test_runs_screen import URL, listed

pytestmark = pytest.mark.django_db


@workflow(name="test_two_tenants_sync")
def two_tenants(input: dict) -> dict:
    with_limit("partner-api", lambda: None, label="first", key=input["first"])
    with_limit("voice-calls", lambda: None, label="second", key=input["second"])
    return {"synced": [input["first"], input["second"]]}


@workflow(name="test_one_tenant_call")
def one_tenant(input: dict) -> dict:
    slot = acquire_slot("partner-api", label=input["tenant"], key=input["tenant"], timeout="1h")
    return {"slot": slot.id}


@workflow(name="test_keyless_under_the_box")
def keyless(input: dict) -> dict:
    return {}


def cli(*argv: str) -> tuple[int, dict]:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main([*argv, "--json"], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return code, json.loads(out.getvalue() or err.getvalue())


def found_by(key: str) -> list[str]:
    return [row.run.id for row in listing.runs_page(listing.RunFilter(key=key)).rows]


def taken(run: Run) -> list[str]:
    return list(RunKey.objects.filter(run=run).order_by("key").values_list("key", flat=True))


def test_a_finished_run_is_found_by_every_key_it_took_slots_under(stackbone_runs, viewer_client) -> None:
    declare(
        partner_api={"capacity": 4, "max_hold": "10m", "per_key": 2},
        voice_calls={"capacity": 4, "max_hold": "45m", "per_key": 2},
    )
    run = stackbone_runs.start(two_tenants, {"first": "u5", "second": "u6"})
    other = stackbone_runs.start(two_tenants, {"first": "u7", "second": "u7"})
    assert (run.status, other.status) == ("completed", "completed")
    assert not QueueEntry.objects.exists() and services.why_waiting([]) == {}  # nothing live is left

    assert (found_by("u5"), found_by("u6"), found_by("u7"), found_by("u8")) == ([run.id], [run.id], [other.id], [])
    assert (taken(run), taken(other)) == (["u5", "u6"], ["u7"])
    # Studio's Key filter, `stackbone runs list --key`, the API's ?key=: the same runs and keys.
    assert listed(viewer_client.get(URL, {"key": "u6"})) == [run.id]
    code, answer = cli("list", "--key", "u5")
    assert code == 0 and [(r["id"], r["keys"]) for r in answer["runs"]] == [(run.id, ["u5", "u6"])]
    api = RunsApi(run_operator()[1])
    assert [r["id"] for r in api.get(key="u6").json()["runs"]] == [run.id]
    assert api.get(f"{other.id}/").json()["keys"] == ["u7"]
    # With the other filters: a finished status, a workflow.
    both = listing.RunFilter(key="u7", status="completed", workflow="test_two_tenants_sync")
    assert [row.run.id for row in listing.runs_page(both).rows] == [other.id]


def test_a_run_that_waited_for_its_keys_pool_keeps_the_key_once(stackbone_runs, stackbone_slots) -> None:
    declare(partner_api={"capacity": 4, "max_hold": "10m", "per_key": 2})
    held = [stackbone_slots.hold("partner-api", key="acme") for _ in range(2)]
    run = stackbone_runs.start(one_tenant, {"tenant": "acme"})
    stackbone_runs.assert_waiting(run, "partner-api", because="key_pool_full")
    assert found_by("acme") == [run.id] and taken(run) == []  # found by its wait; no slot taken yet

    stackbone_slots.release(held[0])
    assert stackbone_runs.status(run) == "completed"
    assert taken(run) == ["acme"] and found_by("acme") == [run.id]  # once, though it holds its slot still
    assert stackbone_slots.in_use("partner-api", key="acme") == 2


# --- what a start may take -------------------------------------------------------------------------


@pytest.fixture
def under_the_box() -> None:
    services.sync_workspace(
        define_workspace(
            limits={"partner-api": {"capacity": 4, "max_hold": "10m", "per_key": 2}},
            run_concurrency={"base": 2, "burst": 2.0},
        )
    )


def test_the_box_named_as_a_limit_at_start_is_refused_everywhere_and_creates_nothing(under_the_box) -> None:
    """It was accepted, and the run's bounds named the box twice."""
    api = RunsApi(run_operator()[1])
    response = api.post("", {"workflow": "test_keyless_under_the_box", "limits": ["box"]})
    assert response.status_code == 400 and response.json()["field"] == "limits", response.json()
    assert BOX_NAMED in response.json()["error"]
    code, error = cli("start", "test_keyless_under_the_box", "--limits", "partner-api,box")
    assert (code, error["field"]) == (2, "limits") and BOX_NAMED in error["error"]
    with pytest.raises(listing.RunsError, match="the box's run concurrency, not a named limit"):
        listing.start("test_keyless_under_the_box", {}, limits=["box"])
    assert not Run.objects.exists() and not QueueEntry.objects.exists()
    with pytest.raises(WorkflowError, match="the box's run concurrency, not a named limit"):
        workflow(name="test_box_as_a_limit", limits=["box"])(lambda input: input)


def test_a_key_for_a_workflow_that_caps_no_runs_is_refused_under_the_box_too(under_the_box) -> None:
    """The box's pools are the workflows', not keys: a concurrency key limited nothing and was
    accepted only because the box counted as a bound (the docs said it is refused)."""
    api = RunsApi(run_operator()[1])
    response = api.post("", {"workflow": "test_keyless_under_the_box", "key": "acme"})
    assert response.status_code == 400 and response.json()["field"] == "key", response.json()
    assert "caps no runs" in response.json()["error"]
    code, error = cli("start", "test_keyless_under_the_box", "--key", "acme")
    assert (code, error["field"]) == (2, "key")
    assert not Run.objects.exists()
    # Without a key it starts, under the box.
    code, started = cli("start", "test_keyless_under_the_box")
    assert code == 0 and Run.objects.get(id=started["id"]).bounds == ["box"]
