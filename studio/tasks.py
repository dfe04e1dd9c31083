"""Old path of the run layer's tasks, which live in stackbone.runs.tasks (their names,
studio.tasks.*, are what the broker carries). Celery's autodiscovery imports this module as the
box app's tasks: importing it says nothing, using a name from it warns (DeprecationWarning) and
gives stackbone.runs.tasks' (studio/_moved.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from studio._moved import moved_name

__all__ = ["advance_run", "advance_runs", "recover_at_worker_start", "recover_runs"]

if TYPE_CHECKING:
    from stackbone.runs.tasks import advance_run, advance_runs, recover_at_worker_start, recover_runs
else:

    def __getattr__(name: str) -> object:
        return moved_name(__name__, "stackbone.runs.tasks", name, __all__)
