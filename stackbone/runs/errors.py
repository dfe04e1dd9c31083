"""What the run layer raises: a workflow used wrongly (WorkflowError), a failed step as its body
sees it (StepError), the two control-flow unwinds of an advance (Suspend, LeaseLost), and the
database errors that interrupt an advance without ending its run (INTERRUPTIONS).

Each class keeps `stackbone.runs.runtime` as its module: a run that fails on one records its path
(`stackbone.runs.runtime.WorkflowError: ...`, docs/embedding.md), and django.tasks imports a
failure's class back by that path (limits.django_tasks).
"""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError

from stackbone.runs.json_values import unstorable

RECORDED_AS = "stackbone.runs.runtime"  # the module a run's error names (the path before the split)

NOT_IN_A_RUN = "{what} must be called in a workflow body (inside a run started with start_run)"
NOT_IN_A_STEP = "{what} cannot be called inside a step: waiting needs the durable workflow body"
UNKNOWN_WORKFLOW = "unknown workflow {name!r}"
NOT_JSON = "{what} must be JSON-serializable: {error}"
REPLAY_MISMATCH = "the workflow is not deterministic: call #{seq} was {recorded!r} before and is {now!r} on replay"


# Errors that interrupt an advance without ending the work: the database went away (a restart, a
# failover, a killed connection). The advance gives its lease back and the task retries; the
# replay runs again whatever was not recorded. Whatever guards work (with_limit) must keep
# guarding it through one of these: it is not the end of the work.
INTERRUPTIONS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)


def is_interruption(error: BaseException) -> bool:
    """True when `error` stops this advance but not the run: the run is replayed later."""
    return isinstance(error, INTERRUPTIONS)


class WorkflowError(Exception):
    """A workflow was used wrongly (unknown name, a wait inside a step, a bad input). `field`, when
    set, names what was wrong as the caller passed it (`inputs[2]`, `concurrency_keys[0]`)."""

    __module__ = RECORDED_AS

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class StepError(Exception):
    """A step raised: the body sees this, both the first time and on every replay."""

    __module__ = RECORDED_AS

    def __init__(self, step: str, error: str) -> None:
        super().__init__(f"step {step!r} failed: {error}")
        self.step = step
        self.error = error


class Suspend(BaseException):  # noqa: N818 - control flow, not an error
    """Unwinds a workflow body that waits on a hook. A BaseException so that a body's
    `except Exception` cannot swallow it."""

    __module__ = RECORDED_AS


class LeaseLost(BaseException):  # noqa: N818 - control flow, not an error
    """The run was cancelled or taken over while this worker advanced it: stop at once."""

    __module__ = RECORDED_AS


def check_json(value: Any, what: str) -> None:
    """A WorkflowError naming `what` unless `value` is JSON every database keeps (json_values)."""
    reason = unstorable(value)
    if reason is not None:
        raise WorkflowError(NOT_JSON.format(what=what, error=reason))
