"""Django's task API through the box with a real Celery worker (SPEC 15, issue 46): the statuses of
15.3 as a task moves, its return value and errors in Django's shape, on-commit, a deferred start,
a task held back by a full limit, keys read from the arguments, the box's run concurrency, and
aenqueue/aget_result. The worker has not imported the tasks' module: it finds each task by its
module path (stackbone.runs.runtime.get_workflow).

Must never happen: a task runs before the transaction that enqueued it commits, or at all after a
rollback; a deferred task starts before its time; a limit of capacity 1, a key's pool of 1 or a
box of 1 runs two tasks at once (checked from the runs' rows afterwards)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.tasks import TaskResultStatus
from django.tasks.base import Task
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from limits import services
from limits.config import define_workspace
from limits.django_tasks import TaskFailed
from limits.models import QueueEntry
from stackbone.runs import json_values
from stackbone.runs.models import Run
from stackbone.runs.runtime import DEFERRED, NOT_JSON, WorkflowError
from tests.factories import declare
from tests.runs.conftest import Worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED


def status(task: Task[Any, Any], result_id: str) -> TaskResultStatus:
    return task.get_result(result_id).status


def until(task: Task[Any, Any], result_id: str, wanted: TaskResultStatus, worker: Worker) -> None:
    wait_for(lambda: status(task, result_id) == wanted, what=f"{task.name} {result_id} {wanted}", worker=worker)


def until_finished(task: Task[Any, Any], result_id: str, worker: Worker) -> None:
    wait_for(lambda: task.get_result(result_id).is_finished, what=f"{task.name} {result_id} to end", worker=worker)


def never_together(*run_ids: str) -> None:
    """No two of these runs executed at the same moment (their rows' started_at/finished_at)."""
    spans = sorted(Run.objects.filter(id__in=run_ids).values_list("started_at", "finished_at"))
    assert len(spans) == len(run_ids) and all(start and end for start, end in spans)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, f"two runs at once: one started at {start}, before another ended at {end}"


def test_a_task_moves_from_ready_to_successful_as_a_durable_run_and_returns_its_value(tasks, worker) -> None:
    result = tasks.add.enqueue(2, b=3)

    assert (result.status, result.attempts, result.errors, result.args, result.kwargs) == (READY, 0, [], [2], {"b": 3})
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    run = Run.objects.get(id=result.id)
    assert (run.workflow, run.input) == ("tests.django_tasks.tasks.add", {"args": [2], "kwargs": {"b": 3}})

    until(tasks.add, result.id, SUCCESSFUL, worker)
    result.refresh()
    assert (result.status, result.return_value, result.attempts, result.errors) == (SUCCESSFUL, 5, 1, [])
    assert result.enqueued_at and result.started_at and result.finished_at
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    run.refresh_from_db()
    assert (run.status, run.output) == ("completed", 5)
    assert [(step.name, step.kind, step.status, step.result) for step in run.steps] == [("add", "step", "completed", 5)]


def test_results_and_errors_come_in_djangos_shape(tasks, worker) -> None:
    """What Django's own tests ask of ImmediateBackend's results, through a worker: the context,
    an async task, and every failure as a TaskError (the exception's class and traceback)."""
    sent = {
        "whoami": tasks.whoami.enqueue(),
        "add_later": tasks.add_later.enqueue(4, 5),
        "fail": tasks.fail.enqueue("This Task failed due to ValueError"),
        "exit_task": tasks.exit_task.enqueue(),
        "complex_return_value": tasks.complex_return_value.enqueue(),
        "not_a_number": tasks.not_a_number.enqueue(),
    }
    for name, result in sent.items():
        until_finished(getattr(tasks, name), result.id, worker)
        result.refresh()

    whoami = sent["whoami"]
    assert whoami.status == SUCCESSFUL
    assert whoami.return_value == {"id": whoami.id, "attempt": 1, "status": "RUNNING"}
    assert (sent["add_later"].status, sent["add_later"].return_value) == (SUCCESSFUL, 9)

    expected = {
        "fail": (ValueError, "ValueError: This Task failed due to ValueError\n"),
        "exit_task": (SystemExit, "SystemExit: This task failed due to SystemExit\n"),
        "complex_return_value": (TypeError, "TypeError: Unsupported type: <class 'function'>\n"),
        "not_a_number": (
            WorkflowError,
            "WorkflowError: "
            + NOT_JSON.format(what="the task's return value", error=json_values.NOT_A_JSON_NUMBER)
            + "\n",
        ),
    }
    for name, (exception, ending) in expected.items():
        failed = sent[name]
        assert failed.status == FAILED, name
        with pytest.raises(ValueError, match="Task failed"):
            failed.return_value  # noqa: B018
        assert failed.started_at is not None and failed.finished_at >= failed.started_at
        [error] = failed.errors
        assert error.exception_class is exception, name
        assert error.traceback.startswith("Traceback (most recent call last):\n"), error.traceback
        assert error.traceback.endswith(ending), error.traceback
        run = Run.objects.get(id=failed.id)
        assert run.status == "failed"
        assert [(step.status, step.error.split("\n")[0]) for step in run.steps] == [
            ("failed", f"{TaskFailed.__name__}: {error.exception_class_path}")
        ]


def test_a_task_held_back_by_a_full_limit_is_ready_with_its_reason_on_the_run(tasks, worker, tmp_path) -> None:
    """SPEC 15.3: a run queued for its bounds is READY (RUNNING is a run that executes, or waits
    in its body, which a task's run never does: its named limits are bounds of the run, 15.1 and
    11.3; docs/django-tasks.md says why the issue's "RUNNING" is not kept); why it waits is on the
    run, as for any queued run (SPEC 6.5)."""
    declare(tasks_partner={"capacity": 1, "max_hold": "1h"})
    gate = tmp_path / "gate"
    first = tasks.partner_call.enqueue(str(gate))
    until(tasks.partner_call, first.id, RUNNING, worker)
    running = tasks.partner_call.get_result(first.id)
    assert running.started_at is not None and running.finished_at is None and running.attempts == 1
    with pytest.raises(ValueError, match="Task has not finished yet"):
        running.return_value  # noqa: B018

    second = tasks.partner_call.enqueue(str(gate))

    assert second.status == READY
    run = Run.objects.get(id=second.id)
    assert (run.status, run.waiting_for, run.bounds) == ("queued", "start", ["tasks-partner"])
    assert run.steps == []  # it waits before its first step, not in its body (no "Esperando hueco")
    entries = list(QueueEntry.objects.filter(run_id=second.id, state="waiting").select_related("limit"))
    assert [entry.limit.name for entry in entries] == ["tasks-partner"]
    [reason] = services.why_waiting(entries).values()
    assert (reason.code, reason.limit) == ("limit_full", "tasks-partner")

    gate.touch()
    until(tasks.partner_call, second.id, SUCCESSFUL, worker)
    assert tasks.partner_call.get_result(first.id).return_value == "called"
    never_together(first.id, second.id)


def test_a_tasks_key_comes_from_its_arguments_and_holds_back_only_its_own_runs(tasks, worker, tmp_path) -> None:
    """per_tenant: concurrency={"per_key": 1}, concurrency_key="tenant"."""
    gate = tmp_path / "gate"
    acme = tasks.per_tenant.enqueue(str(gate), tenant="acme")
    until(tasks.per_tenant, acme.id, RUNNING, worker)
    acme_again = tasks.per_tenant.enqueue(str(gate))  # the argument's default: acme
    globex = tasks.per_tenant.enqueue(str(gate), tenant="globex")

    until(tasks.per_tenant, globex.id, RUNNING, worker)
    assert status(tasks.per_tenant, acme_again.id) == READY
    keys = dict(Run.objects.values_list("id", "concurrency_key"))
    assert (keys[acme.id], keys[acme_again.id], keys[globex.id]) == ("acme", "acme", "globex")
    assert Run.objects.get(id=acme_again.id).bounds == ["workflow.tests.django_tasks.tasks.per_tenant"]

    gate.touch()
    for result in (acme, acme_again, globex):
        until(tasks.per_tenant, result.id, SUCCESSFUL, worker)
    never_together(acme.id, acme_again.id)


def test_task_runs_execute_under_the_boxs_run_concurrency(tasks, worker, tmp_path) -> None:
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 1, "burst": 1.0}))
    gate = tmp_path / "gate"
    first = tasks.gated.enqueue(str(gate))
    until(tasks.gated, first.id, RUNNING, worker)

    second = tasks.gated.enqueue(str(gate))

    assert second.status == READY
    assert Run.objects.filter(id=second.id).values_list("status", "bounds").get() == ("queued", ["box"])
    gate.touch()
    until(tasks.gated, second.id, SUCCESSFUL, worker)
    never_together(first.id, second.id)


def test_a_task_enqueued_in_a_transaction_runs_once_it_commits_and_never_after_a_rollback(
    tasks, worker, tmp_path
) -> None:
    ran = tmp_path / "ran"
    with transaction.atomic():
        result = tasks.touch.enqueue(str(ran))
        assert tasks.touch.get_result(result.id).status == READY  # the transaction sees its own run
        time.sleep(0.5)  # a task sent now would have run by then: the others here take ~0.1 s
        assert not ran.exists()
    until(tasks.touch, result.id, SUCCESSFUL, worker)
    assert ran.read_text() == "ran"

    never = tmp_path / "never"

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        rolled_back = tasks.touch.enqueue(str(never))
        raise Rollback
    with pytest.raises(TaskResultDoesNotExist):
        tasks.touch.get_result(rolled_back.id)
    time.sleep(0.5)
    assert not never.exists()


def test_a_deferred_task_waits_queued_until_its_time_then_starts_on_time(tasks, worker) -> None:
    at = timezone.now() + dt.timedelta(seconds=1.5)

    result = tasks.add.using(run_after=at).enqueue(1, 1)

    assert (result.status, result.task.run_after) == (READY, at)
    run = Run.objects.get(id=result.id)
    assert (run.status, run.suspended, run.waiting_for, run.wait_deadline) == ("queued", True, DEFERRED, at)
    assert run.input == {"args": [1, 1], "kwargs": {}, "run_after": at.isoformat()}
    fetched = tasks.add.get_result(result.id)
    assert fetched == result  # the start time too: the task as it was enqueued

    until(tasks.add, result.id, SUCCESSFUL, worker)
    done = tasks.add.get_result(result.id)
    assert done.return_value == 2
    assert done.started_at >= at, "started before its time"
    assert done.started_at - at < dt.timedelta(seconds=5), "its countdown should start it, not a recovery pass"


def test_aenqueue_and_aget_result(tasks, worker) -> None:
    result = asyncio.run(tasks.add.aenqueue(4, 5))
    # The run as start_run read it back after its commit: the worker may have taken it already.
    assert result.status in (READY, RUNNING, SUCCESSFUL) and result.id
    until(tasks.add, result.id, SUCCESSFUL, worker)

    fetched = asyncio.run(tasks.add.aget_result(result.id))

    assert (fetched.status, fetched.return_value) == (SUCCESSFUL, 9)
    asyncio.run(result.arefresh())
    assert result.return_value == 9
    asyncio.run(sync_to_async(connections.close_all)())  # the connection of asgiref's thread for sync code
