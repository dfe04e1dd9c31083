from __future__ import annotations

import datetime
from typing import Any

from django.apps import AppConfig, apps
from django.db.models import QuerySet
from django.db.models.signals import post_migrate


class LimitsConfig(AppConfig):
    name = "limits"
    verbose_name = "Concurrency limits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import worker_init

        from limits import (
            checks,  # registers the workspace check
            conf,
        )
        from limits.runs import bounds as run_bounds
        from limits.signals import runs_woken
        from stackbone.runs.models import Run
        from stackbone.runs.signals import find_stuck_waits, run_ended, run_queued, run_starting

        conf.install_defaults()
        if apps.is_installed("django.contrib.admin"):
            # Runs and their steps in the admin: the run layer below knows no admin of its own.
            from limits.runs import admin  # noqa: F401

        post_migrate.connect(_sync_declared_limits, sender=self)
        worker_init.connect(checks.refuse_to_start_with_a_bad_workspace, weak=False)
        # The run layer below knows nothing of limits; limits listens to it, and wakes its runs.
        run_ended.connect(_run_ended, sender=Run, dispatch_uid="limits-run-ended")
        find_stuck_waits.connect(_reserved_runs, sender=Run, dispatch_uid="limits-stuck-waits")
        runs_woken.connect(_wake_runs, dispatch_uid="limits-wake-runs")
        # Whole runs that hold limits (SPEC 11): queued at start, confirmed when a worker starts them.
        run_queued.connect(run_bounds.queued, sender=Run, dispatch_uid="limits-run-queued")
        run_starting.connect(run_bounds.starting, sender=Run, dispatch_uid="limits-run-starting")


def _sync_declared_limits(using: str = "default", **kwargs: object) -> None:
    """Declared values reach the database at every migrate (SPEC 1.4)."""
    from limits.config import load_workspace
    from limits.runs import bounds as run_bounds
    from limits.services import sync_workspace

    if using != "default":
        return
    sync_workspace(load_workspace())
    run_bounds.sync()  # the workflows' own bounds (SPEC 11.5)


def _run_ended(sender: object, run_id: str, **kwargs: object) -> None:
    """A run ended: it leaves every queue, and what ends with it is freed (SPEC 2.5, 3.4, 3.7),
    in the transaction that ends the run."""
    from limits.services import end_run

    end_run(run_id)


def _reserved_runs(sender: object, now: datetime.datetime, **kwargs: object) -> QuerySet[Any]:
    """For the run layer's recovery: the runs a slot was reserved for more than 5 s ago (a
    subquery); those still suspended lost their wake."""
    from limits.models import Slot

    return Slot.objects.filter(state=Slot.State.RESERVED, granted_at__lt=now - datetime.timedelta(seconds=5)).values(
        "run_id"
    )


def _wake_runs(sender: object, run_ids: list[str], **kwargs: object) -> None:
    """The engine handed a slot to these runs or timed their wait out: resume them.

    This runs after the engine's change committed; a failure here (the database restarting)
    must not make that change look failed to its caller. Runs left unwoken are woken by
    the run layer's recovery (a reserved slot, or a deadline past)."""
    from stackbone.runs.runtime import logger, wake

    try:
        wake(run_ids)
    except Exception as error:
        logger.warning("could not wake %d run(s) (%s); recovery wakes them", len(run_ids), type(error).__name__)
