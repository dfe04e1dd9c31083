"""SPEC 14.1, 14.5, 14.6 in the JSON API (issue 47): POST <name>/on-full/ and <name>/max-waiting/,
and on_full, max_waiting, max_waiting_per_key (with their declared values) and the skipped and
refused counts on a limit's row. A bad value is a 400 naming the field and changes nothing
('cancel_running' too: a workflow's own bound's only); writes need limits.operate_limit and are
audited as the token's owner."""

from __future__ import annotations

import pytest

from limits.models import AuditEvent, Limit
from limits.services import acquire
from tests.api.conftest import Api, operator, reader
from tests.cli.conftest import seed_when_full
from tests.factories import queue

pytestmark = pytest.mark.django_db

ACTIONS = ["on_full", "max_waiting", "max_waiting_key"]


@pytest.fixture
def full() -> None:
    seed_when_full()


@pytest.fixture
def ops() -> Api:
    return Api(operator()[1])


@pytest.fixture
def viewer() -> Api:
    return Api(reader()[1])


def _values(name: str) -> tuple[str, int | None, int | None]:
    limit = Limit.objects.get(name=name)
    return limit.on_full, limit.max_waiting, limit.max_waiting_per_key


def _nothing_changed() -> None:
    assert _values("report-exports") == ("skip", None, None)
    assert _values("partner-api") == ("wait", 2, 1)
    assert not AuditEvent.objects.filter(action__in=ACTIONS).exists()


def test_a_limit_row_has_its_on_full_caps_and_counts(full, viewer) -> None:
    limit = viewer.get("partner-api/").json()
    assert {key: limit[key] for key in limit if "on_full" in key or "max_waiting" in key} == {
        "on_full": "wait",
        "declared_on_full": "wait",
        "on_full_overridden": False,
        "max_waiting": 2,
        "declared_max_waiting": 2,
        "max_waiting_overridden": False,
        "max_waiting_per_key": 1,
        "declared_max_waiting_per_key": 1,
        "max_waiting_per_key_overridden": False,
    }
    assert (limit["skipped_count"], limit["refused_count"]) == (0, 2)
    rows = {row["name"]: row for row in viewer.get("").json()["limits"]}
    exports = rows["report-exports"]
    assert (exports["on_full"], exports["max_waiting"], exports["skipped_count"], exports["refused_count"]) == (
        "skip",
        None,
        1,
        0,
    )


def test_on_full_sets_and_null_resets_and_the_next_acquisition_follows_it(full, ops) -> None:
    response = ops.post("partner-api/on-full/", {"value": "skip"})
    assert response.status_code == 200
    answer = response.json()
    assert (answer["old"], answer["limit"]["on_full"], answer["limit"]["on_full_overridden"]) == ("wait", "skip", True)
    event = AuditEvent.objects.get(action="on_full")
    assert (event.actor, event.old_value, event.new_value) == ("api:ops", "wait", "skip")
    ops.post("partner-api/max-waiting/", {"value": 10})
    assert acquire("partner-api", run_id="p6", key="initech").state == "skipped"
    answer = ops.post("partner-api/on-full/", {"value": None}).json()
    assert (answer["old"], answer["limit"]["on_full"], answer["limit"]["on_full_overridden"]) == ("skip", "wait", False)
    assert answer["limit"]["skipped_count"] == 1
    assert acquire("partner-api", run_id="p7", key="initech", timeout="1h").state == "waiting"


def test_max_waiting_caps_the_queue_or_each_keys_part_and_null_resets(full, ops) -> None:
    answer = ops.post("partner-api/max-waiting/", {"value": 1}).json()
    assert (answer["old"], answer["limit"]["max_waiting"], answer["limit"]["max_waiting_overridden"]) == (2, 1, True)
    assert queue("partner-api") == ["p2", "p4"]  # lowering it takes nobody out
    answer = ops.post("partner-api/max-waiting/", {"value": 4, "per_key": True}).json()
    assert (answer["old"], answer["limit"]["max_waiting_per_key"], answer["limit"]["max_waiting"]) == (1, 4, 1)
    refused = acquire("partner-api", run_id="p6", key="initech", timeout="1h")
    assert (refused.state, refused.reason) == ("refused", "queue_full")
    answer = ops.post("partner-api/max-waiting/", {"value": None, "per_key": False}).json()
    assert (answer["old"], answer["limit"]["max_waiting"], answer["limit"]["max_waiting_overridden"]) == (1, 2, False)
    assert answer["limit"]["refused_count"] == 3
    events = AuditEvent.objects.filter(action__in=ACTIONS).order_by("id")
    assert list(events.values_list("action", "actor", "old_value", "new_value")) == [
        ("max_waiting", "api:ops", "2", "1"),
        ("max_waiting_key", "api:ops", "1", "4"),
        ("max_waiting", "api:ops", "1", "2 (declared)"),
    ]


@pytest.mark.parametrize(
    ("path", "body", "field", "start"),
    [
        ("on-full/", {"value": "drop"}, "value", "on_full must be 'wait', 'skip' or 'replace', not 'drop'"),
        ("on-full/", {"value": "cancel_running"}, "value", "on_full must be 'wait', 'skip' or 'replace'"),
        ("on-full/", {"value": "SKIP"}, "value", "on_full must be 'wait', 'skip' or 'replace'"),
        ("on-full/", {"value": 1}, "value", "on_full must be 'wait', 'skip' or 'replace'"),
        ("on-full/", {"value": ["skip"]}, "value", "on_full must be 'wait', 'skip' or 'replace'"),
        ("on-full/", {"value": {"skip": True}}, "value", "on_full must be 'wait', 'skip' or 'replace'"),
        ("on-full/", {}, "value", "value is required"),
        ("max-waiting/", {"value": 0}, "value", "max_waiting must be a whole number from 1 to 1,000,000"),
        ("max-waiting/", {"value": 1_000_001}, "value", "max_waiting must be a whole number from 1 to 1,000,000"),
        ("max-waiting/", {"value": "5"}, "value", "max_waiting must be a whole number"),
        ("max-waiting/", {"value": 2.5}, "value", "max_waiting must be a whole number"),
        ("max-waiting/", {"value": True}, "value", "max_waiting must be a whole number"),
        ("max-waiting/", {"value": 10**40}, "value", "max_waiting must be a whole number"),
        ("max-waiting/", {"value": -1, "per_key": True}, "value", "max_waiting_per_key must be a whole number"),
        ("max-waiting/", {"value": 3, "per_key": "yes"}, "per_key", "per_key must be true"),
        ("max-waiting/", {"value": 3, "per_key": 1}, "per_key", "per_key must be true"),
        ("max-waiting/", {"value": 3, "per_key": None}, "per_key", "per_key must be true"),
        ("max-waiting/", {"per_key": True}, "value", "value is required"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_field_and_changes_nothing(full, ops, path, body, field, start) -> None:
    response = ops.post(f"partner-api/{path}", body)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["error"].startswith(start)
    _nothing_changed()


@pytest.mark.parametrize("raw", ["[1]", "not json", '"skip"', "null"])
@pytest.mark.parametrize("path", ["on-full/", "max-waiting/"])
def test_a_body_that_is_not_a_json_object_is_a_400(full, ops, path, raw) -> None:
    response = ops.post(f"partner-api/{path}", raw=raw)
    assert (response.status_code, response.json()["field"]) == (400, "body")
    _nothing_changed()


@pytest.mark.parametrize(("path", "body"), [("on-full/", {"value": "skip"}), ("max-waiting/", {"value": 3})])
def test_writes_need_the_operate_permission_and_a_known_limit(full, ops, viewer, path, body) -> None:
    assert viewer.post(f"partner-api/{path}", body).status_code == 403
    assert Api(None).post(f"partner-api/{path}", body).status_code == 401
    missing = ops.post(f"nope/{path}", body)
    assert (missing.status_code, missing.json()["field"]) == (404, "limit")
    assert ops.get(f"partner-api/{path}").status_code == 405
    _nothing_changed()


def test_the_box_has_neither_on_full_nor_caps_of_its_own(full, ops) -> None:
    from limits.config import define_workspace
    from limits.services import sync_workspace

    sync_workspace(
        define_workspace(
            limits={"partner-api": {"capacity": 1, "max_hold": "10m"}}, run_concurrency={"base": 1, "burst": 2.0}
        )
    )
    for path, body in (("on-full/", {"value": "skip"}), ("max-waiting/", {"value": 3, "per_key": True})):
        response = ops.post(f"box/{path}", body)
        assert (response.status_code, response.json()["field"]) == (400, "value")
        assert response.json()["error"].startswith("'box' is the box's run concurrency")
    box = Limit.objects.get(name="box")
    assert (box.on_full, box.max_waiting, box.max_waiting_per_key) == ("wait", None, None)


def test_replace_is_set_and_the_row_counts_the_replaced(full, ops) -> None:
    """SPEC 14.3, 14.6: POST on-full 'replace'; a newer acquisition of a key replaces its waiting
    run, and the limit's row counts it (replaced_count)."""
    answer = ops.post("report-exports/on-full/", {"value": "replace"}).json()
    assert (answer["old"], answer["limit"]["on_full"], answer["limit"]["replaced_count"]) == ("skip", "replace", 0)
    acquire("report-exports", run_id="r1", key="acme", timeout="1h")
    acquire("report-exports", run_id="r2", key="acme", timeout="1h")
    assert acquire("report-exports", run_id="r3", key="acme", timeout="1h").state == "waiting"
    assert ops.get("report-exports/").json()["replaced_count"] >= 1


def test_cancel_running_is_set_on_a_workflow_s_own_bound_and_counted(full, ops, clock) -> None:
    """SPEC 14.4, 14.6: a workflow's own bound takes 'cancel_running' (audited as the token's
    owner); the row counts the runs it cancelled (cancelled_count). A named limit refuses it above."""
    from limits.runs import bounds as run_bounds
    from limits.runs import start_run
    from stackbone.models import Run
    from tests.runs.test_cancel_running import PER_CALL, executing, per_call

    run_bounds.sync(["test_cancel_running_per_call"])
    answer = ops.post(f"{PER_CALL}/on-full/", {"value": "cancel_running"}).json()
    assert (answer["old"], answer["limit"]["on_full"], answer["limit"]["cancelled_count"]) == (
        "wait",
        "cancel_running",
        0,
    )
    first = start_run(per_call, {"label": "one"})
    executing(first)
    newer = start_run(per_call, {"label": "two"})
    assert Run.objects.get(id=first.id).caused_by == newer.id
    assert ops.get(f"{PER_CALL}/").json()["cancelled_count"] == 1
    audit = AuditEvent.objects.filter(limit__name=PER_CALL, action="on_full").get()
    assert (audit.actor, audit.new_value) == ("api:ops", "cancel_running")
