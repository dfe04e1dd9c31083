"""SPEC 12.5 on the JSON API: GET and POST /api/limits/-/box/ show and change the box's run
concurrency (base, burst, either or both, null resets), an operator's write like capacity (401
without a token, 403 without limits.operate_limit), audited as `api:<username>`; a bad value is a
400 naming the field and changes nothing. Every list has the box's row, first."""

from __future__ import annotations

import pytest

from limits import services
from limits.config import define_workspace
from limits.engine.operator_actions import NO_BOX
from limits.models import AuditEvent, Limit
from studio.workflows import start_run, step, workflow
from tests.api.conftest import Api, operator, reader
from tests.factories import holders, queue

pytestmark = pytest.mark.django_db(transaction=True)


@step
def work(label: str) -> str:
    return label


@workflow(name="api_box_one")
def one(input: dict) -> str:
    return work(input["label"])


@workflow(name="api_box_two", concurrency={"total": 4})
def two(input: dict) -> str:
    return work(input["label"])


@pytest.fixture
def busy_box(no_worker) -> list[str]:
    """Base 1, burst 2 (ceiling 2): a run of each workflow executes, a third run waits."""
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 1, "burst": 2.0}))
    return [run.id for run in (start_run(one, {"label": "a"}), start_run(two, {"label": "b"}), start_run(two, {}))]


def values() -> tuple[int | None, float | None, int]:
    box = Limit.objects.get(name="box")
    return box.per_key, box.burst, box.capacity


def test_get_box_answers_its_row_with_base_and_burst(busy_box) -> None:
    response = Api(reader()[1]).get("-/box/")
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("name", "kind", "capacity", "base", "burst", "busy", "waiting")} == {
        "name": "box",
        "kind": "box",
        "capacity": 2,
        "base": 1,
        "burst": 2.0,
        "busy": 2,
        "waiting": 1,
    }
    assert (body["declared_base"], body["base_overridden"], body["max_hold_ms"]) == (1, False, None)
    assert Api(operator()[1]).get("box/").json() == body  # the box is a limit too: the same row


def test_post_box_changes_either_or_both_audited_and_grants_at_once(busy_box) -> None:
    api = Api(operator()[1])
    response = api.post("-/box/", {"base": 2})
    assert response.status_code == 200, response.json()
    assert response.json()["old"] == {"base": 1, "burst": 2.0, "ceiling": 2}
    assert (response.json()["limit"]["capacity"], response.json()["limit"]["base"]) == (4, 2)
    assert holders("box")[-1] == (busy_box[2], "reserved") and queue("box") == []
    response = api.post("-/box/", {"base": None, "burst": 3})
    assert response.status_code == 200
    assert values() == (1, 3.0, 3)
    rows = AuditEvent.objects.filter(action="box").order_by("id").values_list("actor", "new_value")
    assert list(rows) == [("api:ops", "base 2, burst 2, ceiling 4"), ("api:ops", "base 1, burst 3, ceiling 3")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"base": 0}, "base"),
        ({"base": "2"}, "base"),
        ({"base": 2.0}, "base"),
        ({"base": True}, "base"),
        ({"burst": 0.99}, "burst"),
        ({"burst": "fast"}, "burst"),
        ({"base": 3, "burst": 10.5}, "burst"),
        ({}, "base"),
        ({"bursts": 2}, "bursts"),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field_and_changes_nothing(busy_box, body, field) -> None:
    response = Api(operator()[1]).post("-/box/", body)
    assert (response.status_code, response.json()["field"]) == (400, field)
    assert response.json()["error"]
    assert values() == (1, 2.0, 2)
    assert not AuditEvent.objects.filter(action="box").exists()


def test_nan_is_refused_too(busy_box) -> None:
    response = Api(operator()[1]).post("-/box/", raw='{"burst": NaN}')
    assert (response.status_code, response.json()["field"]) == (400, "burst")
    assert values() == (1, 2.0, 2)


def test_a_reader_may_look_but_not_change_and_no_token_is_401(busy_box) -> None:
    refused = Api(reader()[1]).post("-/box/", {"base": 5})
    assert refused.status_code == 403
    assert Api(None).get("-/box/").status_code == 401
    assert Api(None).post("-/box/", {"base": 5}).status_code == 401
    assert values() == (1, 2.0, 2)


def test_without_run_concurrency_get_is_404_and_post_400(db) -> None:
    services.sync_workspace(define_workspace(limits={}))
    api = Api(operator()[1])
    assert (api.get("-/box/").status_code, api.get("-/box/").json()) == (404, {"error": NO_BOX, "field": "limit"})
    assert api.post("-/box/", {"base": 3}).status_code == 400
    assert not Limit.objects.filter(name="box").exists()


def test_the_list_has_the_box_first_and_a_capped_bound_says_so(busy_box) -> None:
    api = Api(reader()[1])
    rows = api.get("").json()["limits"]
    assert (rows[0]["name"], rows[0]["kind"], rows[0]["base"], rows[0]["burst"]) == ("box", "box", 1, 2.0)
    bound = next(row for row in rows if row["name"] == "workflow.api_box_two")
    assert (bound["capacity"], bound["in_force"], bound["capped_by_box"]) == (4, 1, True)
    detail = api.get("workflow.api_box_two/").json()
    assert (detail["in_force"], detail["capped_by_box"]) == (1, True)
    only = api.get("", kind="box").json()["limits"]
    assert [row["name"] for row in only] == ["box"]
