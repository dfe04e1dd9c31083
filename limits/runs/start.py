"""@workflow, start_run and start_runs: the public API's own code (limits.runs hands these names
on, with the run layer's step, cancel_run and errors). A workflow that caps its runs declares its
bounds here (limits.runs.bounds); a start checks everything before it writes anything, then takes
the bounds in one engine call on PostgreSQL (bounds.start_on_server) or run by run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, overload

from django.db import transaction

from limits.engine.engines import engine
from limits.runs import bounds as run_bounds
from stackbone.runs import runtime
from stackbone.runs.models import Run
from stackbone.runs.runtime import StepError, Workflow, WorkflowError, cancel_run, step

__all__ = ["StepError", "WorkflowError", "cancel_run", "start_run", "start_runs", "step", "workflow"]


@overload
def workflow(
    fn: Callable[[Any], Any],
    *,
    name: str | None = None,
    concurrency: dict[str, Any] | None = None,
    limits: list[str] | None = None,
    reference: str | None = None,
) -> Workflow: ...


@overload
def workflow(
    fn: None = None,
    *,
    name: str | None = None,
    concurrency: dict[str, Any] | None = None,
    limits: list[str] | None = None,
    reference: str | None = None,
) -> Callable[[Callable[[Any], Any]], Workflow]: ...


def workflow(
    fn: Callable[[Any], Any] | None = None,
    *,
    name: str | None = None,
    concurrency: dict[str, Any] | None = None,
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
    wf: Workflow | str,
    input: Any = None,
    concurrency_key: str | None = None,
    limits: list[str] | None = None,
    *,
    on_full: str | None = None,
) -> Run:
    """Create a run and dispatch it after commit. A workflow that caps its runs (or a start with
    `limits`) makes the run wait 'queued' until every bound has room (SPEC 11.2, 11.3):
    `concurrency_key` picks the per-key pool of each bound; `limits` replaces the workflow's named
    limits for this run (`[]`: only its own bound). A run that cannot start at once under bounds
    that skip (`on_full="skip"` for this start, else its bounds' own on_full), or whose queue is at
    its cap (max_waiting, max_waiting_per_key), comes back ended 'skipped' with its reason
    (`end_reason`, `end_limit`), never started and in no queue (SPEC 14.2, 14.5). Under bounds
    that replace (`on_full="replace"`, else its bounds' own), a run that cannot start at once takes
    the queue place of its key's runs queued to start under the same bounds: they end 'replaced'
    (`caused_by` this run), never started (SPEC 14.3); a run holding its slots is never touched."""
    keys: list[str | None] | None = None if concurrency_key is None else [concurrency_key]
    return _start(wf, [input], keys, limits, batch=False, on_full=on_full)[0]


def start_runs(
    wf: Workflow | str,
    inputs: Sequence[Any],
    concurrency_keys: Sequence[str | None] | None = None,
    limits: list[str] | None = None,
    *,
    on_full: str | None = None,
) -> list[Run]:
    """Start many runs of one workflow at once: created in one transaction, their bounds taken in
    the order given (trigger order, SPEC 11.3), published after commit; the runs come back in
    that order, as they are when the call returns (under bounds that replace, an earlier run of
    the batch a later run of its key replaced comes back 'replaced', SPEC 14.3).
    `concurrency_keys`: one per input (None for a run without a key), or None; `limits` and
    `on_full` as for start_run, for every run: each run is judged in order, so a run the batch's
    earlier runs filled the bounds for ends 'skipped' under a bound that skips. A bad
    input or key refuses the whole batch with its index named (`inputs[3]: ...`), and nothing is
    written."""
    if isinstance(inputs, str | bytes | Mapping) or not isinstance(inputs, Sequence):
        raise WorkflowError("inputs must be a list of inputs, one per run")
    if concurrency_keys is not None and (
        isinstance(concurrency_keys, str | bytes) or not isinstance(concurrency_keys, Sequence)
    ):
        raise WorkflowError("concurrency_keys must be a list, one key (or None) per input")
    if concurrency_keys is not None and len(concurrency_keys) != len(inputs):
        raise WorkflowError(
            f"concurrency_keys must have one key per input: {len(concurrency_keys)} keys for {len(inputs)} inputs"
        )
    if not inputs:
        return []
    keys = None if concurrency_keys is None else list(concurrency_keys)
    return _start(wf, list(inputs), keys, limits, batch=True, on_full=on_full)


def _named[T](check: Callable[[Any, Any, str], T], of: Any, value: Any, field: str) -> T:
    """check(of, value, field), its refusal naming `field` (WorkflowError.field) for a caller that
    maps it to its own names (the API's `runs[2].input`)."""
    try:
        return check(of, value, field)
    except WorkflowError as error:
        raise WorkflowError(str(error), field) from None


def _start(
    wf: Workflow | str,
    inputs: list[Any],
    keys: list[str | None] | None,
    limits: object,
    *,
    batch: bool,
    on_full: object = None,
) -> list[Run]:
    """start_run and start_runs: everything checked before anything is written; on PostgreSQL one
    engine call for the lot (run_bounds.start_on_server), else the Python rules, run by run in
    one transaction."""
    workflow_name = wf.name if isinstance(wf, Workflow) else wf
    if not isinstance(workflow_name, str):
        raise WorkflowError("start_run takes a @workflow function or its registered name")
    registered = runtime.get_workflow(workflow_name)  # an unknown workflow is its own clear error
    prepared = [
        _named(runtime.prepared_input, registered, input, f"inputs[{i}]" if batch else "the input")
        for i, input in enumerate(inputs)
    ]
    checked = [
        _named(run_bounds.run_key, workflow_name, key, f"concurrency_keys[{i}]" if batch else "concurrency_key")
        for i, key in enumerate(keys or [None] * len(inputs))
    ]
    _, declared = run_bounds.start_bounds(workflow_name, limits)  # the named limits' form, before any query
    chosen = (
        declared.start_on_full
        if on_full is None
        else run_bounds.check_start_on_full(workflow_name, on_full, own_bound=declared.has_own_bound)
    )
    if engine().starts_runs_in_one_call:
        started = run_bounds.start_on_server(registered, prepared, checked, limits, chosen)
        if started is not None:
            return started
    # Checked, and the workflow's own bound synced if missing (11.6), before the batch's transaction.
    bounds, _ = run_bounds.bounds_for_run(workflow_name, limits)
    with transaction.atomic() if batch else nullcontext(), run_bounds.starting_with(chosen):
        runs = [
            runtime.start_run(registered, input, bounds=bounds or None, concurrency_key=key if bounds else "")
            for input, key in zip(inputs, checked, strict=True)
        ]
    if len(runs) > 1 and bounds:  # SPEC 14.3: a run a later run of the batch replaced ended 'replaced'
        queued = [run.id for run in runs if run.status == Run.Status.QUEUED]
        replaced = set(Run.objects.filter(id__in=queued, status=Run.Status.REPLACED).values_list("id", flat=True))
        for run in runs:
            if run.id in replaced:
                run.refresh_from_db()
    return runs
