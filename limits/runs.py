"""Durable workflows, the public API: write them anywhere (in modules STACKBONE_WORKFLOWS names)::

    from limits.runs import workflow, step

    @workflow
    def place_call(input: dict) -> dict: ...

Start a run with start_run(place_call, {...}) or start_run("place_call", {...}); cancel it with
cancel_run(run_id). `studio.workflows` (the box's example workflows) re-exports these names.

Cap whole runs (SPEC 11, limits/run_bounds.py)::

    @workflow(concurrency={"total": 4, "per_key": 1}, limits=["partner-api"])
    def sync_account(input: dict) -> dict: ...

    start_run(sync_account, {...}, concurrency_key="acme")   # 'queued' until its bounds have room
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from limits import run_bounds
from stackbone.runs import runtime
from stackbone.runs.models import Run
from stackbone.runs.runtime import StepError, Workflow, WorkflowError, cancel_run, step

__all__ = ["StepError", "WorkflowError", "cancel_run", "start_run", "step", "workflow"]


@overload
def workflow(
    fn: Callable[[Any], Any],
    *,
    name: str | None = None,
    concurrency: dict[str, int] | None = None,
    limits: list[str] | None = None,
    reference: str | None = None,
) -> Workflow: ...


@overload
def workflow(
    fn: None = None,
    *,
    name: str | None = None,
    concurrency: dict[str, int] | None = None,
    limits: list[str] | None = None,
    reference: str | None = None,
) -> Callable[[Callable[[Any], Any]], Workflow]: ...


def workflow(
    fn: Callable[[Any], Any] | None = None,
    *,
    name: str | None = None,
    concurrency: dict[str, int] | None = None,
    limits: list[str] | None = None,
    reference: str | None = None,
) -> Workflow | Callable[[Callable[[Any], Any]], Workflow]:
    """Register a workflow function under its name (or `name`). Use as @workflow or
    @workflow(name=..., concurrency={"total": n, "per_key": m}, limits=[...], reference="call_id"):
    `concurrency` caps its runs (total, and per concurrency key), `limits` names up to two declared
    limits every run holds a slot of, from before its first step to its end (SPEC 11.1);
    `reference` names the field of the input a run is found by in a search (the Runs screen,
    `stackbone runs list --search`, the API). Checked here; a mistake is a WorkflowError naming
    the workflow and the field."""

    def register(fn: Callable[[Any], Any]) -> Workflow:
        workflow_name = name or fn.__name__
        runtime.check_reference(workflow_name, reference)
        run_bounds.declare(workflow_name, concurrency, limits, module=fn.__module__)
        registered: Workflow = runtime.workflow(fn, name=workflow_name, reference=reference)
        return registered

    return register(fn) if fn is not None else register


def start_run(
    wf: Workflow | str, input: Any = None, concurrency_key: str | None = None, limits: list[str] | None = None
) -> Run:
    """Create a run and dispatch it after commit. A workflow that caps its runs (or a start with
    `limits`) makes the run wait 'queued' until every bound has room (SPEC 11.2, 11.3):
    `concurrency_key` picks the per-key pool of each bound; `limits` replaces the workflow's named
    limits for this run (`[]`: only its own bound)."""
    workflow_name = wf.name if isinstance(wf, Workflow) else wf
    if isinstance(workflow_name, str):
        runtime.get_workflow(workflow_name)  # an unknown workflow is its own clear error
        bounds, key = run_bounds.bounds_for_run(workflow_name, limits, concurrency_key)
        if bounds:
            return runtime.start_run(wf, input, bounds=bounds, concurrency_key=key)
    return runtime.start_run(wf, input)
