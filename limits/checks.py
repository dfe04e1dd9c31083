from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register

# Django registers its task backends' check (each backend's check(): LimitsBackend's below) when
# django.tasks is first imported; a project's tasks modules may not be by the time checks run.
from django.tasks import checks as _task_checks  # noqa: F401

from limits.config import ConfigError, load_workspace

NO_WORKSPACE = "STACKBONE_WORKSPACE is not set"
NO_WORKSPACE_HINT = (
    "Name the module that declares your limits, e.g. STACKBONE_WORKSPACE = 'billing.workspace' (docs/embedding.md)."
)


@register()
def check_workspace(app_configs: object = None, **kwargs: object) -> list[Error]:
    """Report a bad workspace config at `manage.py check`, runserver and worker start."""
    from django.conf import settings

    if not getattr(settings, "STACKBONE_WORKSPACE", None):  # a project that has not named one yet
        return [Error(NO_WORKSPACE, hint=NO_WORKSPACE_HINT, id="limits.E003")]
    try:
        load_workspace()
    except ConfigError as error:  # every problem at once: one Error each
        hint = "Fix the workspace module named by STACKBONE_WORKSPACE."
        return [Error(str(problem), hint=hint, id="limits.E001") for problem in error.errors]
    return []


@register()
def check_history_retention(app_configs: object = None, **kwargs: object) -> list[Error]:
    from django.conf import settings

    from limits.durations import DurationError, parse_duration

    try:
        parse_duration(settings.STACKBONE_HISTORY_RETENTION, maximum=None)
    except DurationError as error:
        return [Error(f"STACKBONE_HISTORY_RETENTION {error}", id="limits.E002")]
    return []


def refuse_to_start_with_a_bad_workspace(**kwargs: object) -> None:
    """Connected to Celery's worker_init: a worker does not start on a bad workspace."""
    errors = check_workspace()
    if errors:
        raise SystemExit("\n".join(f"limits.E001: {error.msg}" for error in errors))


# --- Django's task framework through the box (limits.django_tasks, SPEC 15) -----------------------

TASKS_APP_MISSING = "TASKS[{alias!r}] uses LimitsBackend, but {app!r} is not in INSTALLED_APPS"
TASKS_APP_MISSING_HINT = (
    "LimitsBackend runs each task as a durable run of the limits and stackbone apps: add both to "
    "INSTALLED_APPS (docs/embedding.md, step 2), then migrate."
)
TASKS_NO_CELERY_APP = "TASKS[{alias!r}] uses LimitsBackend, but the project has no Celery app: no task would ever run"
TASKS_NO_CELERY_APP_HINT = (
    "Make your project's Celery app and load it when Django starts (docs/embedding.md, step 4: mysite/celery.py "
    "and mysite/__init__.py), then run `celery -A mysite worker` and one `celery -A mysite beat`."
)
TASKS_NOT_ON_COMMIT = "TASKS[{alias!r}]: LimitsBackend does not support ENQUEUE_ON_COMMIT = False"
TASKS_NOT_ON_COMMIT_HINT = (
    "A task's run is a row written in the caller's transaction and sent to a worker when it commits, so it "
    "can never start before that commit, nor outlive a rollback. Remove ENQUEUE_ON_COMMIT (docs/django-tasks.md)."
)
TASKS_UNKNOWN_OPTIONS = "TASKS[{alias!r}]: LimitsBackend takes no OPTIONS, not {names}"
TASKS_QUEUES_DO_NOT_ROUTE = (
    "TASKS[{alias!r}]: QUEUES names {names}, but LimitsBackend runs every task on the box's Celery workers"
)
TASKS_QUEUES_DO_NOT_ROUTE_HINT = (
    "queue_name is checked against QUEUES and not kept: to share work between kinds of tasks, declare limits "
    "(@task(limits=[...])) instead (docs/django-tasks.md)."
)
DJANGO_TASKS_APPS = ("limits", "stackbone")


def task_backend_problems(
    alias: str,
    params: dict[str, Any],
    *,
    installed: Callable[[str], bool] | None = None,
    celery_app: Any = None,
) -> list[CheckMessage]:
    """What is wrong with a TASKS entry naming LimitsBackend, as system check messages (its
    check(), which Django's task check runs: `manage.py check`, runserver, migrate). `installed`
    (is an app installed, by name) and `celery_app` (the current Celery app) stand in for the
    process's own in tests."""
    from celery import current_app
    from django.apps import apps

    is_installed = installed or apps.is_installed
    app = celery_app if celery_app is not None else current_app
    problems: list[CheckMessage] = [
        Error(TASKS_APP_MISSING.format(alias=alias, app=name), hint=TASKS_APP_MISSING_HINT, id="limits.E020")
        for name in DJANGO_TASKS_APPS
        if not is_installed(name)
    ]
    if getattr(app, "main", None) in (None, "default"):  # Celery's fallback app: the project made none
        problems.append(Error(TASKS_NO_CELERY_APP.format(alias=alias), hint=TASKS_NO_CELERY_APP_HINT, id="limits.E021"))
    if params.get("ENQUEUE_ON_COMMIT", True) is not True:
        problems.append(Error(TASKS_NOT_ON_COMMIT.format(alias=alias), hint=TASKS_NOT_ON_COMMIT_HINT, id="limits.E022"))
    options = params.get("OPTIONS") or {}
    if options:
        names = ", ".join(sorted(map(str, options))) if isinstance(options, dict) else repr(options)
        problems.append(Error(TASKS_UNKNOWN_OPTIONS.format(alias=alias, names=names), id="limits.E023"))
    queues = params.get("QUEUES")
    others = sorted(str(name) for name in queues if name != "default") if isinstance(queues, list | tuple | set) else []
    if others:
        problems.append(
            Warning(
                TASKS_QUEUES_DO_NOT_ROUTE.format(alias=alias, names=", ".join(others)),
                hint=TASKS_QUEUES_DO_NOT_ROUTE_HINT,
                id="limits.W020",
            )
        )
    return problems
