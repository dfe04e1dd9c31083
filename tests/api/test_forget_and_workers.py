"""The API behind `stackbone limits forget --agent` and `stackbone workers --agent` (issue 30):
`POST /api/limits/<name>/forget/` (an operator's write: audited by ForgottenLimit as
`api:<username>`; refused as things stand is a 409 naming the limit; bad input a 400 naming the
field; nothing changes unless it answers 200) and `GET /api/limits/-/workers/` (any token)."""

from __future__ import annotations

import pytest

from limits import workers
from limits.models import ForgottenLimit, Limit
from limits.services import acquire, release
from tests.api.conftest import Api, operator, reader
from tests.factories import declare

pytestmark = pytest.mark.django_db


@pytest.fixture
def old_calls() -> None:
    """old-calls held a slot and left the config; voice-calls is declared with a busy slot."""
    declare(old_calls={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 20, "max_hold": "1h"})
    release(acquire("old-calls", run_id="r1").slot_id)
    acquire("voice-calls", run_id="r2")
    declare(voice_calls={"capacity": 20, "max_hold": "1h"})


def nothing_forgotten() -> bool:
    return Limit.objects.filter(name="old-calls").exists() and not ForgottenLimit.objects.exists()


def test_an_operator_forgets_an_undeclared_idle_limit(old_calls) -> None:
    response = Api(operator()[1]).post("old-calls/forget/")
    assert response.status_code == 200, response.content
    answer = response.json()
    assert (answer["forgotten"], answer["limit"], answer["kind"], answer["actor"]) == (
        True,
        "old-calls",
        "limit",
        "api:ops",
    )
    assert answer["removed"]["slots"] == 1
    assert not Limit.objects.filter(name="old-calls").exists()
    assert ForgottenLimit.objects.get().actor == "api:ops"


def test_forget_with_no_body_works_too(old_calls) -> None:
    response = Api(operator()[1]).post("old-calls/forget/", raw="")
    assert response.status_code == 200, response.content


def test_a_declared_or_busy_limit_is_a_409_naming_the_limit(old_calls) -> None:
    response = Api(operator()[1]).post("voice-calls/forget/")
    assert response.status_code == 409
    assert response.json()["field"] == "limit" and "still declared" in response.json()["error"]
    assert Limit.objects.filter(name="voice-calls").exists() and not ForgottenLimit.objects.exists()


def test_a_limit_with_a_run_waiting_is_a_409(old_calls) -> None:
    declare(old_calls={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 20, "max_hold": "1h"})
    acquire("old-calls", run_id="r3")
    acquire("old-calls", run_id="r4", timeout="1h")
    declare(voice_calls={"capacity": 20, "max_hold": "1h"})
    response = Api(operator()[1]).post("old-calls/forget/")
    assert response.status_code == 409
    assert "1 slot(s) in use and 1 run(s) waiting" in response.json()["error"]
    assert nothing_forgotten()


def test_an_unknown_limit_is_a_404(old_calls) -> None:
    response = Api(operator()[1]).post("nope/forget/")
    assert (response.status_code, response.json()["field"]) == (404, "limit")


@pytest.mark.parametrize("raw", ["[1]", "not json", '"old-calls"'])
def test_a_bad_body_is_a_400_naming_the_body_and_forgets_nothing(old_calls, raw) -> None:
    response = Api(operator()[1]).post("old-calls/forget/", raw=raw)
    assert (response.status_code, response.json()["field"]) == (400, "body")
    assert nothing_forgotten()


def test_a_reader_may_not_forget(old_calls) -> None:
    response = Api(reader()[1]).post("old-calls/forget/")
    assert response.status_code == 403 and "may not operate limits" in response.json()["error"]
    assert nothing_forgotten()


def test_forget_needs_a_token_and_a_post(old_calls) -> None:
    assert Api(None).post("old-calls/forget/").status_code == 401
    assert Api(operator()[1]).get("old-calls/forget/").status_code == 405
    assert nothing_forgotten()


def test_the_workers_report_answers_any_token(old_calls, monkeypatch) -> None:
    monkeypatch.setattr(workers, "ask", lambda: workers.Workers((workers.Worker("celery@a", "a", "prefork", 2, 1),)))
    workers.forget_answers()
    try:
        response = Api(reader()[1]).get("-/workers/")
    finally:
        workers.forget_answers()
    assert response.status_code == 200
    answer = response.json()
    assert answer["workers"] == [{"name": "celery@a", "host": "a", "pool": "prefork", "concurrency": 2, "busy": 1}]
    assert (answer["concurrency"], answer["busy"], answer["note"]) == (2, 1, None)
    assert answer["pending"] == {"runs": 0, "oldest_seconds": None}
    assert answer["bounded_by_workers"][0] == {"limit": "voice-calls", "kind": "limit", "capacity": 20}


def test_the_workers_report_needs_a_token_and_a_get(old_calls) -> None:
    assert Api(None).get("-/workers/").status_code == 401
    assert Api(reader()[1]).post("-/workers/").status_code == 405


def test_a_limit_named_dash_keeps_its_own_paths(old_calls) -> None:
    """'-' is a valid limit name: its page is /api/limits/-/, the workers' report is not."""
    declare(**{"-": {"capacity": 2, "max_hold": "1h"}})
    response = Api(reader()[1]).get("-/")
    assert (response.status_code, response.json()["name"]) == (200, "-")
