from __future__ import annotations

from django.core.checks import Error, register

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
