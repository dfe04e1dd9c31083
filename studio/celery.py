"""The project's Celery app, and how its tasks use database connections.

Celery's Django fixup closes every database connection before and after each task unless
`CELERY_DB_REUSE_MAX` is set. On PostgreSQL that is a new server process per task, with cold
caches, every statement planned again and every PL/pgSQL function of the engine compiled again:
measured in the bench (docs/performance.md, scenario 11) it was most of a short run's time in
the worker. Here a task is treated like a web request instead: Django's `close_old_connections()`
before and after it keeps a connection up to `CONN_MAX_AGE` (settings: 600 s on PostgreSQL, 0 on
SQLite) and drops one that is broken (an error left it unusable: a restart, a cut connection),
and `CONN_HEALTH_CHECKS` checks a reused connection before its first query. The fixup still
closes them all every `CELERY_DB_REUSE_MAX` tasks (settings), which is harmless.

An eager task (tests, `CELERY_TASK_ALWAYS_EAGER`) runs inside its caller, perhaps inside the
caller's transaction: its connections are the caller's, and are left alone.
"""

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, task_postrun, task_prerun, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")

app = Celery("studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def close_old_connections(sender: Any = None, **kwargs: Any) -> None:
    """Around every task run by a worker: Django's request-end rule for connections."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@worker_ready.connect
def watch_the_workers_clock(**kwargs: Any) -> None:
    """Each worker measures its host's clock against the database's at start and every 5 minutes
    (studio.plumbing.clock: logged when off, shown on /healthz, /metrics and Studio)."""
    from studio.plumbing import clock

    clock.watch("worker")


@beat_init.connect
def watch_the_beats_clock(**kwargs: Any) -> None:
    from studio.plumbing import clock

    clock.watch("beat")
