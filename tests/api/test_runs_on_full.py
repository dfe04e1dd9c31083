"""SPEC 14.1, 14.2, 14.5, 14.6 through `POST /api/runs/` (issue 47): a start, and a batch, choose
`on_full` for that call as start_run(on_full=) does; a run its bounds cannot take at once under
'skip', or whose queue is at its cap, comes back ended 'skipped' with its reason and limit in the
answer; a bad `on_full` is a 400 naming the field, and nothing is written. Both databases.

Must never happen: a refused start creates a run, a queue entry or a limit row; a skipped run
waits in a queue; the answer says another status than the row's."""

from __future__ import annotations

from typing import Any

import pytest

from limits.models import AuditEvent, Limit, QueueEntry, Slot
from limits.runs import workflow
from stackbone.models import Run
from tests.api.test_runs import RunsApi, run_operator

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_worker", "clock")]

WAITS = "test_api_on_full_waits"
CAPPED = "test_api_on_full_capped"


@workflow(name=WAITS, concurrency={"total": 1})
def waits(input: dict) -> None:
    return None


@workflow(name=CAPPED, concurrency={"total": 1, "max_waiting": 1})
def capped(input: dict) -> None:
    return None


@pytest.fixture
def api() -> RunsApi:
    return RunsApi(run_operator()[1])


def start(api: RunsApi, body: dict[str, Any], status: int = 201) -> Any:
    response = api.post(body=body)
    assert response.status_code == status, response.content
    return response.json()


def written() -> tuple[list[tuple[str, str]], int, int, list[str], int]:
    """Every row a start could write: runs, queue entries, slots, limits, audit events."""
    return (
        sorted(Run.objects.values_list("id", "status")),
        QueueEntry.objects.count(),
        Slot.objects.count(),
        sorted(Limit.objects.values_list("name", flat=True)),
        AuditEvent.objects.count(),
    )


def assert_skipped(answer: dict[str, Any], reason: str, text: str, limit: str) -> None:
    assert (answer["status"], answer["end_reason"], answer["end_reason_text"], answer["end_limit"]) == (
        "skipped",
        reason,
        text,
        limit,
    )
    assert answer["caused_by"] == "" and answer["started_at"] is None and answer["waiting_for"] == []
    row = Run.objects.get(id=answer["id"])
    assert (row.status, row.end_reason, row.end_limit) == ("skipped", reason, limit)
    assert not QueueEntry.objects.filter(run_id=row.id).exists() and not Slot.objects.filter(run_id=row.id).exists()


def test_a_start_chooses_skip_and_comes_back_skipped_with_its_reason(api: RunsApi) -> None:
    holder = start(api, {"workflow": WAITS})
    skipped = start(api, {"workflow": WAITS, "input": {"n": 2}, "on_full": "skip"})
    waiting = start(api, {"workflow": WAITS, "on_full": None})  # null: the bound's own, wait
    explicit = start(api, {"workflow": WAITS, "on_full": "wait"})

    assert holder["status"] == "pending" and holder["end_reason"] == ""
    assert_skipped(skipped, "limit_full", "the limit is full", f"workflow.{WAITS}")
    assert (waiting["status"], explicit["status"]) == ("queued", "queued")
    assert waiting["waiting_for"] == [f"workflow.{WAITS}"]
    assert Limit.objects.get(name=f"workflow.{WAITS}").skipped_count == 1
    shown = api.get(f"{skipped['id']}/").json()
    assert (shown["status"], shown["end_reason"], shown["end_limit"]) == ("skipped", "limit_full", f"workflow.{WAITS}")
    assert [run["id"] for run in api.get(status="skipped").json()["runs"]] == [skipped["id"]]


def test_a_batch_chooses_skip_for_every_run_judged_in_order(api: RunsApi) -> None:
    answer = start(api, {"workflow": WAITS, "runs": [{"input": {"n": n}} for n in range(3)], "on_full": "skip"})

    first, *rest = answer["runs"]
    assert [run["input"] for run in [api.get(f"{r['id']}/").json() for r in answer["runs"]]] == [
        {"n": 0},
        {"n": 1},
        {"n": 2},
    ]
    assert first["status"] == "pending"
    for run in rest:
        assert_skipped(run, "limit_full", "the limit is full", f"workflow.{WAITS}")
    assert QueueEntry.objects.filter(state="waiting").count() == 0


def test_a_queue_at_its_cap_answers_the_start_skipped_the_queue_is_full(api: RunsApi) -> None:
    single = [start(api, {"workflow": CAPPED}) for _ in range(3)]
    batch = start(api, {"workflow": CAPPED, "runs": [{}, {}]})["runs"]

    assert [run["status"] for run in single] == ["pending", "queued", "skipped"]
    assert_skipped(single[2], "queue_full", "the queue is full", f"workflow.{CAPPED}")
    for run in batch:
        assert_skipped(run, "queue_full", "the queue is full", f"workflow.{CAPPED}")
    assert Limit.objects.get(name=f"workflow.{CAPPED}").refused_count == 3


@pytest.mark.parametrize("value", ["drop", "", "SKIP", 3, True, ["skip"], {"on_full": "skip"}])
def test_a_bad_on_full_is_a_400_naming_it_and_nothing_is_written(api: RunsApi, value: object) -> None:
    start(api, {"workflow": WAITS})  # the bound exists, and is full
    before = written()

    for body in (
        {"workflow": WAITS, "on_full": value},
        {"workflow": WAITS, "key": None, "limits": None, "input": {"n": 1}, "on_full": value},
        {"workflow": WAITS, "runs": [{}, {"input": {"n": 1}}], "on_full": value},
    ):
        answer = start(api, body, status=400)
        assert answer["field"] == "on_full", answer
        assert f"workflow {WAITS!r}: on_full must be one of" in answer["error"]
        assert repr(value) in answer["error"]
    assert written() == before


def test_a_bad_on_full_of_a_first_start_creates_no_bound(api: RunsApi) -> None:
    """The workflow's own bound is created by its first start (SPEC 11.6): not by a refused one."""
    Limit.objects.filter(name=f"workflow.{CAPPED}").delete()
    before = written()
    for body in ({"workflow": CAPPED, "on_full": "drop"}, {"workflow": CAPPED, "runs": [{}], "on_full": "drop"}):
        assert start(api, body, status=400)["field"] == "on_full"
    assert written() == before


def test_an_unknown_workflow_is_named_before_on_full(api: RunsApi) -> None:
    answer = start(api, {"workflow": "no_such_workflow", "on_full": "drop"}, status=400)
    assert answer["field"] == "workflow"
    assert not Run.objects.exists()
