"""What every worker and beat of a project with this app does, whichever Celery app it runs
(connected by StackboneConfig.ready(), so a project's own canonical celery.py needs nothing more).

Database connections. Celery's Django fixup closes every database connection before and after
each task unless `CELERY_DB_REUSE_MAX` is set. On PostgreSQL that is a new server process per task,
with cold caches, every statement planned again and every PL/pgSQL function of the engine
compiled again: measured in the bench (docs/performance.md, scenario 11) it was most of a short
run's time in the worker. With `CELERY_DB_REUSE_MAX` set (the box sets it), a task is treated like
a web request instead: Django's `close_old_connections()` before and after it keeps a connection up
to `CONN_MAX_AGE` and drops one that is broken (an error left it unusable: a restart, a cut
connection), and `CONN_HEALTH_CHECKS` checks a reused connection before its first query. Without
it the fixup's closing wins, and this changes nothing.

An eager task (tests, `CELERY_TASK_ALWAYS_EAGER`) runs inside its caller, perhaps inside the
caller's transaction: its connections are the caller's, and are left alone.

Clocks. Each worker and beat measures its host's clock against the database's at start and every
5 minutes (stackbone.plumbing.clock: logged when off, shown on /healthz, /metrics and Studio).

What each worker runs. Each worker reports itself (its pool, its concurrency, the tasks it runs
now) from a thread of its main process, within a second of a change and every 5 s, and removes
its report when it stops (stackbone.plumbing.worker_beat: the Workers panel, `stackbone workers`).
"""

from __future__ import annotations

from typing import Any

from celery.signals import beat_init, task_postrun, task_prerun, worker_ready, worker_shutdown


def connect() -> None:
    task_prerun.connect(close_old_connections, dispatch_uid="stackbone-close-old-connections-prerun")
    task_postrun.connect(close_old_connections, dispatch_uid="stackbone-close-old-connections-postrun")
    worker_ready.connect(watch_the_workers_clock, dispatch_uid="stackbone-watch-workers-clock")
    worker_ready.connect(report_what_the_worker_runs, dispatch_uid="stackbone-worker-beat")
    worker_shutdown.connect(forget_the_worker, dispatch_uid="stackbone-worker-beat-stop")
    beat_init.connect(watch_the_beats_clock, dispatch_uid="stackbone-watch-beats-clock")


def close_old_connections(sender: Any = None, **kwargs: Any) -> None:
    """Around every task run by a worker: Django's request-end rule for connections."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


def watch_the_workers_clock(**kwargs: Any) -> None:
    from stackbone.plumbing import clock

    clock.watch("worker")


def watch_the_beats_clock(**kwargs: Any) -> None:
    from stackbone.plumbing import clock

    clock.watch("beat")


def report_what_the_worker_runs(sender: Any = None, **kwargs: Any) -> None:
    from stackbone.plumbing import worker_beat

    worker_beat.start(sender)


def forget_the_worker(sender: Any = None, **kwargs: Any) -> None:
    from stackbone.plumbing import worker_beat

    worker_beat.stop(sender)
