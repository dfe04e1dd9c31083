"""Durable workflow runs by replay, on Celery.

A run advances when a Celery task calls its workflow function again from the top. Every step
the body calls gets a sequence number in call order; a step whose result is recorded returns
that result instead of running again, so a replay walks quickly to where the run left off (each
recorded call is checked by its key, never by the text users see: recorded_step). A
wait (a hook) records a step that stays open, marks the run suspended, and unwinds the body
with `Suspend`: the task ends and the worker is free. Whoever ends the wait wakes the run by
dispatching the advance task again, after its transaction commits.

One run is advanced by one worker at a time: the advance takes a lease on the run row with a
compare-and-set, every recording checks the lease under the run's row lock, and a duplicate
task finds the lease taken and does nothing. Workflow bodies must be deterministic: the same
input and the same recorded step results must lead to the same calls in the same order.

This module is the run layer's one face: every name lives in a module of its own job (issue 48)
and is handed on here, where the layers above, the tests and the old path studio.runtime find it:

    errors      WorkflowError, StepError, Suspend, LeaseLost, the interruptions, check_json
    registry    @workflow, get_workflow, discover, a run's reference
    steps       the run's context, recorded_step, record_step, run_step, @step, suspend, LEASE
    starts      start_run, start_run_at, prepared_input, loaded_run, cancel_run
    dispatch    dispatch, wake, recover, start_if_due (the deferred start's countdown)
    executor    advance, its heartbeat (HEARTBEAT_SECONDS), the start gate, the end of a run

A name set on this module (a test's monkeypatch of record_step, lock_own_run, run_step or
HEARTBEAT_SECONDS, the chaos run's wrapped run_step) is set in the module it lives in as well,
so the code there calls what was set, as when this was one module (_Face).
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

from stackbone.runs import dispatch as _dispatch_module
from stackbone.runs import errors, executor, registry, starts, steps
from stackbone.runs.dispatch import (
    ADVANCE_RUN,
    ADVANCE_RUNS,
    COUNTDOWN_WITHIN,
    DEFERRED,
    DISPATCH_CHUNK,
    DISPATCH_TASKS,
    RECOVER_BATCH,
    STALE_DISPATCH,
    START_DEFERRED,
    START_GATE,
    UNFINISHED,
    WAITING_STATUSES,
    WAKE_BATCH,
    _dispatch_on_commit,
    _task,
    advanced_inline,
    dispatch_on_commit,
    recover,
    start_if_due,
    wake,
)
from stackbone.runs.dispatch import count_down_to as _count_down_to
from stackbone.runs.dispatch import dispatch as _dispatch
from stackbone.runs.errors import (
    INTERRUPTIONS,
    NOT_IN_A_RUN,
    NOT_IN_A_STEP,
    NOT_JSON,
    REPLAY_MISMATCH,
    UNKNOWN_WORKFLOW,
    LeaseLost,
    StepError,
    Suspend,
    WorkflowError,
    is_interruption,
)
from stackbone.runs.errors import check_json as _check_json
from stackbone.runs.executor import (
    HEARTBEAT_SECONDS,
    _finish,
    _Heartbeat,
    _pass_the_start_gate,
    _release_lease,
    advance,
)
from stackbone.runs.json_values import storable_text
from stackbone.runs.registry import (
    BAD_REFERENCE,
    REFERENCE_MAX_LENGTH,
    Workflow,
    _project_packages,
    _registered_by_its_module,
    _registry,
    check_reference,
    discover,
    get_workflow,
    reference_of,
    workflow,
    workflow_names,
)
from stackbone.runs.starts import cancel_run, loaded_run, prepared_input, start_run, start_run_at
from stackbone.runs.steps import (
    LEASE,
    ZERO,
    RunContext,
    _now_and_monotonic,
    _since,
    body_context,
    current_run,
    lock_own_run,
    next_recorded_key,
    record_step,
    recorded_step,
    run_step,
    step,
    suspend,
)
from stackbone.runs.steps import current_context as _current

logger = logging.getLogger(__name__)

__all__ = [
    "ADVANCE_RUN",
    "ADVANCE_RUNS",
    "BAD_REFERENCE",
    "COUNTDOWN_WITHIN",
    "DEFERRED",
    "DISPATCH_CHUNK",
    "DISPATCH_TASKS",
    "HEARTBEAT_SECONDS",
    "INTERRUPTIONS",
    "LEASE",
    "NOT_IN_A_RUN",
    "NOT_IN_A_STEP",
    "NOT_JSON",
    "RECOVER_BATCH",
    "REFERENCE_MAX_LENGTH",
    "REPLAY_MISMATCH",
    "STALE_DISPATCH",
    "START_DEFERRED",
    "START_GATE",
    "UNFINISHED",
    "UNKNOWN_WORKFLOW",
    "WAITING_STATUSES",
    "WAKE_BATCH",
    "ZERO",
    "LeaseLost",
    "RunContext",
    "StepError",
    "Suspend",
    "Workflow",
    "WorkflowError",
    "_Heartbeat",
    "_check_json",
    "_count_down_to",
    "_current",
    "_dispatch",
    "_dispatch_on_commit",
    "_finish",
    "_now_and_monotonic",
    "_pass_the_start_gate",
    "_project_packages",
    "_registered_by_its_module",
    "_registry",
    "_release_lease",
    "_since",
    "_task",
    "advance",
    "advanced_inline",
    "body_context",
    "cancel_run",
    "check_reference",
    "current_run",
    "discover",
    "dispatch_on_commit",
    "get_workflow",
    "is_interruption",
    "loaded_run",
    "lock_own_run",
    "logger",
    "next_recorded_key",
    "prepared_input",
    "record_step",
    "recorded_step",
    "recover",
    "reference_of",
    "run_step",
    "start_if_due",
    "start_run",
    "start_run_at",
    "step",
    "storable_text",
    "suspend",
    "wake",
    "workflow",
    "workflow_names",
]

# The modules whose names this one hands on, in the order their code runs.
HOMES: tuple[ModuleType, ...] = (errors, registry, steps, starts, _dispatch_module, executor)
# The names kept from the one module whose homes call them by another (private here, shared there).
RENAMED = {
    "_check_json": "check_json",
    "_count_down_to": "count_down_to",
    "_current": "current_context",
    "_dispatch": "dispatch",
}


class _Face(ModuleType):
    """This module's type: setting one of its names sets it, too, in every home module where that
    name stands for the same object (its home, and the modules there that imported it), so a
    patch reaches the code that calls it; setting it back (monkeypatch's undo) puts it back there."""

    def __setattr__(self, name: str, value: object) -> None:
        missing = object()
        current = self.__dict__.get(name, missing)
        if current is not missing:
            for home in HOMES:
                for there in {name, RENAMED.get(name, name)}:
                    if vars(home).get(there, missing) is current:
                        setattr(home, there, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Face
