"""Issue 44: a batch start over the JSON API, `POST /api/runs/` with `runs` (limits.runs.api on
limits.runs.start_runs): the runs started in the order given, answered in that order as a single
start answers each.

Must never happen: a batch partly written (a bad run, a batch too big or empty, no permission:
no run, queue entry or slot stays); a bad run's refusal not naming its index and field; the runs
of a batch queued out of the order given."""

from __future__ import annotations

import pytest

from limits.models import QueueEntry, Slot
from limits.runs import bounds as run_bounds
from limits.runs.values import MAX_BATCH_SIZE
from stackbone.models import Run
from tests.api.conftest import reader
from tests.api.test_runs import SUMMARY_KEYS, RunsApi, cli, run_operator

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_worker")]


@pytest.fixture
def api() -> RunsApi:
    run_bounds.sync(["sync_tenant"])  # one run at a time per tenant
    return RunsApi(run_operator()[1])


def nothing_written() -> bool:
    return not Run.objects.exists() and not QueueEntry.objects.exists() and not Slot.objects.exists()


def test_a_batch_starts_in_the_order_given_with_its_keys_and_answers_each_run(api) -> None:
    tenants = ["acme", "globex", "acme", "acme"]
    batch = [{"input": {"tenant": tenant, "n": n}, "key": tenant} for n, tenant in enumerate(tenants)]

    response = api.post(body={"workflow": "sync_tenant", "runs": batch})

    assert response.status_code == 201, response.content
    answer = response.json()["runs"]
    ids = [run["id"] for run in answer]
    assert [(run["key"], run["status"]) for run in answer] == [
        ("acme", "pending"),
        ("globex", "pending"),
        ("acme", "queued"),
        ("acme", "queued"),
    ]
    rows = Run.objects.in_bulk(ids)
    assert [(rows[i].input, rows[i].concurrency_key) for i in ids] == [(run["input"], run["key"]) for run in batch]
    queued = QueueEntry.objects.filter(limit__name="workflow.sync_tenant", state="waiting").order_by("position")
    assert list(queued.values_list("run_id", flat=True)) == ids[2:]  # trigger order (SPEC 11.3)
    for run in answer:  # a single start's answer, run by run: the summary `runs show --json` prints
        assert set(run) == SUMMARY_KEYS
        assert run == {name: value for name, value in cli("show", run["id"]).items() if name in SUMMARY_KEYS}


@pytest.mark.parametrize(
    ("workflow", "bad", "field", "says"),
    [
        ("sync_tenant", {"input": [1]}, "runs[2].input", "runs[2]: input must be a JSON object"),
        ("sync_tenant", {"input": {"text": "a\x00b"}}, "runs[2].input", "runs[2]: input must be JSON-serializable"),
        ("sync_tenant", {"key": "a\x07"}, "runs[2].key", "runs[2]: key must not contain control characters"),
        ("sync_tenant", {"key": 7}, "runs[2].key", "runs[2]: key must be a string"),
        ("sync_tenant", {"inputs": {}}, "runs[2].inputs", "runs[2]: unknown field 'inputs'"),
        ("sync_tenant", "acme", "runs[2]", "runs[2] must be a JSON object"),
        ("place_call", {"key": "acme"}, "runs[2].key", "runs[2]: key: workflow 'place_call' caps no runs"),
    ],
)
def test_a_bad_run_refuses_the_whole_batch_naming_its_index_and_field(api, workflow, bad, field, says) -> None:
    batch = [{"input": {"n": 0}, "key": "acme"}, {"input": {"n": 1}}, bad, {"input": {"n": 3}}]
    if workflow == "place_call":
        batch = [{"input": {"n": 0}}, {"input": {"n": 1}}, bad]

    response = api.post(body={"workflow": workflow, "runs": batch})

    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert response.json()["error"].startswith(says), response.json()
    assert nothing_written()


def test_a_batch_too_big_empty_misshapen_or_without_the_permission_writes_nothing(api) -> None:
    too_big = api.post(body={"workflow": "sync_tenant", "runs": [{}] * (MAX_BATCH_SIZE + 1)})
    assert (too_big.status_code, too_big.json()) == (
        400,
        {
            "error": f"runs must hold at most {MAX_BATCH_SIZE} runs, not {MAX_BATCH_SIZE + 1}: "
            f"start them in batches of {MAX_BATCH_SIZE}",
            "field": "runs",
        },
    )
    for body, field in (
        ({"workflow": "sync_tenant", "runs": []}, "runs"),
        ({"workflow": "sync_tenant", "runs": {"input": {}}}, "runs"),
        ({"workflow": "sync_tenant", "runs": [{}], "input": {}}, "input"),  # input goes in each run
        ({"runs": [{}]}, "workflow"),
        ({"workflow": "sync_tenant", "runs": [{}], "limits": "partner-api"}, "limits"),
    ):
        response = api.post(body=body)
        assert (response.status_code, response.json()["field"]) == (400, field), (body, response.json())
    batch = {"workflow": "sync_tenant", "runs": [{"input": {}}]}
    assert RunsApi(reader()[1]).post(body=batch).status_code == 403  # the single start's permission
    assert RunsApi(None).post(body=batch).status_code == 401
    assert nothing_written()
