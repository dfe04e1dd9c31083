"""SPEC 11.5 in the JSON API: every limit object says its `kind` ("limit" or "workflow"),
`GET /api/limits/?kind=...` filters by it (another value is a 400 naming the field), and a
workflow's own bound is read and operated like a limit, except for a max hold (it has none)."""

from __future__ import annotations

import pytest

from limits import services
from limits.api import BAD_KIND
from limits.models import AuditEvent, Limit, Slot
from tests.api.conftest import Api, operator, reader
from tests.factories import declare, holders, queue

pytestmark = pytest.mark.django_db

BOUND = "workflow.place_orders"


def start(run_id: str, key: str | None = None) -> services.Acquisition:
    """What run_bounds does when a run of place_orders is created: take the bound, or queue."""
    return services.acquire_group([BOUND], run_id=run_id, request=f"{run_id}:start", key=key, label="place_orders")


@pytest.fixture
def bound() -> None:
    """place_orders runs at most 2 at once, 1 per key: run_a (acme) and run_b (globex) run;
    run_c (acme) and run_d (initech) are queued, in that order. voice-calls is a limit beside it."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    services.sync_workflow_bounds({BOUND: (2, 1)})
    for run_id, key in (("run_a", "acme"), ("run_b", "globex"), ("run_c", "acme"), ("run_d", "initech")):
        start(run_id, key)


# --- reads --------------------------------------------------------------------------------------


def test_every_limit_in_the_list_says_its_kind(bound) -> None:
    limits = Api(reader()[1]).get("").json()["limits"]
    assert limits and all(limit["kind"] in ("limit", "workflow") for limit in limits)
    by_name = {limit["name"]: limit for limit in limits}
    assert by_name["voice-calls"]["kind"] == "limit"
    bound = by_name[BOUND]
    assert (bound["kind"], bound["capacity"], bound["per_key"], bound["busy"], bound["waiting"]) == (
        "workflow",
        2,
        1,
        2,
        2,
    )
    assert (bound["max_hold_ms"], bound["declared_max_hold_ms"], bound["max_hold_overridden"]) == (None, None, False)


@pytest.mark.parametrize("kind", ["workflow", "limit"])
def test_the_list_filters_by_kind(bound, kind) -> None:
    response = Api(reader()[1]).get("", kind=kind)
    assert response.status_code == 200
    names = sorted(limit["name"] for limit in response.json()["limits"])
    assert names == sorted(Limit.objects.filter(kind=kind).values_list("name", flat=True))
    assert (BOUND in names, "voice-calls" in names) == (kind == "workflow", kind == "limit")


@pytest.mark.parametrize("value", ["bogus", "", "Workflow", "limits", "workflow,limit"])
def test_a_bad_kind_is_a_400_naming_the_field(bound, value) -> None:
    response = Api(reader()[1]).get("", kind=value)
    assert (response.status_code, response.json()) == (400, {"error": BAD_KIND, "field": "kind"})


def test_a_kind_filter_without_a_token_is_still_a_401(bound) -> None:
    assert Api(None).get("", kind="bogus").status_code == 401


def test_one_bound_says_its_kind(bound) -> None:
    api = Api(reader()[1])
    assert api.get(f"{BOUND}/").json()["kind"] == "workflow"
    assert api.get("voice-calls/").json()["kind"] == "limit"


def test_a_bounds_slots_are_its_running_runs_held_until_they_end(bound) -> None:
    api = Api(reader()[1])
    answer = api.get(f"{BOUND}/slots/").json()
    assert [(slot["run"], slot["state"], slot["key"]) for slot in answer["slots"]] == [
        ("run_a", "busy", "acme"),
        ("run_b", "busy", "globex"),
    ]
    assert [slot["expires_at"] for slot in answer["slots"]] == [None, None]
    services.acquire("voice-calls", run_id="r1")
    assert api.get("voice-calls/slots/").json()["slots"][0]["expires_at"] is not None


def test_a_bounds_queue_is_its_queued_runs_in_order(bound) -> None:
    answer = Api(reader()[1]).get(f"{BOUND}/queue/").json()
    assert [(entry["position"], entry["run"], entry["key"]) for entry in answer["queue"]] == [
        (1, "run_c", "acme"),
        (2, "run_d", "initech"),
    ]


def test_a_bound_slot_read_alone_has_no_expiry(bound) -> None:
    slot = Slot.objects.get(limit__name=BOUND, run_id="run_a")
    answer = Api(reader()[1]).get(f"slots/{slot.id}/").json()
    assert (answer["limit"], answer["run"], answer["expires_at"]) == (BOUND, "run_a", None)


# --- writes -------------------------------------------------------------------------------------


def test_a_max_hold_for_a_bound_is_a_400_naming_max_hold_and_changes_nothing(bound) -> None:
    api = Api(operator()[1])
    for value in ("1h", None):
        response = api.post(f"{BOUND}/max-hold/", {"max_hold": value})
        assert (response.status_code, response.json()["field"]) == (400, "max_hold")
        assert "no max hold" in response.json()["error"]
    assert Limit.objects.get(name=BOUND).max_hold_override_ms is None
    assert not AuditEvent.objects.filter(action="max_hold").exists()


def test_raising_a_bounds_total_starts_the_oldest_queued_run_that_can_start(bound) -> None:
    """run_c (acme) is older, but acme's pool (per key 1) is full with run_a: run_d starts."""
    answer = Api(operator()[1]).post(f"{BOUND}/capacity/", {"capacity": 3}).json()
    assert (answer["old"], answer["limit"]["capacity"], answer["limit"]["kind"]) == (2, 3, "workflow")
    assert answer["limit"]["max_hold_ms"] is None
    assert holders(BOUND) == [("run_a", "busy"), ("run_b", "busy"), ("run_d", "reserved")]
    assert queue(BOUND) == ["run_c"]
    assert AuditEvent.objects.get(action="capacity").actor == "api:ops"


def test_per_key_of_a_bound_is_overridden_and_reset(bound) -> None:
    api = Api(operator()[1])
    answer = api.post(f"{BOUND}/per-key/", {"value": 2}).json()
    assert (answer["old"], answer["limit"]["per_key"], answer["limit"]["kind"]) == (1, 2, "workflow")
    assert api.post(f"{BOUND}/per-key/", {"value": None}).json()["limit"]["per_key"] == 1


def test_releasing_a_running_runs_slot_lets_the_next_queued_run_start(bound) -> None:
    slot = Slot.objects.get(limit__name=BOUND, run_id="run_a")
    answer = Api(operator()[1]).post(f"slots/{slot.id}/release/").json()
    assert (answer["released"], answer["slot"]["limit"], answer["slot"]["expires_at"]) == (True, BOUND, None)
    assert holders(BOUND) == [("run_b", "busy"), ("run_c", "reserved")]
    assert AuditEvent.objects.filter(action="release", slot_id=slot.id, actor="api:ops").exists()
