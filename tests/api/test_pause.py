"""SPEC 5.6 on the JSON API: POST /api/limits/<name>/pause/ and /resume/, an operator's write like
capacity (403 without limits.operate_limit, 404 for an unknown limit, 400 for a body that is not
a JSON object), audited as `api:<username>`; every limit's JSON says `paused` and `paused_at`."""

from __future__ import annotations

import pytest

from limits.models import AuditEvent, Limit
from limits.services import pause_limit, release
from tests.api.conftest import Api, operator, reader
from tests.factories import holders, queue

pytestmark = pytest.mark.django_db


def _audit() -> list[tuple[str, str, str, str]]:
    rows = AuditEvent.objects.filter(action__in=["pause", "resume"]).order_by("id")
    return list(rows.values_list("action", "actor", "old_value", "new_value"))


def test_pause_then_resume_answer_the_old_state_and_the_limit_and_are_audited(calls) -> None:
    api = Api(operator()[1])
    response = api.post("voice-calls/pause/")
    assert response.status_code == 200
    body = response.json()
    assert body["old"] == "running"
    assert body["limit"]["paused"] is True
    assert body["limit"]["paused_at"] == Limit.objects.get(name="voice-calls").paused_at.isoformat()
    release(calls[0])
    assert queue("voice-calls") == ["r3", "r4"]  # paused: the freed slot goes to nobody

    response = api.post("voice-calls/resume/", raw="")  # no body at all is fine too
    assert response.status_code == 200
    assert response.json()["old"] == "paused"
    assert (response.json()["limit"]["paused"], response.json()["limit"]["paused_at"]) == (False, None)
    assert holders("voice-calls") == [("r2", "busy"), ("r3", "reserved")]
    assert _audit() == [("pause", "api:ops", "running", "paused"), ("resume", "api:ops", "paused", "running")]


def test_a_second_pause_answers_old_paused_and_records_nothing(calls) -> None:
    api = Api(operator()[1])
    api.post("voice-calls/pause/", {})
    again = api.post("voice-calls/pause/", {})
    assert (again.status_code, again.json()["old"], again.json()["limit"]["paused"]) == (200, "paused", True)
    assert api.post("voice-calls/resume/").json()["old"] == "paused"
    assert api.post("voice-calls/resume/").json()["old"] == "running"
    assert [row[0] for row in _audit()] == ["pause", "resume"]


def test_every_limit_json_says_whether_it_is_paused(calls) -> None:
    api = Api(reader()[1])
    assert (api.get("voice-calls/").json()["paused"], api.get("voice-calls/").json()["paused_at"]) == (False, None)
    pause_limit("voice-calls", actor="test")
    paused_at = Limit.objects.get(name="voice-calls").paused_at.isoformat()
    assert api.get("voice-calls/").json()["paused_at"] == paused_at
    listed = {limit["name"]: (limit["paused"], limit["paused_at"]) for limit in api.get("").json()["limits"]}
    assert listed["voice-calls"] == (True, paused_at)
    assert {state for name, state in listed.items() if name != "voice-calls"} <= {(False, None)}


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_reader_is_403_and_nothing_changes(calls, verb) -> None:
    if verb == "resume":
        pause_limit("voice-calls", actor="test")
    before = Limit.objects.get(name="voice-calls").paused_at
    response = Api(reader()[1]).post(f"voice-calls/{verb}/")
    assert response.status_code == 403
    assert "limits.operate_limit" in response.json()["error"]
    assert Limit.objects.get(name="voice-calls").paused_at == before
    assert len(_audit()) == (1 if verb == "resume" else 0)


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_an_unknown_limit_is_404_naming_the_field(calls, verb) -> None:
    response = Api(operator()[1]).post(f"nope/{verb}/")
    assert response.status_code == 404
    assert response.json() == {"error": "unknown limit 'nope'", "field": "limit"}
    assert _audit() == []


@pytest.mark.parametrize("raw", ["[]", "3", "not json"])
def test_a_body_that_is_not_a_json_object_is_400_and_nothing_changes(calls, raw) -> None:
    response = Api(operator()[1]).post("voice-calls/pause/", raw=raw)
    assert response.status_code == 400
    assert response.json()["field"] == "body"
    assert not Limit.objects.get(name="voice-calls").paused


def test_without_a_token_it_is_401_and_a_get_is_405(calls) -> None:
    assert Api(None).post("voice-calls/pause/").status_code == 401
    assert Api(operator()[1]).get("voice-calls/pause/").status_code == 405
    assert not Limit.objects.get(name="voice-calls").paused
