"""Kept for old imports: the run layer's tasks live in stackbone.runs.tasks (their names,
studio.tasks.*, are what the broker carries)."""

from stackbone.runs.tasks import advance_run, advance_runs, recover_at_worker_start, recover_runs

__all__ = ["advance_run", "advance_runs", "recover_at_worker_start", "recover_runs"]
