"""Django's task framework through the box (SPEC 15): `django.tasks` tasks run as durable runs, under
limits, keys, fair shares and the box's run concurrency, with no second API.

    # settings.py
    TASKS = {"default": {"BACKEND": "limits.django_tasks.LimitsBackend"}}

    # billing/tasks.py
    from django.tasks import task

    @task(concurrency={"total": 5, "per_key": 1}, limits=["partner-api"], concurrency_key="tenant_id")
    def sync_tenant(tenant_id: str) -> dict: ...

    result = sync_tenant.enqueue(tenant_id="acme")    # a run of billing.tasks.sync_tenant, READY while queued
    sync_tenant.get_result(result.id).status          # READY, RUNNING, SUCCESSFUL or FAILED

What maps to what (docs/django-tasks.md has the table):

- A task is a workflow named by its module path (`billing.tasks.sync_tenant`) whose body has one
  step, the task's function; its input is `{"args": [...], "kwargs": {...}}`. It is registered when
  the task is defined (LimitsTask, the backend's task class: Django passes `@task`'s extra keyword
  arguments to it), and a worker that has not imported the task's module imports it to run it.
- `concurrency`, `limits` are @workflow's (SPEC 11.1), checked when the task is defined with the
  same messages; `concurrency_key` names an argument, or is a callable of the arguments, and the
  run's key is read from the arguments at enqueue. `on_full` (SPEC 14.1: 'wait', 'skip' or
  'replace') is what every start of the task asks for, as start_run(on_full=...): a run that
  cannot start at once under it ends skipped, or takes the place of its key's runs queued to
  start, which end replaced (14.3); it needs concurrency= or limits=. A priority other than 0 is
  refused (SPEC 8.1).
- `enqueue` starts the run as limits.runs.start_run does: in the caller's transaction, dispatched
  once it commits (ENQUEUE_ON_COMMIT), queued while its bounds are full. `run_after` defers it
  durably (stackbone.runs.runtime.start_run_at). The TaskResult's id is the run's id.
- A result is read from the run: queued, deferred or pending is READY; running (executing, or
  held between attempts) RUNNING; completed SUCCESSFUL with the return value; failed, cancelled,
  skipped or replaced FAILED (SPEC 15.3), with the function's exception (its class path and
  traceback, kept on the failed step), TaskRunCancelled, TaskRunSkipped (its reason and limit),
  TaskRunReplaced (the run that replaced it), or TaskRunFailed (what stopped the run outside the
  function).
"""

from __future__ import annotations

import dataclasses
import inspect
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from stackbone.runs import runtime
from stackbone.runs.runtime import WorkflowError

if TYPE_CHECKING:
    from stackbone.runs.models import Run

    _TaskBase = Task[..., Any]
    _Result = TaskResult[..., Any]
else:
    _TaskBase = Task
    _Result = TaskResult

_P = ParamSpec("_P")
_R = TypeVar("_R")

__all__ = [
    "InvalidLimitsTask",
    "LimitsBackend",
    "LimitsTask",
    "TaskFailed",
    "TaskRunCancelled",
    "TaskRunFailed",
    "TaskRunReplaced",
    "TaskRunSkipped",
]

# Messages (tests assert on them). Those about a task's declaration name it as @workflow's do.
PRIORITY_REFUSED = (
    "priority {priority}: limits have no priorities (SPEC 8.1); runs start in the order they arrive, as their "
    "limits allow: leave priority at 0"
)
ON_FULL_WITHOUT_BOUNDS = (
    "workflow {name!r}: on_full means nothing without concurrency= or limits= (the task caps no runs); leave it out"
)
BAD_KEY_SPEC = (
    "workflow {name!r}: concurrency_key must be the name of an argument of the task or a callable of its "
    "arguments, not {value!r}"
)
KEY_NOT_AN_ARGUMENT = "workflow {name!r}: concurrency_key {value!r} is not an argument of the task (it takes {known})"
KEY_WITHOUT_BOUNDS = (
    "workflow {name!r}: concurrency_key means nothing without concurrency= or limits= (the task caps no runs); "
    "leave it out"
)
KEY_FROM_ARGUMENTS = "workflow {name!r}: concurrency_key {value!r}: the arguments do not fit the task ({error})"
PATH_TOO_LONG = "workflow {name!r}: a task's module path names its runs, at most {maximum} characters"
NOT_OUR_TASK = (
    "{path}: LimitsBackend runs the tasks of its own task class; define it with @task (backend={alias!r}), "
    "not moved to it with .using()"
)
BAD_INPUT = 'a task\'s run takes {{"args": [...], "kwargs": {{...}}}} as its input, not {value}'
CANCELLED = "the run was cancelled before the task finished"
SKIPPED = "the run was skipped, never started: {reason} ({limit})"  # SPEC 14.2, 14.5, 15.3
REPLACED = "the run was replaced by {run} before it started"  # SPEC 14.3, 15.3

WORKFLOW_NAME_MAX_LENGTH = 200  # Run.workflow
WORKER_ID = "stackbone"  # the box records no worker per attempt: a started run shows this one (attempts 1)
INPUT_FIELDS = frozenset({"args", "kwargs", "run_after"})
FAILED_PREFIX = "TaskFailed: "  # how the run layer records a TaskFailed step (runtime.run_step)


class InvalidLimitsTask(InvalidTask, WorkflowError):
    """A task's limits are declared wrongly: Django's InvalidTask, and the WorkflowError @workflow
    raises for the same mistake, with the same message."""


class TaskFailed(Exception):
    """The task's function raised: the step's recorded failure, carrying what Django's TaskError
    needs (the exception's class path, then its traceback)."""

    def __init__(self, exception_class_path: str, traceback_text: str) -> None:
        super().__init__(f"{exception_class_path}\n{traceback_text}")
        self.exception_class_path = exception_class_path
        self.traceback = traceback_text


class TaskRunFailed(Exception):
    """A task's run failed outside the task's function: it never started (its wait for its bounds
    ended), or its input was not a task's. The TaskError's traceback is the run's error."""


class TaskRunCancelled(TaskRunFailed):
    """A task's run was cancelled (Studio, `stackbone runs cancel`, cancel_run) before it finished."""


class TaskRunSkipped(TaskRunFailed):
    """A task's run ended skipped (SPEC 14.2, 14.5): its bounds were full and skip, or a queue was at
    its cap; it never started."""


class TaskRunReplaced(TaskRunFailed):
    """A task's run ended replaced (SPEC 14.3): a newer run of its key took its place; it never
    started."""


# --- the task class: where @task's extra arguments land --------------------------------------------

_tasks: dict[str, LimitsTask] = {}  # module path -> the task defined there (the first definition)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LimitsTask(_TaskBase):
    """A django.tasks Task that also declares what bounds its runs (SPEC 15.2). Django gives the
    extra keyword arguments of `@task(...)` to the backend's task class; this one checks them
    when the task is defined and registers the task's workflow."""

    concurrency: Mapping[str, int] | None = dataclasses.field(default=None, hash=False)
    limits: Sequence[str] | None = dataclasses.field(default=None, hash=False)
    concurrency_key: str | Callable[..., object] | None = None
    on_full: str | None = None

    def __post_init__(self) -> None:
        Task.__post_init__(self)  # the backend's checks (LimitsBackend.validate_task)
        declare(self)


def declare(task: LimitsTask) -> None:
    """Check a task's declaration and register its workflow (once per module path: a copy made
    by .using() shares the first one's). A mistake is an InvalidLimitsTask."""
    from limits.runs import bounds as run_bounds

    name = task.module_path
    if len(name) > WORKFLOW_NAME_MAX_LENGTH:
        raise InvalidLimitsTask(PATH_TOO_LONG.format(name=name, maximum=WORKFLOW_NAME_MAX_LENGTH))
    if task.on_full is not None and task.concurrency is None and not task.limits:
        raise InvalidLimitsTask(ON_FULL_WITHOUT_BOUNDS.format(name=name))
    _check_key_spec(task)
    try:
        run_bounds.declare(name, task.concurrency, task.limits, module=task.func.__module__, start_on_full=task.on_full)
    except WorkflowError as error:
        raise InvalidLimitsTask(str(error)) from None
    if name not in _tasks:
        runtime.workflow(_body_of(name, task), name=name)
        _tasks[name] = task


def _check_key_spec(task: LimitsTask) -> None:
    spec, name = task.concurrency_key, task.module_path
    if spec is None:
        return
    if task.concurrency is None and not task.limits:
        raise InvalidLimitsTask(KEY_WITHOUT_BOUNDS.format(name=name))
    if callable(spec):
        return
    if not isinstance(spec, str) or not spec:
        raise InvalidLimitsTask(BAD_KEY_SPEC.format(name=name, value=spec))
    parameters = _parameters(task)
    named = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if spec not in named and not any(p.kind == p.VAR_KEYWORD for p in parameters):
        known = ", ".join(named) if named else "no named argument"
        raise InvalidLimitsTask(KEY_NOT_AN_ARGUMENT.format(name=name, value=spec, known=known))


def _parameters(task: Task[..., Any]) -> list[inspect.Parameter]:
    parameters = list(inspect.signature(task.func).parameters.values())
    return parameters[1:] if task.takes_context else parameters  # the context is not an argument


def key_of(task: LimitsTask, args: list[Any], kwargs: dict[str, Any]) -> object:
    """The run's concurrency key, read from the arguments (as the function will get them): the
    value of the argument `concurrency_key` names (its default if not given), or what the callable
    returns; a whole number becomes its text, None is no key. Anything else is the run layer's to
    refuse (limits.runs.bounds: a key is text of 1 to 128 characters)."""
    spec = task.concurrency_key
    if spec is None:
        return None
    if callable(spec):
        value = spec(*args, **kwargs)
    else:
        signature = inspect.signature(task.func)
        try:
            bound = signature.bind(*([None] if task.takes_context else []), *args, **kwargs)
        except TypeError as error:
            raise TypeError(KEY_FROM_ARGUMENTS.format(name=task.module_path, value=spec, error=error)) from None
        bound.apply_defaults()
        if spec in bound.arguments and signature.parameters[spec].kind != inspect.Parameter.VAR_KEYWORD:
            value = bound.arguments[spec]
        else:
            value = kwargs.get(spec)  # taken by the function's **kwargs
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


# --- the run's body: one step, the task's function ------------------------------------------------


def _body_of(name: str, task: LimitsTask) -> Callable[[Any], Any]:
    def run_task(input: Any) -> Any:
        args, kwargs = _arguments_of(input)
        return runtime.run_step(task.name, lambda: _call(name, args, kwargs))

    run_task.__doc__ = "\n\n".join(
        part for part in (inspect.getdoc(task.func), 'Input: {"args": [...], "kwargs": {...}}') if part
    )
    return run_task


def _arguments_of(input: Any) -> tuple[list[Any], dict[str, Any]]:
    """A task run's arguments from its input; another input (a run started by hand with the
    wrong one) fails the run before the function is called."""
    if isinstance(input, dict) and set(input) <= INPUT_FIELDS:
        args, kwargs = input.get("args", []), input.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    raise TaskRunFailed(BAD_INPUT.format(value=runtime.storable_text(repr(input))[:200]))


def _call(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The step: call the function, as Django's ImmediateBackend does (its context, its signals,
    every exception but KeyboardInterrupt caught), and give its return value as JSON. A failure is
    raised as TaskFailed, which the run layer records on the step."""
    from stackbone.runs.json_values import unstorable

    task = _tasks[name]
    backend = task.get_backend()
    ctx = runtime.current_run()
    running = backend.get_result(ctx.run_id) if ctx is not None else _detached_result(task, args, kwargs)
    task_started.send(sender=type(backend), task_result=running)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=running), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = normalize_json(value)
        reason = unstorable(value)
        if reason is not None:
            raise WorkflowError(runtime.NOT_JSON.format(what="the task's return value", error=reason))
    except (KeyboardInterrupt, runtime.Suspend, runtime.LeaseLost):
        raise
    except BaseException as error:
        kind = type(error)
        failure = TaskFailed(f"{kind.__module__}.{kind.__qualname__}", "".join(traceback.format_exception(error)))
        errors = [TaskError(exception_class_path=failure.exception_class_path, traceback=failure.traceback)]
        finished = dataclasses.replace(
            running, status=TaskResultStatus.FAILED, finished_at=timezone.now(), errors=errors
        )
        task_finished.send(sender=type(backend), task_result=finished)  # in the handler: logged with exc_info
        raise failure from error
    finished = dataclasses.replace(running, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now())
    object.__setattr__(finished, "_return_value", value)
    task_finished.send(sender=type(backend), task_result=finished)
    return value


def _detached_result(task: LimitsTask, args: list[Any], kwargs: dict[str, Any]) -> _Result:
    """A RUNNING result for a call outside a run (the body called directly)."""
    now = timezone.now()
    return TaskResult(
        task=task,
        id="",
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[WORKER_ID],
    )


# --- the backend -----------------------------------------------------------------------------------

_STATUS = {
    "queued": TaskResultStatus.READY,  # waiting for its bounds, or deferred (run_after)
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
    "skipped": TaskResultStatus.FAILED,  # SPEC 15.3: with the reason (errors_of)
    "replaced": TaskResultStatus.FAILED,
}


class LimitsBackend(BaseTaskBackend):
    """`TASKS = {"default": {"BACKEND": "limits.django_tasks.LimitsBackend"}}`: each enqueued task is
    a durable run of the box (SPEC 15). QUEUES as Django's backends take it; no OPTIONS;
    ENQUEUE_ON_COMMIT True, the default (False is a check error: limits.checks)."""

    task_class = LimitsTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False  # SPEC 8.1

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.params = params

    def validate_task(self, task: Task[..., Any]) -> None:
        if task.priority != DEFAULT_TASK_PRIORITY:
            raise InvalidTask(PRIORITY_REFUSED.format(priority=task.priority))
        super().validate_task(task)
        if not isinstance(task, LimitsTask):
            raise InvalidTask(NOT_OUR_TASK.format(path=task.module_path, alias=self.alias))

    def enqueue(self, task: Task[_P, _R], args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult[_P, _R]:
        """Start the task's run (SPEC 15.1): arguments Django's JSON refuses are refused as its
        backends refuse them (TypeError, ValueError), what no database keeps (NaN, NUL) as
        start_run refuses it (WorkflowError), and nothing is created then."""
        self.validate_task(task)
        _require_apps(self.alias)
        ours = task
        assert isinstance(ours, LimitsTask)  # validate_task refuses any other
        json_args = cast(list[Any], normalize_json(list(args)))
        json_kwargs = cast(dict[str, Any], normalize_json(dict(kwargs)))
        run = self._start(ours, json_args, json_kwargs)
        result = self._result(task, run)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> _Result:
        from stackbone.runs.models import Run

        _require_apps(self.alias)
        result_id = str(result_id)
        run = None if "\x00" in result_id else Run.objects.filter(id=result_id).first()
        task = None if run is None else task_named(run.workflow)
        if run is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        run_after = run.input.get("run_after") if isinstance(run.input, dict) else None
        if isinstance(run_after, str):  # a deferred run: the task as it was enqueued, with its start time
            return self._result(task.using(run_after=datetime.fromisoformat(run_after)), run)
        return self._result(task, run)

    def check(self, **kwargs: Any) -> list[Any]:
        from limits.checks import task_backend_problems

        return task_backend_problems(self.alias, self.params)

    def _start(self, task: LimitsTask, args: list[Any], kwargs: dict[str, Any]) -> Run:
        from limits.runs import bounds as run_bounds
        from limits.runs import start_run
        from stackbone.plumbing import clock

        name, key = task.module_path, key_of(task, args, kwargs)
        input: dict[str, Any] = {"args": args, "kwargs": kwargs}
        run_after = task.run_after
        if run_after is not None:
            run_after = timezone.make_aware(run_after) if timezone.is_naive(run_after) else run_after
            input["run_after"] = run_after.isoformat()  # get_result gives the task back with it
        if run_after is not None and run_after > clock.now():
            bounds, checked = run_bounds.bounds_for_run(name, None, key)
            return runtime.start_run_at(
                name, input, not_before=run_after, bounds=bounds, concurrency_key=checked if bounds else ""
            )
        # A key that is not text is refused by start_run's own check, as for any run.
        return start_run(name, input, concurrency_key=key)  # type: ignore[arg-type]

    def _result(self, task: Task[_P, _R], run: Run) -> TaskResult[_P, _R]:
        status = _STATUS[run.status]
        input = run.input if isinstance(run.input, dict) else {}
        args, kwargs = input.get("args"), input.get("kwargs")
        started = run.started_at
        result: TaskResult[_P, _R] = TaskResult(
            task=task,
            id=run.id,
            status=status,
            enqueued_at=run.created_at,
            started_at=started,
            finished_at=run.finished_at,
            last_attempted_at=started,
            args=args if isinstance(args, list) else [],
            kwargs=kwargs if isinstance(kwargs, dict) else {},
            backend=self.alias,
            errors=errors_of(run) if status == TaskResultStatus.FAILED else [],
            worker_ids=[WORKER_ID] if started is not None else [],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", run.output)
        return result


def _require_apps(alias: str) -> None:
    """The system check's limits.E020 at the first use, for a project whose checks did not run it
    (Django registers the task check only once django.tasks is imported): a clear error, not a
    missing table."""
    from django.apps import apps

    from limits.checks import DJANGO_TASKS_APPS, TASKS_APP_MISSING

    for app in DJANGO_TASKS_APPS:
        if not apps.is_installed(app):
            raise InvalidTaskBackend(TASKS_APP_MISSING.format(alias=alias, app=app))


def task_named(name: str) -> LimitsTask | None:
    """The task whose runs are named `name`, importing its module if need be; None for a run of
    a @workflow, or of a task no longer defined."""
    if name not in _tasks:
        try:
            runtime.get_workflow(name)
        except WorkflowError:
            return None
    return _tasks.get(name)


def errors_of(run: Run) -> list[TaskError]:
    """A failed task run's errors in Django's shape: the function's exception, from the failed
    step; or what ended the run outside it."""
    from limits.engine.results import REASONS
    from stackbone.runs.models import Run, Step

    if run.status == Run.Status.CANCELLED:
        return [_error(TaskRunCancelled, CANCELLED)]
    if run.status == Run.Status.SKIPPED:
        reason = REASONS.get(run.end_reason or "", run.end_reason or "no reason recorded")
        return [_error(TaskRunSkipped, SKIPPED.format(reason=reason, limit=run.end_limit or "no limit recorded"))]
    if run.status == Run.Status.REPLACED:
        return [_error(TaskRunReplaced, REPLACED.format(run=run.caused_by or "a newer run"))]
    step = (
        Step.objects.filter(run_id=run.id, kind=Step.Kind.STEP, status=Step.Status.FAILED)
        .order_by("seq")
        .values_list("error", flat=True)
        .first()
    )
    if step is not None and step.startswith(FAILED_PREFIX):
        path, _, text = step.removeprefix(FAILED_PREFIX).partition("\n")
        return [TaskError(exception_class_path=path, traceback=text)]
    return [_error(TaskRunFailed, run.error or step or "the run failed")]


def _error(kind: type[BaseException], text: str) -> TaskError:
    return TaskError(exception_class_path=f"{kind.__module__}.{kind.__qualname__}", traceback=f"{text}\n")
