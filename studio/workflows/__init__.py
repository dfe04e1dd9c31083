"""The box's example workflows (STACKBONE_WORKFLOWS names this package). Write your own the same
way, here or in any module STACKBONE_WORKFLOWS names::

    from limits.runs import workflow, step

    @workflow
    def place_call(input: dict) -> dict: ...

`from studio.workflows import workflow, start_run, ...` goes on working: the names below are
limits.runs', their home since the run layer left the box (docs/embedding.md).
"""

from __future__ import annotations

from limits.runs import StepError, WorkflowError, cancel_run, start_run, step, workflow

__all__ = ["StepError", "WorkflowError", "cancel_run", "start_run", "step", "workflow"]
