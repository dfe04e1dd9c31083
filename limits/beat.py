"""The periodic tasks a project's Celery beat runs for these apps (docs/embedding.md): the sweep
(limits) and run recovery (the run layer), each every 15 s, and limits' hourly ANALYZE of its
partitioned tables (PostgreSQL). A project takes them whole::

    from limits.beat import BEAT_SCHEDULE
    CELERY_BEAT_SCHEDULE = {**BEAT_SCHEDULE}

No `expires`: a worker would judge it by its own clock (one minutes ahead drops every message).
A backlog (no worker for hours) costs little: a sweep within 5 s of the last pass, by the
database's clock, does nothing (limits/tasks.py), and a recovery pass with nothing to do is a few
indexed reads. Plain data, no Django: settings import it.
"""

from __future__ import annotations

from typing import Any

SWEEP = "limits.tasks.sweep"
ANALYZE = "limits.tasks.analyze"
RECOVER_RUNS = "studio.tasks.recover_runs"

# Maintenance work: a project that routes it to a queue of its own (docs/operations.md, "Queues")
# routes these names.
MAINTENANCE_TASKS = (SWEEP, ANALYZE, RECOVER_RUNS)

BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "limits-sweep": {"task": SWEEP, "schedule": 15.0},
    "limits-analyze": {"task": ANALYZE, "schedule": 3600.0},
    "runs-recover": {"task": RECOVER_RUNS, "schedule": 15.0},
}
