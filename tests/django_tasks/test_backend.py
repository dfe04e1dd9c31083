"""LimitsBackend without a worker (runs move when a test advances them): the behaviours Django's own
tests ask of ImmediateBackend and DummyBackend, what a task declares and how a mistake is refused,
arguments refused as Django's backends and start_run refuse them, a deferred start that outlives its
message, task runs in the Runs API and the CLI, and the system checks.

Must never happen: a refused enqueue or declaration leaves a run, a queue entry or a declared bound
behind; a deferred run is started before its time."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import re
import sys
from typing import Any

import pytest
from celery import Celery
from django.contrib.auth.models import Permission, User
from django.core.checks import registry
from django.tasks import TaskResultStatus, task, task_backends
from django.tasks.base import Task
from django.tasks.checks import check_tasks
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist, TaskResultMismatch
from django.test import Client, override_settings

from limits import checks, django_tasks
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.django_tasks import (
    BAD_INPUT,
    KEY_NOT_AN_ARGUMENT,
    KEY_WITHOUT_BOUNDS,
    NOT_OUR_TASK,
    ON_FULL_WITHOUT_BOUNDS,
    PRIORITY_REFUSED,
    InvalidLimitsTask,
    LimitsBackend,
    TaskRunCancelled,
    TaskRunFailed,
    TaskRunReplaced,
    TaskRunSkipped,
)
from limits.models import Limit, QueueEntry
from limits.runs import bounds as run_bounds
from limits.runs import start_run, workflow
from limits.tokens import issue_token
from stackbone.runs import json_values, runtime
from stackbone.runs.models import Run
from stackbone.runs.runtime import DEFERRED, NOT_JSON, WorkflowError, cancel_run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_worker")]

READY, SUCCESSFUL, FAILED = TaskResultStatus.READY, TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED
NOTHING = (0, 0)


def counts() -> tuple[int, int]:
    return Run.objects.count(), QueueEntry.objects.count()


# Module-level functions (Django's rule for a task) that the tests declare tasks of.
def spare(tenant: str, gate: str = "") -> None:
    return None


def spare_Named(**options: Any) -> None:  # its bound, workflow.<module path>, is no limit name
    return None


# --- Django's conformance: what its tests ask of DummyBackend and ImmediateBackend ---------------


def test_the_backend_says_what_it_supports(tasks) -> None:
    assert isinstance(task_backends["default"], LimitsBackend)
    assert (task_backends["default"].alias, task_backends["default"].options) == ("default", {})
    supports = ("supports_defer", "supports_async_task", "supports_get_result", "supports_priority")
    assert [getattr(task_backends["default"], name) for name in supports] == [True, True, True, False]
    assert type(tasks.noop) is task_backends["default"].task_class is django_tasks.LimitsTask
    assert list(task_backends["default"].check()) == []


def test_enqueue_answers_a_ready_result_as_djangos_backends_do(tasks, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = tasks.noop.enqueue(1, two=3)

    assert (result.status, result.is_finished, result.attempts, result.errors) == (READY, False, 0, [])
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    assert result.enqueued_at is not None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert (result.task, result.args, result.kwargs, result.backend) == (tasks.noop, [1], {"two": 3}, "default")
    assert result.id.startswith("run_") and Run.objects.filter(id=result.id).exists()
    assert task_backends["default"].get_result(result.id) == result
    assert tasks.noop.get_result(result.id) == result
    [enqueued] = [record.getMessage() for record in caplog.records if "enqueued" in record.getMessage()]
    assert result.id in enqueued
    result.refresh()
    assert result.status == READY


def test_each_enqueue_is_a_run_of_its_own(tasks) -> None:
    ids = {tasks.noop.enqueue().id for _ in range(3)}
    assert len(ids) == 3 and Run.objects.filter(workflow="tests.django_tasks.tasks.noop").count() == 3


def test_get_result_of_an_unknown_id_raises_task_result_does_not_exist(tasks) -> None:
    plain = start_run("call_ended", {"slot_id": "nothing"})  # a run of a @workflow, not of a task
    for unknown in ("123", "run_nope", "run_\x00", plain.id):
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(unknown)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.noop.get_result("123")


def test_aget_result_of_an_unknown_id_raises_task_result_does_not_exist(tasks) -> None:
    import asyncio

    with pytest.raises(TaskResultDoesNotExist):
        asyncio.run(task_backends["default"].aget_result("123"))


def test_get_result_of_another_tasks_run_is_a_mismatch(tasks) -> None:
    result = tasks.noop.enqueue()
    with pytest.raises(TaskResultMismatch):
        tasks.add.get_result(result.id)


def test_a_queue_the_backend_does_not_list_is_refused_at_enqueue(tasks) -> None:
    backend = {"BACKEND": "limits.django_tasks.LimitsBackend"}
    with override_settings(TASKS={"default": {**backend, "QUEUES": ["elsewhere"]}}):
        elsewhere = tasks.noop.using(queue_name="elsewhere")
    with (
        override_settings(TASKS={"default": {**backend, "QUEUES": ["q-1"]}}),
        pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid for backend"),
    ):
        elsewhere.enqueue()
    assert counts() == NOTHING


def test_arguments_that_are_not_json_are_refused_as_djangos_backends_refuse_them(tasks) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.noop.enqueue(object())
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.noop.enqueue(when=dt.datetime.now(dt.UTC))
    with pytest.raises(ValueError, match="Unsupported value"):
        tasks.noop.enqueue(b"\xff")
    assert counts() == NOTHING
    result = tasks.noop.enqueue((1, 2), name=b"bytes")  # what Django's JSON round trip keeps, kept as it
    assert (result.args, result.kwargs) == ([[1, 2]], {"name": "bytes"})


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (float("nan"), json_values.NOT_A_JSON_NUMBER),
        (float("inf"), json_values.NOT_A_JSON_NUMBER),
        ("a\x00b", json_values.NUL_IN_TEXT),
        ("\ud800", json_values.SURROGATE_IN_TEXT),
    ],
)
def test_what_no_database_keeps_is_refused_as_start_run_refuses_it(tasks, value, reason) -> None:
    with pytest.raises(WorkflowError) as by_enqueue:
        tasks.noop.enqueue(value)
    with pytest.raises(WorkflowError) as by_start_run:
        start_run("tests.django_tasks.tasks.noop", {"args": [value], "kwargs": {}})

    assert str(by_enqueue.value) == str(by_start_run.value) == NOT_JSON.format(what="the input", error=reason)
    assert counts() == NOTHING


def test_a_task_taking_a_context_gets_its_own_result(tasks) -> None:
    result = tasks.whoami.enqueue()
    assert runtime.advance(result.id) == "completed"
    result.refresh()
    assert result.return_value == {"id": result.id, "attempt": 1, "status": "RUNNING"}


# --- what a task declares ---------------------------------------------------------------------------


def test_a_priority_is_refused_when_the_task_is_defined(tasks) -> None:
    """SPEC 8.1 and 15.4: limits have no priorities."""
    with pytest.raises(InvalidTask) as defined:
        task(priority=5)(spare)
    assert str(defined.value) == PRIORITY_REFUSED.format(priority=5)
    with pytest.raises(InvalidTask, match="limits have no priorities"):
        tasks.add.using(priority=-1)
    assert tasks.add.using(priority=0).priority == 0


def test_a_task_s_on_full_is_what_its_starts_ask_for_and_a_skipped_run_is_failed_with_its_reason(tasks) -> None:
    """SPEC 14.2 and 15.3: the task's on_full applies to every enqueue; a run that cannot start at
    once ends skipped, never started, and its result is FAILED with the reason and the limit."""
    first = tasks.build_report.enqueue("q3")
    second = tasks.build_report.enqueue("q3")
    other = tasks.build_report.enqueue("q4")
    assert [r.status for r in (first, other)] == [READY, READY]
    assert second.status == FAILED
    [error] = second.errors
    bound = "workflow.tests.django_tasks.tasks.build_report"
    assert error.exception_class is TaskRunSkipped
    assert error.traceback == f"the run was skipped, never started: its key's pool is full ({bound})\n"
    assert tasks.build_report.get_result(second.id).status == FAILED
    run = Run.objects.get(id=second.id)
    assert (run.status, run.end_reason, run.end_limit, run.started_at) == ("skipped", "key_pool_full", bound, None)
    assert not QueueEntry.objects.filter(run_id=second.id).exists()


def test_a_task_that_replaces_ends_its_key_s_queued_run_replaced_and_failed_with_its_cause(tasks) -> None:
    """SPEC 14.3, 15.3: a task declared on_full="replace": a run that cannot start at once takes
    the place of its key's run queued to start, which ends replaced, never started, and its result
    is FAILED with TaskRunReplaced naming the run that replaced it; the run holding its slot and
    another key's run are untouched."""
    holder = tasks.sync_account.enqueue("acme", "first")
    older = tasks.sync_account.enqueue("acme", "second")
    other = tasks.sync_account.enqueue("globex", "first")
    newer = tasks.sync_account.enqueue("acme", "third")
    assert [r.status for r in (holder, older, other, newer)] == [READY, READY, READY, READY]
    result = tasks.sync_account.get_result(older.id)
    assert result.status == FAILED
    [error] = result.errors
    assert error.exception_class is TaskRunReplaced
    assert error.traceback == f"the run was replaced by {newer.id} before it started\n"
    bound = "workflow.tests.django_tasks.tasks.sync_account"
    run = Run.objects.get(id=older.id)
    assert (run.status, run.end_reason, run.end_limit, run.caused_by, run.started_at) == (
        "replaced",
        "key_pool_full",
        bound,
        newer.id,
        None,
    )
    statuses = dict(Run.objects.filter(id__in=[holder.id, other.id, newer.id]).values_list("id", "status"))
    assert statuses == {holder.id: "pending", other.id: "pending", newer.id: "queued"}
    assert Limit.objects.get(name=bound).replaced_count == 1


def test_a_task_s_on_full_is_checked_when_the_task_is_defined(tasks) -> None:
    name = "tests.django_tasks.test_backend.spare"
    with pytest.raises(InvalidLimitsTask, match="on_full must be one of 'wait', 'skip', 'replace'") as bad:
        task(limits=["partner-api"], on_full="drop")(spare)  # type: ignore[call-overload]
    assert isinstance(bad.value, InvalidTask) and isinstance(bad.value, WorkflowError)
    with pytest.raises(InvalidLimitsTask, match="'cancel_running' needs the workflow's own bound"):
        task(limits=["partner-api"], on_full="cancel_running")(spare)  # type: ignore[call-overload]
    with pytest.raises(InvalidLimitsTask) as unbounded:
        task(on_full="skip")(spare)  # type: ignore[call-overload]
    assert str(unbounded.value) == ON_FULL_WITHOUT_BOUNDS.format(name=name)
    assert name not in run_bounds._declared


@pytest.mark.parametrize(
    "declaration",
    [
        {"concurrency": {"total": 0}},
        {"concurrency": {"per_key": 3, "total": 2}},
        {"concurrency": {"bogus": 1}},
        {"concurrency": "4"},
        {"limits": "partner-api"},
        {"limits": ["a", "b", "c"]},
        {"limits": ["a", "a"]},
        {"limits": ["Not A Name"]},
        {"limits": ["workflow.other"]},
    ],
)
def test_a_bad_declaration_is_refused_with_workflows_own_message(tasks, declaration) -> None:
    name = "tests.django_tasks.test_backend.spare"
    with pytest.raises(WorkflowError) as as_workflow:
        workflow(name=name, **declaration)(spare)
    with pytest.raises(InvalidLimitsTask) as as_task:
        task(**declaration)(spare)
    assert str(as_task.value) == str(as_workflow.value)
    assert name not in run_bounds._declared


def test_a_bound_whose_name_is_no_limit_name_is_refused_with_workflows_message(tasks) -> None:
    with pytest.raises(InvalidLimitsTask, match="is not a valid limit name"):
        task(concurrency={"total": 2})(spare_Named)  # type: ignore[call-overload]


def test_a_concurrency_key_must_name_an_argument_or_be_a_callable(tasks) -> None:
    name = "tests.django_tasks.test_backend.spare"
    with pytest.raises(InvalidLimitsTask) as unknown:
        task(concurrency={"per_key": 1}, concurrency_key="account")(spare)  # type: ignore[call-overload]
    assert str(unknown.value) == KEY_NOT_AN_ARGUMENT.format(name=name, value="account", known="tenant, gate")
    with pytest.raises(InvalidLimitsTask, match="must be the name of an argument of the task or a callable"):
        task(concurrency={"per_key": 1}, concurrency_key=42)(spare)  # type: ignore[call-overload]
    with pytest.raises(InvalidLimitsTask) as unbounded:
        task(concurrency_key="tenant")(spare)  # type: ignore[call-overload]
    assert str(unbounded.value) == KEY_WITHOUT_BOUNDS.format(name=name)


def test_a_task_moved_to_the_backend_from_another_class_is_refused(tasks) -> None:
    with pytest.raises(InvalidTask) as moved:
        Task(func=spare, backend="default")
    assert str(moved.value) == NOT_OUR_TASK.format(path="tests.django_tasks.test_backend.spare", alias="default")


# --- keys read from the arguments -------------------------------------------------------------------


def test_the_key_is_the_named_argument_its_default_or_what_the_callable_returns(tasks) -> None:
    keys = [
        tasks.per_tenant.enqueue("g", tenant="acme"),
        tasks.per_tenant.enqueue("g", "globex"),
        tasks.per_tenant.enqueue("g"),  # the argument's default
        tasks.per_tenant.enqueue("g", tenant=42),  # a whole number: its text
        tasks.per_account.enqueue(7),
        tasks.per_account.enqueue(account=8, note="x"),
    ]
    assert [Run.objects.get(id=result.id).concurrency_key for result in keys] == [
        "acme",
        "globex",
        "acme",
        "42",
        "account-7",
        "account-8",
    ]
    statuses = [Run.objects.get(id=result.id).status for result in keys[:4]]
    assert statuses == ["pending", "pending", "queued", "pending"]  # acme's pool of 1 is taken; the others' are not
    bound = Limit.objects.get(name="workflow.tests.django_tasks.tasks.per_tenant")  # SPEC 11.6: made at start
    assert (bound.capacity, bound.per_key) == (100000, 1)


def test_a_key_start_run_would_refuse_is_refused_with_its_message(tasks) -> None:
    name = "tests.django_tasks.tasks.per_tenant"
    with pytest.raises(WorkflowError) as by_enqueue:
        tasks.per_tenant.enqueue("g", tenant="x" * 129)
    with pytest.raises(WorkflowError) as by_start_run:
        start_run(name, {"args": ["g"], "kwargs": {}}, concurrency_key="x" * 129)
    assert str(by_enqueue.value) == str(by_start_run.value)
    with pytest.raises(WorkflowError, match="concurrency_key: key must be a string"):
        tasks.per_tenant.enqueue("g", tenant=["a"])
    with pytest.raises(TypeError, match="the arguments do not fit the task"):
        tasks.per_tenant.enqueue()
    assert Run.objects.count() == 0


# --- deferred starts (SPEC 15.4) --------------------------------------------------------------------


def test_a_deferred_run_outlives_its_message_and_recovery_starts_it_at_its_time(tasks, clock) -> None:
    """The start is a row, not a message: recovery (beat, every 15 s; a worker as it starts)
    starts a deferred run whose time has come, and none before."""
    at = clock.now() + dt.timedelta(hours=1)  # beyond a countdown: only recovery starts it
    result = tasks.per_account.using(run_after=at).enqueue(3)
    run = Run.objects.get(id=result.id)
    assert (run.status, run.waiting_for, run.wait_deadline) == ("queued", DEFERRED, at)
    assert run.concurrency_key == "account-3"
    assert run.bounds == ["workflow.tests.django_tasks.tasks.per_account"]
    assert not QueueEntry.objects.exists()  # it takes its place in its bounds' queue at its time

    clock.advance(minutes=59, seconds=59)
    runtime.recover()
    assert Run.objects.get(id=run.id).suspended, "started before its time"
    assert runtime.start_if_due(run.id) is False  # an early countdown changes nothing either

    clock.advance(seconds=1)
    runtime.recover()
    assert Run.objects.filter(id=run.id).values_list("status", "suspended").get() == ("queued", False)
    assert runtime.advance(run.id) == "completed"
    done = tasks.per_account.get_result(result.id)
    assert (done.status, done.return_value, done.task.run_after) == (SUCCESSFUL, 3, at)
    assert done.started_at >= at


def test_a_deferred_run_says_when_it_starts_on_its_page_in_the_cli_and_the_api(tasks, clock) -> None:
    """SPEC 15.4: shown as queued with the time it starts: Studio's run page, `runs show --json` and
    the API's run detail (starts_at), until it has started."""
    at = clock.now() + dt.timedelta(minutes=4, seconds=5)
    result = tasks.add.using(run_after=at).enqueue(1)
    client = Client()
    client.force_login(User.objects.create_user("viewer"))

    page = client.get(f"/studio/runs/{result.id}/").content.decode()

    assert 'id="run-status">queued<' in page
    head = re.search(r'<span class="starts-at" id="run-starts-at">(.*?)</span>', page, re.S)
    assert head is not None, page
    assert re.sub(r"<[^>]+>", "", head[1]) == f"starts at {at:%H:%M:%S} (in 4m 5s)"
    assert f'<dt>Starts</dt><dd><time datetime="{at.isoformat()}">{at:%Y-%m-%d %H:%M:%S} UTC</time>' in page
    assert "waits for a worker to start it" not in page
    assert cli("show", result.id)["starts_at"] == api("get", path=f"/api/runs/{result.id}/").json()["starts_at"]
    assert cli("show", result.id)["starts_at"] == at.isoformat()
    out = io.StringIO()
    assert (
        runs_cli.main(["show", result.id], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=io.StringIO())) == 0
    )
    assert f"  starts:    {at.isoformat()} (in 4m 5s)" in out.getvalue().splitlines(), out.getvalue()

    clock.advance(minutes=4, seconds=5)
    due = re.search(r'id="run-starts-at">(.*?)</span>', client.get(f"/studio/runs/{result.id}/").content.decode())
    assert due is not None and due[1].endswith("(due: it starts within 15 s)")  # not yet woken
    runtime.recover()
    started = client.get(f"/studio/runs/{result.id}/").content.decode()
    assert "starts at" not in started and "<dt>Starts</dt>" not in started
    assert cli("show", result.id)["starts_at"] is None


def test_a_run_after_in_the_past_starts_at_once(tasks, clock) -> None:
    result = tasks.add.using(run_after=clock.now() - dt.timedelta(seconds=1)).enqueue(1)
    assert Run.objects.get(id=result.id).status == "pending"
    assert tasks.add.get_result(result.id) == result


def test_a_deferred_run_cancelled_before_its_time_is_failed_as_cancelled(tasks, clock) -> None:
    result = tasks.add.using(run_after=clock.now() + dt.timedelta(minutes=5)).enqueue(1)

    assert cancel_run(result.id) is True

    clock.advance(minutes=6)
    runtime.recover()
    cancelled = tasks.add.get_result(result.id)
    assert cancelled.status == FAILED
    [error] = cancelled.errors
    assert error.exception_class is TaskRunCancelled
    assert Run.objects.get(id=result.id).started_at is None


# --- task runs are runs: the Runs API, the CLI, a start by hand ------------------------------------


def api(method: str, body: object = None, path: str = "/api/runs/", **params: Any) -> Any:
    """The Runs API (/api/runs/) with a token of a user who may start runs."""
    user = User.objects.create_user(f"runner-{User.objects.count()}")
    user.user_permissions.add(Permission.objects.get(codename="change_run", content_type__app_label="studio"))
    headers = {"Authorization": f"Bearer {issue_token(user)[1]}"}
    client = Client(enforce_csrf_checks=True)
    if method == "post":
        return client.post("/api/runs/", json.dumps(body), content_type="application/json", headers=headers)
    return client.get(path, params, headers=headers)


def cli(*argv: str) -> Any:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main([*argv, "--json"], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_a_task_run_is_a_run_for_the_api_and_the_cli_which_can_start_one(tasks) -> None:
    name = "tests.django_tasks.tasks.add"
    enqueued = tasks.add.enqueue(1, b=2)

    started = api("post", {"workflow": name, "input": {"args": [20, 22], "kwargs": {}}})

    assert started.status_code == 201, started.content
    by_hand = started.json()["id"]
    listed = api("get", workflow=name).json()
    assert {run["id"] for run in listed["runs"]} == {enqueued.id, by_hand}
    shown = cli("show", enqueued.id)
    assert (shown["workflow"], shown["input"]) == (name, {"args": [1], "kwargs": {"b": 2}})
    assert runtime.advance(by_hand) == "completed"
    assert tasks.add.get_result(by_hand).return_value == 42


def test_a_run_started_by_hand_with_another_input_fails_before_the_function(tasks) -> None:
    run = start_run("tests.django_tasks.tasks.add", {"a": 1})

    assert runtime.advance(run.id) == "failed"
    failed = tasks.add.get_result(run.id)
    [error] = failed.errors
    assert error.exception_class is TaskRunFailed
    assert BAD_INPUT.format(value="{'a': 1}") in error.traceback
    assert Run.objects.get(id=run.id).steps == []


def test_the_start_form_lists_a_task_with_its_docstring(tasks) -> None:
    from limits.runs import listing

    hints = listing.workflow_hints()
    assert hints["tests.django_tasks.tasks.add"] == 'Adds two numbers.\n\nInput: {"args": [...], "kwargs": {...}}'


def test_a_worker_finds_a_task_by_its_module_path_and_nothing_outside_the_project(tasks) -> None:
    assert runtime.get_workflow("tests.django_tasks.tasks.add").name == "tests.django_tasks.tasks.add"
    for unknown in ("tests.django_tasks.nothing_here.task", "limits.nothing_here.task", "antigravity.fly"):
        with pytest.raises(WorkflowError, match="unknown workflow"):
            runtime.get_workflow(unknown)
    assert "antigravity" not in sys.modules  # never imported: not a module of the project


# --- system checks ----------------------------------------------------------------------------------


def test_django_runs_the_backends_checks_once_the_limits_app_is_installed() -> None:
    registered = {(check.__module__, getattr(check, "__qualname__", "")) for check in registry.registry.get_checks()}
    assert ("django.tasks.checks", "check_tasks") in registered


def ids_of(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


def test_a_misconfigured_backend_is_a_system_check_error() -> None:
    everything_installed, box_app = (lambda name: True), Celery("mysite", set_as_current=False)
    assert checks.task_backend_problems("default", {}, installed=everything_installed, celery_app=box_app) == []

    no_stackbone = lambda name: name != "stackbone"  # noqa: E731
    missing = checks.task_backend_problems("default", {}, installed=no_stackbone, celery_app=box_app)
    assert ids_of(missing) == ["limits.E020"]
    assert "'stackbone' is not in INSTALLED_APPS" in missing[0].msg

    fallback = Celery(set_as_current=False)  # what celery.current_app is in a project that made none
    assert ids_of(checks.task_backend_problems("default", {}, installed=everything_installed, celery_app=fallback)) == [
        "limits.E021"
    ]
    params = {"ENQUEUE_ON_COMMIT": False, "OPTIONS": {"poll": 1}, "QUEUES": ["default", "emails"]}
    problems = checks.task_backend_problems("default", params, installed=everything_installed, celery_app=box_app)
    assert ids_of(problems) == ["limits.E022", "limits.E023", "limits.W020"]


def test_the_checks_reach_django_through_the_backend(tasks) -> None:
    with override_settings(
        TASKS={"default": {"BACKEND": "limits.django_tasks.LimitsBackend", "ENQUEUE_ON_COMMIT": False}}
    ):
        assert ids_of(list(check_tasks())) == ["limits.E022"]


def test_a_missing_app_is_a_clear_error_at_enqueue_when_no_check_ran(tasks, monkeypatch) -> None:
    from django.apps import apps

    installed = apps.is_installed
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "stackbone" and installed(name))
    with pytest.raises(InvalidTaskBackend) as refused:
        tasks.noop.enqueue()
    assert str(refused.value) == checks.TASKS_APP_MISSING.format(alias="default", app="stackbone")
    assert counts() == NOTHING
