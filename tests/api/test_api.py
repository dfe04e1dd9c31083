"""Issue 5: the JSON API at /api/limits/. Token auth only; 400 names the field, 404 for unknown
names, 401 without a valid token, 403 for writes without limits.operate_limit."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits.models import AuditEvent, Limit, Slot
from limits.services import acquire
from tests.api.conftest import Api, operator, reader
from tests.factories import declare, holders

pytestmark = pytest.mark.django_db


# --- auth ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer sbk_wrong", "Token abc", "Basic b3BzOm9wcw=="])
def test_reads_without_a_valid_token_are_401(calls, header) -> None:
    api = Api(None)
    if header:
        api.headers = {"Authorization": header}
    response = api.get("")
    assert response.status_code == 401
    assert response.json()["error"].startswith("missing or invalid token")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_session_cookie_is_never_enough(calls, client) -> None:
    """No CSRF hole: a signed-in browser session cannot read or write through the API."""
    user, _ = operator()
    client.force_login(user)
    assert client.get("/api/limits/").status_code == 401
    response = client.post("/api/limits/voice-calls/capacity/", {"capacity": 9}, content_type="application/json")
    assert response.status_code == 401
    assert Limit.objects.get(name="voice-calls").capacity == 2


def test_a_token_of_an_inactive_user_is_refused(calls) -> None:
    user, token = operator()
    user.is_active = False
    user.save()
    assert Api(token).get("").status_code == 401


def test_writes_need_the_operate_permission(calls) -> None:
    _, token = reader()
    api = Api(token)
    assert api.get("").status_code == 200
    for path, body in [
        (f"slots/{calls[0]}/release/", {}),
        ("voice-calls/capacity/", {"capacity": 5}),
        ("voice-calls/max-hold/", {"max_hold": "1h"}),
    ]:
        response = api.post(path, body)
        assert response.status_code == 403
        assert "limits.operate_limit" in response.json()["error"]
    assert holders("voice-calls") == [("r1", "busy"), ("r2", "busy")]
    assert not AuditEvent.objects.exclude(action="sync").exists()


def test_writes_with_a_token_need_no_csrf_token(calls) -> None:
    _, token = operator()
    assert Api(token).post("voice-calls/capacity/", {"capacity": 3}).status_code == 200


def test_methods_are_checked(calls) -> None:
    _, token = operator()
    api = Api(token)
    assert api.get("voice-calls/capacity/").status_code == 405
    assert api.post("").status_code == 405


# --- reads --------------------------------------------------------------------------------------


def test_list_gives_every_limit_summary(calls) -> None:
    _, token = reader()
    limits = {limit["name"]: limit for limit in Api(token).get("").json()["limits"]}
    assert limits["voice-calls"]["busy"] == 2
    assert limits["voice-calls"]["waiting"] == 2


def test_one_limit_and_an_unknown_one(calls) -> None:
    _, token = reader()
    api = Api(token)
    assert api.get("voice-calls/").json()["capacity"] == 2
    response = api.get("nope/")
    assert (response.status_code, response.json()) == (404, {"error": "unknown limit 'nope'", "field": "limit"})
    assert api.get("nope/slots/").status_code == 404
    assert api.get("nope/queue/").status_code == 404


def test_slots_and_queue_are_paginated_in_order(calls) -> None:
    _, token = reader()
    api = Api(token)
    Slot.objects.filter(id=calls[0]).update(state="reserved", reserved_until=Slot.objects.get(id=calls[0]).expires_at)
    Limit.objects.filter(name="voice-calls").update(busy_count=1, reserved_count=1)
    first = api.get("voice-calls/slots/", page=1, size=1).json()
    second = api.get("voice-calls/slots/", page=2, size=1).json()
    past = api.get("voice-calls/slots/", page=3, size=1).json()
    assert [slot["run"] for slot in first["slots"] + second["slots"]] == ["r2", "r1"]  # busy first
    assert (first["has_next"], second["has_next"], first["total"]) == (True, False, 2)
    assert past["slots"] == []
    queue = [api.get("voice-calls/queue/", page=page, size=1).json()["queue"] for page in (1, 2)]
    assert [(entry["position"], entry["run"]) for page in queue for entry in page] == [(1, "r3"), (2, "r4")]


@pytest.mark.parametrize(("params", "field"), [({"page": 0}, "page"), ({"size": 501}, "size"), ({"size": "x"}, "size")])
def test_bad_page_parameters_are_400(calls, params, field) -> None:
    _, token = reader()
    response = Api(token).get("voice-calls/slots/", **params)
    assert (response.status_code, response.json()["field"]) == (400, field)


def test_pages_take_the_same_number_of_queries_whatever_the_limit_size(calls) -> None:
    """A limit may hold 100,000 slots: a page must never cost more queries as it grows."""
    _, token = reader()
    api = Api(token)
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, big={"capacity": 30, "max_hold": "1h"})
    for n in range(60):
        acquire("big", run_id=f"b{n}")
    counts = []
    for name, page in [("voice-calls", 1), ("big", 1), ("big", 3)]:
        for path in ("slots/", "queue/"):
            with CaptureQueriesContext(connection) as queries:
                assert api.get(f"{name}/{path}", page=page, size=10).status_code == 200
            counts.append((path, len(queries)))
    assert len({count for path, count in counts if path == "slots/"}) == 1
    assert len({count for path, count in counts if path == "queue/"}) == 1


def test_one_slot_and_an_unknown_one(calls) -> None:
    _, token = reader()
    api = Api(token)
    slot = api.get(f"slots/{calls[0]}/").json()
    assert (slot["limit"], slot["state"], slot["run"], slot["label"]) == ("voice-calls", "busy", "r1", "call-1")
    assert api.get("slots/slot_nope/").status_code == 404


# --- writes -------------------------------------------------------------------------------------


def test_release_is_recorded_for_the_token_owner_and_idempotent(calls) -> None:
    _, token = operator()
    api = Api(token)
    first = api.post(f"slots/{calls[0]}/release/")
    assert first.status_code == 200
    assert first.json()["released"] is True
    assert first.json()["slot"]["limit"] == "voice-calls"
    again = api.post(f"slots/{calls[0]}/release/")
    assert (again.status_code, again.json()["released"]) == (200, False)
    assert AuditEvent.objects.get(action="release").actor == "api:ops"


def test_release_of_an_unknown_slot_is_404(calls) -> None:
    _, token = operator()
    response = Api(token).post("slots/slot_nope/release/")
    assert (response.status_code, response.json()["field"]) == (404, "slot_id")


def test_capacity_set_and_reset(calls) -> None:
    _, token = operator()
    api = Api(token)
    answer = api.post("voice-calls/capacity/", {"capacity": 3}).json()
    limit = answer["limit"]
    # the raise reserved a slot for r3: busy (confirmed) 2, reserved 1, in use 3 (SPEC 6.5)
    assert (answer["old"], limit["capacity"], limit["busy"], limit["reserved"], limit["in_use"]) == (2, 3, 2, 1, 3)
    answer = api.post("voice-calls/capacity/", {"capacity": None}).json()
    assert (answer["old"], answer["limit"]["capacity"], answer["limit"]["capacity_overridden"]) == (3, 2, False)
    assert AuditEvent.objects.filter(action="capacity", actor="api:ops").count() == 2


@pytest.mark.parametrize("value", [0, 100_001, "3", 2.0, True, [3]])
def test_capacity_bad_values_are_400_naming_the_field(calls, value) -> None:
    _, token = operator()
    response = Api(token).post("voice-calls/capacity/", {"capacity": value})
    assert response.status_code == 400
    assert response.json()["field"] == "capacity"
    assert "from 1 to 100000" in response.json()["error"]
    assert Limit.objects.get(name="voice-calls").capacity_override is None


@pytest.mark.parametrize(("raw", "field"), [("not json", "body"), ("[1]", "body"), ("{}", "capacity")])
def test_capacity_bad_bodies_are_400(calls, raw, field) -> None:
    _, token = operator()
    response = Api(token).post("voice-calls/capacity/", raw=raw)
    assert (response.status_code, response.json()["field"]) == (400, field)


def test_max_hold_set_and_reset(calls) -> None:
    _, token = operator()
    api = Api(token)
    answer = api.post("voice-calls/max-hold/", {"max_hold": "1h"}).json()
    assert (answer["old"], answer["limit"]["max_hold_ms"]) == (45 * 60_000, 3_600_000)
    assert api.post("voice-calls/max-hold/", {"max_hold": 90_000}).json()["limit"]["max_hold_ms"] == 90_000
    answer = api.post("voice-calls/max-hold/", {"max_hold": None}).json()
    assert (answer["limit"]["max_hold_ms"], answer["limit"]["max_hold_overridden"]) == (45 * 60_000, False)


@pytest.mark.parametrize("value", ["31d", 0, "abc", -1, 2.5])
def test_max_hold_bad_values_are_400_naming_the_field(calls, value) -> None:
    _, token = operator()
    response = Api(token).post("voice-calls/max-hold/", {"max_hold": value})
    assert (response.status_code, response.json()["field"]) == (400, "max_hold")


def test_writes_to_an_unknown_limit_are_404(calls) -> None:
    _, token = operator()
    api = Api(token)
    assert api.post("nope/capacity/", {"capacity": 3}).status_code == 404
    assert api.post("nope/max-hold/", {"max_hold": "1h"}).status_code == 404


def test_a_limit_may_be_named_slots(calls) -> None:
    declare(slots={"capacity": 1, "max_hold": "1m"})
    _, token = reader()
    api = Api(token)
    assert api.get("slots/").json()["name"] == "slots"
    assert api.get("slots/slots/").json()["limit"] == "slots"


def test_an_unknown_api_path_is_a_json_404_and_a_path_without_its_slash_is_redirected(calls) -> None:
    _, token = reader()
    api = Api(token)
    expected = {
        "error": "no such API path: /api/limits/voice-calls/no-such-thing/ (see the README, section 'The JSON API')",
        "field": None,
    }
    for response in (api.get("voice-calls/no-such-thing/"), api.post("voice-calls/no-such-thing/", {})):
        assert (response.status_code, response["Content-Type"]) == (404, "application/json")
        assert response.json() == expected
    assert api.get("slots/not-a-slot-id/").json()["error"].startswith("no such API path")
    anonymous = Api(None).get("voice-calls/no-such-thing/")
    assert anonymous.status_code == 401  # like every API path: the token first
    response = api.get("voice-calls")
    assert (response.status_code, response["Location"]) == (301, "/api/limits/voice-calls/")


def test_a_max_hold_of_digits_in_text_needs_a_unit_while_a_json_number_is_milliseconds(calls) -> None:
    """Issue 15, item 3: text always needs a unit; only a JSON number is milliseconds (as an int
    in the workspace config is)."""
    _, token = operator()
    response = Api(token).post("voice-calls/max-hold/", {"max_hold": "45"})
    assert response.status_code == 400
    assert response.json() == {"error": "max hold '45' needs a unit: 45s, 45m, 45h", "field": "max_hold"}
    assert Limit.objects.get(name="voice-calls").max_hold_override_ms is None
