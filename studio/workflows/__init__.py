"""Durable workflows. Write them in this package (or in modules STACKBONE_WORKFLOWS names)::

    from studio.workflows import workflow, step

    @workflow
    def place_call(input: dict) -> dict: ...

Start a run with start_run(place_call, {...}) or start_run("place_call", {...}); cancel it with
cancel_run(run_id). The modules in this package are the shipped examples.
"""

from studio.runs.runtime import StepError, WorkflowError, cancel_run, start_run, step, workflow

__all__ = ["StepError", "WorkflowError", "cancel_run", "start_run", "step", "workflow"]
