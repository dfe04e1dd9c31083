"""The run layer's Celery tasks, where Celery's autodiscovery looks for this app's tasks (their
names, studio.tasks.*, are what the broker carries, before and after the move): defined in
stackbone.runs.tasks."""

from stackbone.runs.tasks import advance_run, advance_runs, recover_at_worker_start, recover_runs

__all__ = ["advance_run", "advance_runs", "recover_at_worker_start", "recover_runs"]
