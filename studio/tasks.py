"""The run layer's Celery tasks, where Celery's autodiscovery looks for the studio app's tasks
(their names, studio.tasks.*, are what the broker carries): defined in studio.runs.tasks."""

from studio.runs.tasks import advance_run, advance_runs, recover_at_worker_start, recover_runs

__all__ = ["advance_run", "advance_runs", "recover_at_worker_start", "recover_runs"]
