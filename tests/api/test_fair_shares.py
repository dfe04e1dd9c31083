"""SPEC 13.5 in the JSON API (issue 28): POST <name>/share/, <name>/weight/ and <name>/min/, the
share on a limit's row and the weight, min, fair share and pass on each key's. A bad value is a
400 naming the field and changes nothing; writes need limits.operate_limit; the keys page reads
the weights with one aggregate query, whatever the number of keys. SPEC 13.7 (issue 43): a fair
queue is answered in the order it is served, exact on the first page and estimated past it, with
why each run waits, in a constant number of queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits.models import AuditEvent, Limit, LimitKey, Slot
from limits.services import acquire
from tests.api.conftest import Api, operator, reader
from tests.cli.conftest import seed_fair

pytestmark = pytest.mark.django_db


@pytest.fixture
def fair() -> None:
    seed_fair()


@pytest.fixture
def ops() -> Api:
    return Api(operator()[1])


@pytest.fixture
def viewer() -> Api:
    return Api(reader()[1])


def _nothing_changed() -> None:
    assert Limit.objects.get(name="tenant-jobs").share_override == ""
    assert not LimitKey.objects.exclude(weight=1).exists()
    assert not LimitKey.objects.exclude(minimum=0).exists()
    assert not AuditEvent.objects.filter(action__in=["share", "weight", "min"]).exists()


def test_a_limit_row_has_its_share(fair, viewer) -> None:
    limit = viewer.get("tenant-jobs/").json()
    assert (limit["share"], limit["declared_share"], limit["share_overridden"]) == ("fair", "fair", False)
    rows = {row["name"]: row["share"] for row in viewer.get("").json()["limits"]}
    assert rows["tenant-jobs"] == "fair"


def test_keys_rows_carry_weight_min_and_fair_share(fair, ops, viewer) -> None:
    ops.post("tenant-jobs/weight/", {"value": 4, "key": "acme"})
    answer = viewer.get("tenant-jobs/keys/").json()
    rows = {row["key"]: (row["weight"], row["min"], row["fair_share"]) for row in answer["keys"]}
    assert rows == {"acme": (4, 0, 2.29), "globex": (1, 0, 0.57), "initech": (1, 0, 0.57)}  # 4 x w / 7
    assert (answer["no_key"]["weight"], answer["no_key"]["fair_share"]) == (1, 0.57)


def test_the_keys_page_reads_the_weights_in_one_query_whatever_the_number_of_keys(fair, viewer) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get("tenant-jobs/keys/").status_code == 200
        return len(captured)

    before = queries()
    for n in range(20):
        acquire("tenant-jobs", run_id=f"more-{n}", key=f"tenant-{n}", timeout="1h")
    assert queries() == before


def test_share_switches_and_null_resets(fair, ops) -> None:
    response = ops.post("tenant-jobs/share/", {"value": "fifo"})
    assert response.status_code == 200
    assert (response.json()["old"], response.json()["limit"]["share"]) == ("fair", "fifo")
    assert AuditEvent.objects.get(action="share").actor == "api:ops"
    answer = ops.post("tenant-jobs/share/", {"value": None}).json()
    assert (answer["old"], answer["limit"]["share"], answer["limit"]["share_overridden"]) == ("fifo", "fair", False)


def test_weight_and_min_change_one_key_and_answer_its_row(fair, ops) -> None:
    answer = ops.post("tenant-jobs/weight/", {"value": 3, "key": "globex"}).json()
    assert answer["old"] == 1
    assert (answer["key"]["key"], answer["key"]["weight"], answer["key"]["fair_share"]) == ("globex", 3, 2.0)
    answer = ops.post("tenant-jobs/min/", {"value": 2, "key": "initech"}).json()
    assert (answer["old"], answer["key"]["min"]) == (0, 2)
    answer = ops.post("tenant-jobs/min/", {"value": None, "key": "initech"}).json()
    assert (answer["old"], answer["key"]["min"]) == (2, 0)
    events = AuditEvent.objects.filter(action__in=["weight", "min"]).order_by("id")
    assert list(events.values_list("action", "key", "actor")) == [
        ("weight", "globex", "api:ops"),
        ("min", "initech", "api:ops"),
        ("min", "initech", "api:ops"),
    ]


@pytest.mark.parametrize(
    ("path", "body", "field", "start"),
    [
        ("share/", {"value": "lottery"}, "value", "share must be 'fifo' or 'fair'"),
        ("share/", {"value": 1}, "value", "share must be 'fifo' or 'fair'"),
        ("share/", {}, "value", "value is required"),
        ("weight/", {"value": 0, "key": "acme"}, "value", "weight must be a whole number from 1 to 100"),
        ("weight/", {"value": "2", "key": "acme"}, "value", "weight must be a whole number from 1 to 100"),
        ("weight/", {"value": True, "key": "acme"}, "value", "weight must be a whole number from 1 to 100"),
        ("weight/", {"value": 2}, "key", "key is required"),
        ("weight/", {"value": 2, "key": ""}, "key", "key must be a string"),
        ("min/", {"value": 5, "key": "acme"}, "value", "min must be a whole number from 0 to capacity (4)"),
        ("min/", {"value": -1, "key": "acme"}, "value", "min must be a whole number from 0 to capacity (4)"),
        ("min/", {"key": "acme"}, "value", "value is required"),
        ("min/", {"value": 1, "key": 7}, "key", "key must be a string"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_field_and_changes_nothing(fair, ops, path, body, field, start) -> None:
    response = ops.post(f"tenant-jobs/{path}", body)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["error"].startswith(start)
    _nothing_changed()


@pytest.mark.parametrize(
    ("path", "body"),
    [("share/", {"value": "fair"}), ("weight/", {"value": 2, "key": "a"}), ("min/", {"value": 1, "key": "a"})],
)
def test_writes_need_the_operate_permission_and_a_known_limit(fair, ops, viewer, path, body) -> None:
    assert viewer.post(f"tenant-jobs/{path}", body).status_code == 403
    assert Api(None).post(f"tenant-jobs/{path}", body).status_code == 401
    missing = ops.post(f"nope/{path}", body)
    assert (missing.status_code, missing.json()["field"]) == (404, "limit")
    assert Api(operator("other")[1]).client.get(f"/api/limits/tenant-jobs/{path}").status_code in (401, 405)
    _nothing_changed()


def test_keys_rows_carry_each_keys_pass_in_turns(fair, viewer) -> None:
    """acme's four grants took it four turns on; globex, initech and the runs without a key
    entered the turns at its pass (SPEC 13.2)."""
    answer = viewer.get("tenant-jobs/keys/").json()
    assert {row["key"]: row["pass"] for row in answer["keys"]} == {"acme": 4.0, "globex": 4.0, "initech": 4.0}
    assert answer["no_key"]["pass"] == 4.0


# --- the queue of a fair limit (SPEC 13.7) --------------------------------------------------------


def test_a_fair_queue_is_answered_in_the_order_it_is_served(fair, ops, viewer) -> None:
    """The first row is the run the next freed slot goes to: releasing the oldest slot grants it.
    The others say they wait for their turn."""
    answer = viewer.get("tenant-jobs/queue/").json()
    assert answer["order"] == "fair"
    rows = answer["queue"]
    assert [(row["position"], row["run"], row["position_estimated"]) for row in rows] == [
        (1, "r7", False),
        (2, "r8", False),
        (3, "r9", False),
        (4, "r5", False),
        (5, "r6", False),
    ]
    assert [row["reason"]["code"] for row in rows] == ["limit_full", "fair_turn", "fair_turn", "fair_turn", "fair_turn"]
    assert rows[2]["reason"]["text"] == "other keys hold less of their share and are served first"
    oldest = Slot.objects.filter(limit__name="tenant-jobs", state="busy").order_by("granted_at", "id").first()
    assert ops.post(f"slots/{oldest.id}/release/").json()["released"] is True
    assert Slot.objects.get(limit__name="tenant-jobs", state="reserved").run_id == rows[0]["run"]
    assert [row["run"] for row in viewer.get("tenant-jobs/queue/").json()["queue"]] == ["r8", "r9", "r5", "r6"]


def test_pages_of_a_fair_queue_are_exact_first_then_estimated_without_a_run_twice(fair, viewer) -> None:
    first, second, third = (viewer.get("tenant-jobs/queue/", page=n, size=2).json() for n in (1, 2, 3))
    assert [row["position_estimated"] for row in first["queue"]] == [False, False]
    assert [(row["position"], row["position_estimated"]) for row in second["queue"]] == [(3, True), (4, True)]
    runs = [row["run"] for page in (first, second, third) for row in page["queue"]]
    assert sorted(runs) == ["r5", "r6", "r7", "r8", "r9"] and runs[:2] == ["r7", "r8"]
    assert first["has_next"] and not third["has_next"]


def test_a_fifo_queue_is_answered_in_arrival_order(viewer) -> None:
    from tests.cli.conftest import seed_tenants

    seed_tenants()
    answer = viewer.get("voice-calls/queue/").json()
    assert answer["order"] == "arrival"
    assert [(row["run"], row["position_estimated"]) for row in answer["queue"]] == [("r3", False), ("r6", False)]


def test_a_fair_queue_page_costs_the_same_queries_with_few_keys_or_many(fair, viewer) -> None:
    """The page reads the keys that can come up on it (along limitkey_fair_order on PostgreSQL)
    and their first runs, never every key or every run."""

    def queries(page: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get("tenant-jobs/queue/", page=page, size=10).status_code == 200
        return len(captured)

    def tenants(start: int, count: int) -> None:
        for n in range(start, start + count):
            for i in range(2):
                acquire("tenant-jobs", run_id=f"t{n}-{i}", key=f"tenant-{n:04}", timeout="1h")

    tenants(0, 20)
    few = queries(1), queries(3)
    tenants(20, 300)
    assert (queries(1), queries(3)) == few
