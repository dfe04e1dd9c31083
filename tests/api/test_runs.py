"""Issue 29, item 4: runs over the JSON API (/api/runs/, limits.runs.api), with a real token:
start (workflow, input, key, limits), list (the filters of `stackbone runs list`), show, cancel.
Each answer is the dict `stackbone runs ... --json` prints on the same installation.

Must never happen: a refused request (a bad value, no permission, no token) creates or changes a
run or a queue entry; a bad value is a 500; a token without `studio.change_run` starts or
cancels a run."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from limits import services
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.models import QueueEntry
from limits.runs import bounds as run_bounds
from limits.tokens import issue_token
from stackbone.models import Run
from tests.api.conftest import operator, reader
from tests.factories import declare

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_worker", "clock")]

SUMMARY_KEYS = {
    "id",
    "workflow",
    "status",
    "key",
    "keys",
    "reference",
    "suspended",
    "created_at",
    "started_at",
    "finished_at",
    "duration_ms",
    "waiting_for",
    "holding",
    "labels",
    "end_reason",
    "end_reason_text",
    "end_limit",
    "caused_by",
}


def run_operator(username: str = "runner") -> tuple[User, str]:
    """A user with "Can change run" (studio.change_run: start and cancel) and a token for it."""
    user = User.objects.create_user(username)
    user.user_permissions.add(Permission.objects.get(codename="change_run", content_type__app_label="studio"))
    return user, issue_token(user, name="test")[1]


JSON = "application/json"


class RunsApi:
    def __init__(self, token: str | None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str = "", **params: Any):
        return self.client.get(f"/api/runs/{path}", params, headers=self.headers)

    def post(
        self, path: str = "", body: object = None, *, raw: str | None = None, content_type: str = "application/json"
    ):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(f"/api/runs/{path}", data, content_type=content_type, headers=self.headers)


@pytest.fixture
def api() -> RunsApi:
    return RunsApi(run_operator()[1])


def cli(*argv: str) -> Any:
    """`stackbone runs <argv> --json` on this installation: its stdout, parsed."""
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main([*argv, "--json"], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    assert code in (0, 1), err.getvalue()
    return json.loads(out.getvalue())


def make_run(workflow: str = "place_call", status: str = "pending", *, seconds_ago: int = 0, **fields: object) -> Run:
    now = timezone.now() - dt.timedelta(seconds=seconds_ago)
    return Run.objects.create(workflow=workflow, status=status, created_at=now, updated_at=now, **fields)


def nothing_created() -> bool:
    return not Run.objects.exists() and not QueueEntry.objects.exists()


# --- start --------------------------------------------------------------------------------------


def test_start_creates_a_run_and_answers_its_summary(api) -> None:
    response = api.post(body={"workflow": "place_call", "input": {"call_id": "c-1"}})

    assert response.status_code == 201, response.content
    run = Run.objects.get()
    assert (run.workflow, run.input, run.status, run.concurrency_key) == (
        "place_call",
        {"call_id": "c-1"},
        "pending",
        "",
    )
    answer = response.json()
    assert set(answer) == SUMMARY_KEYS
    assert answer == {key: value for key, value in cli("show", run.id).items() if key in SUMMARY_KEYS}


def test_start_without_input_gives_the_run_an_empty_object(api) -> None:
    assert api.post(body={"workflow": "export_report"}).status_code == 201
    assert Run.objects.get().input == {}


def test_start_with_a_key_takes_the_keys_pool_of_the_workflows_bound(api) -> None:
    run_bounds.sync(["sync_tenant"])
    body = {"workflow": "sync_tenant", "input": {"tenant": "acme"}, "key": "acme"}

    first, second = api.post(body=body).json(), api.post(body=body).json()

    assert (first["key"], first["status"]) == ("acme", "pending")
    assert (second["status"], second["waiting_for"]) == ("queued", ["workflow.sync_tenant"])
    assert [run.concurrency_key for run in Run.objects.all()] == ["acme", "acme"]


def test_start_with_limits_holds_them_for_the_whole_run(api) -> None:
    """`limits` replaces the workflow's named limits for this run (start_run(..., limits=...))."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    body = {"workflow": "export_report", "input": {"report_id": "r-1"}, "limits": ["voice-calls"]}

    first, second = api.post(body=body).json(), api.post(body=body).json()

    assert first["status"] == "pending" and first["holding"] == ["voice-calls"]
    assert (second["status"], second["waiting_for"]) == ("queued", ["voice-calls"])
    assert Run.objects.get(id=second["id"]).bounds == ["voice-calls"]
    keyed = api.post(body={**body, "key": "acme"}).json()  # with limits the run has bounds: a key is its pool
    assert keyed["key"] == "acme"


BAD_STARTS = [
    pytest.param({}, "workflow", "workflow is required", id="no-workflow"),
    pytest.param({"workflow": 3}, "workflow", "workflow must be a string", id="workflow-not-text"),
    pytest.param({"workflow": "nope"}, "workflow", "unknown workflow 'nope' (known: ", id="unknown-workflow"),
    pytest.param({"workflow": "place_call", "inptu": {}}, "inptu", "unknown field 'inptu'", id="unknown-field"),
    pytest.param({"workflow": "place_call", "input": [1]}, "input", "not a list", id="input-a-list"),
    pytest.param({"workflow": "place_call", "input": None}, "input", "not null", id="input-null"),
    pytest.param({"workflow": "place_call", "input": "{}"}, "input", "not a string", id="input-a-string"),
    pytest.param({"workflow": "place_call", "input": {"a": "\x00"}}, "input", "NUL character", id="input-nul"),
    pytest.param({"workflow": "place_call", "input": {"a": "x" * 70_000}}, "input", "at most 65536", id="input-long"),
    pytest.param({"workflow": "place_call", "key": 5}, "key", "key must be a string", id="key-not-text"),
    pytest.param({"workflow": "place_call", "key": "acme"}, "key", "caps no runs", id="key-without-bounds"),
    pytest.param({"workflow": "sync_tenant", "key": "a\x1bb"}, "key", "control characters", id="control-key"),
    pytest.param({"workflow": "sync_tenant", "key": "k" * 129}, "key", "1 to 128 characters", id="long-key"),
    pytest.param(
        {"workflow": "place_call", "limits": "voice-calls"}, "limits", "a list of limit names", id="limits-text"
    ),
    pytest.param({"workflow": "place_call", "limits": [1]}, "limits", "a list of limit names", id="limits-numbers"),
    pytest.param({"workflow": "place_call", "limits": ["nope"]}, "limits", "unknown limit 'nope'", id="unknown-limit"),
    pytest.param(
        {"workflow": "place_call", "limits": ["voice-calls", "voice-calls"]}, "limits", "at most once", id="twice"
    ),
    pytest.param({"workflow": "place_call", "limits": ["workflow.sync_tenant"]}, "limits", "own bound", id="a-bound"),
]


@pytest.mark.parametrize(("body", "field", "message"), BAD_STARTS)
def test_a_bad_start_is_a_400_naming_the_field_and_creates_nothing(api, body, field, message) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    run_bounds.sync(["sync_tenant"])

    response = api.post(body=body)

    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert message in response.json()["error"]
    assert set(response.json()) == {"error", "field"}
    assert nothing_created()


def test_a_body_that_is_not_a_json_object_is_refused(api) -> None:
    for raw in ("[1]", "not json", '"place_call"'):
        response = api.post(raw=raw)
        assert (response.status_code, response.json()["field"]) == (400, "body")
    assert api.post(raw='{"workflow": "place_call"}', content_type="text/plain").status_code == 415
    assert nothing_created()


# --- list ---------------------------------------------------------------------------------------


def test_list_answers_what_runs_list_json_prints_with_its_filters(api) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m", "per_key": 1})
    done = make_run("export_report", "completed", seconds_ago=5, finished_at=timezone.now())
    holder = make_run("place_call", "running", seconds_ago=4, started_at=timezone.now())
    waiter = make_run("place_call", "running", seconds_ago=3, concurrency_key="acme")
    services.acquire("voice-calls", run_id=holder.id, key="acme", label="call-1")
    services.acquire("voice-calls", run_id=waiter.id, key="acme", label="call-2", timeout="1h")

    cases = [
        ({}, [], [waiter, holder, done]),
        ({"status": "completed"}, ["--status", "completed"], [done]),
        ({"workflow": "place_call"}, ["--workflow", "place_call"], [waiter, holder]),
        ({"waiting_for": "voice-calls"}, ["--waiting-for", "voice-calls"], [waiter]),
        ({"key": "acme"}, ["--key", "acme"], [waiter, holder]),
        ({"size": "2"}, ["--rows", "2"], [waiter, holder]),
    ]
    for params, argv, expected in cases:
        response = api.get(**params)
        assert response.status_code == 200, response.content
        assert response.json() == cli("list", *argv), params
        assert [run["id"] for run in response.json()["runs"]] == [run.id for run in expected], params
    assert api.get(size="2").json()["more"] is True
    assert api.get().json()["more"] is False


def test_list_pages_on_with_before(api) -> None:
    made = [make_run(seconds_ago=10 - n) for n in range(5)]  # made[4] is the newest

    first = api.get(size="2").json()
    second = api.get(size="2", before=first["runs"][-1]["id"]).json()
    last = api.get(size="2", before=second["runs"][-1]["id"]).json()

    assert [run["id"] for run in first["runs"] + second["runs"] + last["runs"]] == [run.id for run in made[::-1]]
    assert (first["more"], second["more"], last["more"]) == (True, True, False)


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"status": "done"}, "status", "status must be one of queued, pending, running"),
        ({"size": "0"}, "size", "size must be a whole number from 1 to 1000"),
        ({"size": "1001"}, "size", "from 1 to 1000"),
        ({"size": "ten"}, "size", "from 1 to 1000"),
        ({"size": "9" * 5000}, "size", "from 1 to 1000"),
        ({"key": "k" * 129}, "key", "key must be a string of 1 to 128"),
        ({"key": "a\x1bb"}, "key", "control characters"),
        ({"workflow": "a\x00b"}, None, "NUL character"),  # refused before any view (stackbone.plumbing.middleware)
        ({"before": "run_nope"}, "before", "unknown run 'run_nope'"),
    ],
)
def test_a_bad_list_filter_is_a_400_naming_it(api, params, field, message) -> None:
    response = api.get(**params)

    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert message in response.json()["error"]


# --- show and cancel ----------------------------------------------------------------------------


def test_show_answers_what_runs_show_json_prints(api) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    holder = make_run(status="running")
    run = make_run(status="running", input={"call_id": "c-9"})
    services.acquire("voice-calls", run_id=holder.id)
    services.acquire("voice-calls", run_id=run.id, label="c-9", timeout="1h")

    response = api.get(f"{run.id}/")

    assert response.status_code == 200
    assert response.json() == cli("show", run.id)
    assert response.json()["waits"][0]["reason"]["code"] == "limit_full"


def test_an_unknown_run_is_a_404_naming_the_run(api) -> None:
    for response in (api.get("run_nope/"), api.post("run_nope/cancel/")):
        assert response.status_code == 404
        assert response.json() == {"error": "unknown run 'run_nope'", "field": "run"}
    assert api.get("run_nope/steps/").json()["field"] is None  # a path the API does not have


def test_cancel_ends_the_run_and_answers_as_runs_cancel_json(api) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    holder = make_run(status="running")
    run = make_run(status="running")
    services.acquire("voice-calls", run_id=holder.id)
    services.acquire("voice-calls", run_id=run.id, timeout="1h")

    first = api.post(f"{run.id}/cancel/")
    again = api.post(f"{run.id}/cancel/")

    assert (first.status_code, first.json()) == (200, {"cancelled": True, "id": run.id, "status": "cancelled"})
    assert QueueEntry.objects.get(run_id=run.id).state == "cancelled"
    assert Run.objects.get(id=holder.id).status == "running"
    assert (again.status_code, again.json()) == (
        200,
        {"cancelled": False, "id": run.id, "status": "cancelled", "reason": "already finished"},
    )
    assert again.json() == cli("cancel", run.id)


def test_get_on_cancel_and_post_on_a_run_are_405(api) -> None:
    run = make_run()
    assert api.get(f"{run.id}/cancel/").status_code == 405
    assert api.post(f"{run.id}/").status_code == 405
    assert Run.objects.get(id=run.id).status == "pending"


# --- who may -------------------------------------------------------------------------------------


def test_any_token_reads_and_only_change_run_starts_or_cancels() -> None:
    """A reader and a limits operator (limits.operate_limit only) may list and show, and neither
    may start or cancel: 403, nothing created or changed. No token: 401."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    run = make_run()
    for token in (reader()[1], operator()[1]):
        refused = RunsApi(token)
        assert refused.get().status_code == 200 and refused.get(f"{run.id}/").status_code == 200
        start = refused.post(body={"workflow": "place_call", "input": {"call_id": "c-1"}})
        cancel = refused.post(f"{run.id}/cancel/")
        assert (start.status_code, cancel.status_code) == (403, 403)
        assert start.json()["error"].endswith("may not start or cancel runs (needs the studio.change_run permission)")
    anonymous = RunsApi(None)
    assert [anonymous.get().status_code, anonymous.post(body={"workflow": "place_call"}).status_code] == [401, 401]
    assert list(Run.objects.values_list("id", "status")) == [(run.id, "pending")]
    assert not QueueEntry.objects.exists()
