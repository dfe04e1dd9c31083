"""SPEC 9.4, 9.5 and 10 in the JSON API (issue 13): a limit's keys, slots and queue by key,
per-key overrides, and the keys and groups of slots and queue entries. 400 names the field and
changes nothing; 404 for an unknown limit; writes need limits.operate_limit."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits.models import AuditEvent, Limit, LimitKey, Slot
from limits.services import acquire, acquire_group
from tests.api.conftest import Api, operator, reader
from tests.cli.conftest import seed_tenants
from tests.factories import declare, holders

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenants() -> None:
    seed_tenants()


@pytest.fixture
def ops() -> Api:
    return Api(operator()[1])


@pytest.fixture
def viewer() -> Api:
    return Api(reader()[1])


def _nothing_changed() -> None:
    assert Limit.objects.get(name="voice-calls").per_key_override is None
    assert not LimitKey.objects.filter(pool_override__isnull=False).exists()
    assert not AuditEvent.objects.filter(action="per_key").exists()


# --- the limit ----------------------------------------------------------------------------------


def test_a_limit_has_its_per_key_in_force(tenants, viewer) -> None:
    limit = viewer.get("voice-calls/").json()
    assert (limit["per_key"], limit["declared_per_key"], limit["per_key_overridden"]) == (2, 2, False)
    limits = {row["name"]: row for row in viewer.get("").json()["limits"]}
    assert limits["partner-api"]["per_key"] is None


# --- keys ---------------------------------------------------------------------------------------


def test_keys_are_listed_busiest_first_with_the_pool_without_a_key(tenants, viewer) -> None:
    response = viewer.get("voice-calls/keys/")
    assert response.status_code == 200
    answer = response.json()
    assert set(answer) == {
        "limit",
        "per_key",
        "key",
        "search",
        "keys",
        "no_key",
        "page",
        "size",
        "total",
        "has_next",
        "now",
    }
    assert (answer["limit"], answer["per_key"], answer["key"], answer["total"]) == ("voice-calls", 2, None, 2)
    assert answer["keys"] == [
        {
            "key": "acme",
            "busy": 2,
            "reserved": 0,
            "in_use": 2,
            "waiting": 1,
            "pool": 2,
            "pool_override": None,
            "pool_overridden": False,
            "weight": 1,
            "min": 0,
            "fair_share": None,  # a fifo limit (SPEC 13.5)
            "pass": None,  # a fifo limit: no turns (SPEC 13.2)
        },
        {
            "key": "globex",
            "busy": 1,
            "reserved": 0,
            "in_use": 1,
            "waiting": 1,
            "pool": 2,
            "pool_override": None,
            "pool_overridden": False,
            "weight": 1,
            "min": 0,
            "fair_share": None,  # a fifo limit (SPEC 13.5)
            "pass": None,  # a fifo limit: no turns (SPEC 13.2)
        },
    ]
    assert (answer["no_key"]["key"], answer["no_key"]["busy"], answer["no_key"]["pool"]) == (None, 1, 2)


def test_keys_are_paginated(tenants, viewer) -> None:
    first = viewer.get("voice-calls/keys/", page=1, size=1).json()
    second = viewer.get("voice-calls/keys/", page=2, size=1).json()
    past = viewer.get("voice-calls/keys/", page=3, size=1).json()
    assert [row["key"] for row in first["keys"] + second["keys"]] == ["acme", "globex"]
    assert (first["has_next"], second["has_next"], first["total"]) == (True, False, 2)
    assert past["keys"] == []


def test_keys_filter_by_key_is_exact_and_by_search_any_case(tenants, viewer) -> None:
    answer = viewer.get("voice-calls/keys/", key="globex").json()
    assert (answer["key"], [row["key"] for row in answer["keys"]], answer["total"]) == ("globex", ["globex"], 1)
    assert viewer.get("voice-calls/keys/", key="GLOBEX").json()["keys"] == []
    assert [row["key"] for row in viewer.get("voice-calls/keys/", search="ACM").json()["keys"]] == ["acme"]


def test_a_key_overridden_before_any_run_used_it_is_listed(tenants, ops) -> None:
    ops.post("voice-calls/per-key/", {"value": 1, "key": "initech"})
    keys = ops.get("voice-calls/keys/").json()["keys"]
    assert keys[-1] == {
        "key": "initech",
        "busy": 0,
        "reserved": 0,
        "in_use": 0,
        "waiting": 0,
        "pool": 1,
        "pool_override": 1,
        "pool_overridden": True,
        "weight": 1,
        "min": 0,
        "fair_share": None,  # a fifo limit (SPEC 13.5)
        "pass": None,  # a fifo limit: no turns (SPEC 13.2)
    }


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"key": ""}, "key"),
        ({"key": "k" * 129}, "key"),
        ({"key": "a\x07b"}, "key"),
        ({"search": "s" * 129}, "search"),
        ({"page": 0}, "page"),
        ({"size": 501}, "size"),
    ],
)
def test_keys_with_bad_parameters_are_400_naming_them(tenants, viewer, params, field) -> None:
    response = viewer.get("voice-calls/keys/", **params)
    assert (response.status_code, response.json()["field"]) == (400, field)


def test_a_nul_in_a_filter_is_refused_before_the_view(tenants, viewer) -> None:
    for params in ({"key": "a\x00b"}, {"search": "a\x00b"}):
        response = viewer.get("voice-calls/keys/", **params)
        assert response.status_code == 400
        assert "NUL" in response.json()["error"]


def test_keys_of_an_unknown_limit_are_404_and_need_a_token(tenants, viewer) -> None:
    response = viewer.get("nope/keys/")
    assert (response.status_code, response.json()) == (404, {"error": "unknown limit 'nope'", "field": "limit"})
    assert Api(None).get("voice-calls/keys/").status_code == 401
    assert viewer.post("voice-calls/keys/", {}).status_code == 405


def test_a_keys_page_takes_the_same_number_of_queries_whatever_the_number_of_keys(tenants, viewer) -> None:
    declare(
        voice_calls={"capacity": 4, "max_hold": "45m", "per_key": 2},
        partner_api={"capacity": 5, "max_hold": "10m"},
        big={"capacity": 60, "max_hold": "1h", "per_key": 2},
    )
    for n in range(40):
        acquire("big", run_id=f"b{n}", key=f"tenant-{n % 20}")
    counts = set()
    for name, page in [("voice-calls", 1), ("big", 1), ("big", 2)]:
        with CaptureQueriesContext(connection) as queries:
            answer = viewer.get(f"{name}/keys/", page=page, size=10).json()
        assert answer["keys"]
        counts.add(len(queries))
    assert len(counts) == 1


# --- slots and queue by key ---------------------------------------------------------------------


def test_slots_and_queue_carry_each_rows_key_null_for_none(tenants, viewer) -> None:
    slots = viewer.get("voice-calls/slots/").json()
    assert slots["key"] is None
    assert [(slot["run"], slot["key"]) for slot in slots["slots"]] == [
        ("r1", "acme"),
        ("r2", "acme"),
        ("r4", "globex"),
        ("r5", None),
    ]
    queue = viewer.get("voice-calls/queue/").json()
    assert [(entry["position"], entry["run"], entry["key"]) for entry in queue["queue"]] == [
        (1, "r3", "acme"),
        (2, "r6", "globex"),
    ]
    slot = viewer.get(f"slots/{Slot.objects.get(run_id='r4').id}/").json()
    assert (slot["key"], slot["group_size"], slot["group"], slot["limit"]) == ("globex", 1, None, "voice-calls")


def test_slots_and_queue_filtered_by_key_are_paginated_within_the_key(tenants, viewer) -> None:
    acquire("voice-calls", run_id="r7", key="acme", timeout="1h")
    first = viewer.get("voice-calls/slots/", key="acme", page=1, size=1).json()
    second = viewer.get("voice-calls/slots/", key="acme", page=2, size=1).json()
    past = viewer.get("voice-calls/slots/", key="acme", page=3, size=1).json()
    assert [slot["run"] for slot in first["slots"] + second["slots"]] == ["r1", "r2"]
    assert (first["key"], first["total"], first["has_next"], second["has_next"]) == ("acme", 2, True, False)
    assert past["slots"] == []
    pages = [viewer.get("voice-calls/queue/", key="acme", page=page, size=1).json() for page in (1, 2)]
    assert [(entry["position"], entry["run"]) for page in pages for entry in page["queue"]] == [(1, "r3"), (2, "r7")]
    assert pages[0]["total"] == 2


def test_slots_filtered_by_key_list_busy_before_reserved(tenants, viewer) -> None:
    from limits.services import release

    release(Slot.objects.get(run_id="r1").id, actor="test")  # r3 of acme is granted a reservation
    slots = viewer.get("voice-calls/slots/", key="acme").json()["slots"]
    assert [(slot["run"], slot["state"]) for slot in slots] == [("r2", "busy"), ("r3", "reserved")]
    assert slots[1]["reserved_until"] is not None


def test_slots_of_an_unused_key_are_an_empty_page(tenants, viewer) -> None:
    for path in ("slots/", "queue/"):
        answer = viewer.get(f"voice-calls/{path}", key="initech").json()
        assert (answer["total"], answer["has_next"], answer[path[:-1]]) == (0, False, [])


@pytest.mark.parametrize("key", ["", "k" * 129, "new\nline"])
def test_slots_and_queue_with_a_bad_key_are_400(tenants, viewer, key) -> None:
    for path in ("slots/", "queue/"):
        response = viewer.get(f"voice-calls/{path}", key=key)
        assert (response.status_code, response.json()["field"]) == (400, "key")


def test_a_group_acquisition_names_its_limits(tenants, viewer) -> None:
    declare(
        voice_calls={"capacity": 4, "max_hold": "45m", "per_key": 2},
        partner_api={"capacity": 5, "max_hold": "10m"},
        exports={"capacity": 1, "max_hold": "10m"},
    )
    acquire_group(["voice-calls", "partner-api"], run_id="r7", key="acme", timeout="1h")
    acquire_group(["exports", "partner-api"], run_id="r8")
    queue = viewer.get("voice-calls/queue/").json()["queue"]
    assert (queue[-1]["run"], queue[-1]["group_size"], queue[-1]["group"]) == ("r7", 2, ["partner-api", "voice-calls"])
    slots = viewer.get("partner-api/slots/").json()["slots"]
    assert [(slot["run"], slot["group"]) for slot in slots] == [("r8", ["exports", "partner-api"])]
    slot = viewer.get(f"slots/{slots[0]['id']}/").json()
    assert slot["group"] == ["exports", "partner-api"]


# --- per-key ------------------------------------------------------------------------------------


def test_per_key_set_and_reset_for_the_limit(tenants, ops) -> None:
    answer = ops.post("voice-calls/per-key/", {"value": 3}).json()
    assert (answer["old"], answer["limit"]["per_key"], answer["limit"]["per_key_overridden"], answer["key"]) == (
        2,
        3,
        True,
        None,
    )
    answer = ops.post("voice-calls/per-key/", {"value": None}).json()
    assert (answer["old"], answer["limit"]["per_key"], answer["limit"]["per_key_overridden"]) == (3, 2, False)
    events = AuditEvent.objects.filter(action="per_key", actor="api:ops")
    assert [(event.key, event.new_value) for event in events.order_by("id")] == [("", "3"), ("", "2 (declared)")]


def test_per_key_set_and_reset_for_one_key(tenants, ops) -> None:
    answer = ops.post("voice-calls/per-key/", {"value": 1, "key": "globex"}).json()
    assert answer["old"] == 2
    assert (answer["key"]["key"], answer["key"]["pool"], answer["key"]["pool_override"]) == ("globex", 1, 1)
    assert answer["limit"]["per_key_overridden"] is False
    answer = ops.post("voice-calls/per-key/", {"value": None, "key": "globex"}).json()
    assert (answer["old"], answer["key"]["pool"], answer["key"]["pool_overridden"]) == (1, 2, False)
    assert set(AuditEvent.objects.filter(action="per_key").values_list("actor", "key")) == {("api:ops", "globex")}


def test_per_key_raised_for_a_key_grants_its_waiting_run_at_once(tenants, ops) -> None:
    ops.post("voice-calls/capacity/", {"capacity": 6})
    assert ("r3", "reserved") not in holders("voice-calls")
    ops.post("voice-calls/per-key/", {"value": 3, "key": "acme"})
    assert ("r3", "reserved") in holders("voice-calls")


@pytest.mark.parametrize("value", [0, 5, -1, "3", 2.5, True, [2], "abc"])
def test_per_key_bad_values_are_400_naming_the_value(tenants, ops, value) -> None:
    for body in ({"value": value}, {"value": value, "key": "acme"}):
        response = ops.post("voice-calls/per-key/", body)
        assert (response.status_code, response.json()["field"]) == (400, "value")
        assert response.json()["error"].startswith("per_key must ")
    _nothing_changed()


@pytest.mark.parametrize("key", ["", "k" * 129, "a\x1bb", 5, ["acme"], {"k": 1}, False])
def test_per_key_bad_keys_are_400_naming_the_key(tenants, ops, key) -> None:
    response = ops.post("voice-calls/per-key/", {"value": 3, "key": key})
    assert (response.status_code, response.json()["field"]) == (400, "key")
    _nothing_changed()


@pytest.mark.parametrize(
    ("raw", "field"), [("not json", "body"), ("[1]", "body"), ("{}", "value"), ('{"key": "acme"}', "value")]
)
def test_per_key_bad_bodies_are_400(tenants, ops, raw, field) -> None:
    response = ops.post("voice-calls/per-key/", raw=raw)
    assert (response.status_code, response.json()["field"]) == (400, field)
    _nothing_changed()


def test_per_key_of_an_unknown_limit_is_404(tenants, ops) -> None:
    for body in ({"value": 3}, {"value": 3, "key": "acme"}):
        response = ops.post("nope/per-key/", body)
        assert (response.status_code, response.json()["field"]) == (404, "limit")


def test_per_key_needs_the_operate_permission(tenants, viewer) -> None:
    response = viewer.post("voice-calls/per-key/", {"value": 3})
    assert response.status_code == 403
    assert "limits.operate_limit" in response.json()["error"]
    assert Api(None).post("voice-calls/per-key/", {"value": 3}).status_code == 401
    assert viewer.get("voice-calls/per-key/").status_code == 405
    _nothing_changed()
