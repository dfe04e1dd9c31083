"""The steps of a run being advanced: the run's context (which call of its body comes next, what
each recorded), a call matched on replay by its key (recorded_step), a step recorded under the
lease (record_step), run once and replayed after (run_step, @step), and a wait's suspension.

Every recording checks the lease under the run's row lock (lock_own_run); the advance that holds
the lease sets the context (executor.advance), and calls outside it run as plain calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from stackbone.plumbing import clock
from stackbone.runs import statements
from stackbone.runs.errors import (
    NOT_IN_A_RUN,
    NOT_IN_A_STEP,
    REPLAY_MISMATCH,
    LeaseLost,
    StepError,
    WorkflowError,
    check_json,
    is_interruption,
)
from stackbone.runs.json_values import storable_text
from stackbone.runs.models import Run, Step

# A worker renews the lease of the run it advances every HEARTBEAT_SECONDS (executor), so a step
# may take as long as it needs, and a worker that dies (SIGKILL, a lost machine) stalls the run it
# was advancing for at most LEASE before recovery dispatches it again (found by the chaos run: with
# a 5-minute lease and no heartbeat, every killed advance stranded its run for 5 minutes).
LEASE = timedelta(seconds=30)
ZERO = timedelta(0)


@dataclass
class RunContext:
    run_id: str
    owner: str
    recorded: dict[int, Step]
    seq: int = 0
    in_step: bool = False
    opened: list[int] = field(default_factory=list)
    workflow: str = ""  # the run's, as read when this advance began
    bounds: tuple[str, ...] = ()  # the limits it holds for its whole run (SPEC 11), as read then

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


current_context: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("stackbone_run", default=None)


def current_run() -> RunContext | None:
    return current_context.get()


def body_context(what: str) -> RunContext:
    """The run whose body is executing, or a clear error for a call outside a body or in a step."""
    ctx = current_context.get()
    if ctx is None:
        raise WorkflowError(NOT_IN_A_RUN.format(what=what))
    if ctx.in_step:
        raise WorkflowError(NOT_IN_A_STEP.format(what=what))
    return ctx


def lock_own_run(ctx: RunContext) -> None:
    """In a transaction: lock the run row, check that this worker still holds the lease and the
    run still runs, and renew the lease, in one UPDATE (its row lock lasts to the end of the
    transaction: a cancel or a takeover waits for it, and a recording sees neither half-done);
    otherwise stop advancing (it was cancelled or taken over)."""
    if not statements.renew_own_lease(ctx.run_id, ctx.owner, LEASE, clock.param()):
        raise LeaseLost(ctx.run_id)


def next_recorded_key() -> str | None:
    """The key the current run recorded for its next call (its name, for a row recorded without
    a key), None outside a run or when that call was not recorded yet: a caller that changed how
    it records something (several steps become one) replays a run recorded the older way the
    older way."""
    ctx = current_context.get()
    if ctx is None or ctx.in_step:
        return None
    step = ctx.recorded.get(ctx.seq + 1)
    return None if step is None else step.key or step.name


def recorded_step(ctx: RunContext, seq: int, key: str, *, keyless_name: str | None = None) -> Step | None:
    """The step call #`seq` recorded, None if none, after checking it was this same call:

    - a step recorded with a key (every step since migration 0010) matches by its key: the text
      users see (its name) may change and the run still replays;
    - a step recorded without one (before migration 0010, or by a worker of the older release
      during a rolling deploy) matches by the name that release gave the call: `keyless_name`,
      or the key itself where key and name are one (a @step, release_slot).

    Any other step there means the body no longer makes the calls it made: REPLAY_MISMATCH."""
    step = ctx.recorded.get(seq)
    if step is None:
        return None
    same_call = step.key == key if step.key else step.name == (keyless_name or key)
    if not same_call:
        raise WorkflowError(REPLAY_MISMATCH.format(seq=seq, recorded=step.key or step.name, now=key))
    return step


def record_step(
    ctx: RunContext,
    seq: int,
    name: str,
    *,
    status: str,
    key: str | None = None,
    kind: str = Step.Kind.STEP,
    ran_for: timedelta | None = None,
    **values: Any,
) -> Step:
    """Create or update the step at `seq` (call inside lock_own_run's transaction, which renewed
    the lease; the lease makes this worker the run's only writer, so ctx.recorded says whether
    the row exists). A new row is named `name` (what users see) and keyed `key` (what a replay
    compares: recorded_step; the name when None); an existing row keeps both. A step that is no
    longer waiting is finished now; one that ran `ran_for` (measured on this host's monotonic
    clock) started that long before, in the box's time."""
    values = {"kind": kind, "status": status, **values}
    step = ctx.recorded.get(seq)
    if step is None:
        values["key"] = name if key is None else key
        step = statements.insert_step(ctx.run_id, seq, name, values, now=clock.param(), ran_for=ran_for or ZERO)
    else:
        times = {}
        if status != Step.Status.WAITING:
            times["finished_at"] = clock.expression()
        if ran_for is not None:
            times["started_at"] = clock.expression(plus=-ran_for)
        Step.objects.filter(id=step.id).update(**values, **times)
        for key, value in values.items():
            setattr(step, key, value)
        if times:
            step.refresh_from_db(fields=list(times))
    ctx.recorded[seq] = step
    return step


def run_step(name: str, fn: Callable[[], Any], *, atomic: bool = False) -> Any:
    """Run `fn` as the next step of the current run, or return its recorded result.

    1. Outside a run, or inside another step, just call fn.
    2. A recorded completed step returns its result; a recorded failure raises StepError. Its
       name is its key (recorded_step): a @step's name is both what users see and what a
       replay compares.
    3. Otherwise call fn, then record the result (JSON) or the failure, under the lease.
       With atomic=True, fn runs inside the recording transaction, so its database effects and
       the record commit together (used by release_slot: exactly once); an interruption there
       (the connection went away) rolls both back and is not recorded: the replay runs it again.
       A recording that fails with an interruption raises it: the step is not recorded, and the
       replay runs it again (steps are at least once).
    """
    ctx = current_context.get()
    if ctx is None or ctx.in_step:
        return fn()
    seq = ctx.next_seq()
    step = recorded_step(ctx, seq, key=name)
    if step is not None and step.status == Step.Status.COMPLETED:
        return step.result
    if step is not None and step.status == Step.Status.FAILED:
        raise StepError(name, step.error)
    started = _now_and_monotonic()
    ctx.in_step = True
    try:
        with transaction.atomic() if atomic else contextlib.nullcontext():
            if atomic:
                lock_own_run(ctx)
            result = fn()
            check_json(result, f"the result of step {name!r}")
            if atomic:
                record_step(ctx, seq, name, status=Step.Status.COMPLETED, result=result, ran_for=_since(started))
    except Exception as error:
        if atomic and is_interruption(error):
            raise
        message = storable_text(f"{type(error).__name__}: {error}")
        with transaction.atomic():
            lock_own_run(ctx)
            record_step(ctx, seq, name, status=Step.Status.FAILED, error=message, ran_for=_since(started))
        raise StepError(name, message) from error
    finally:
        ctx.in_step = False
    if not atomic:
        with transaction.atomic():
            lock_own_run(ctx)
            record_step(ctx, seq, name, status=Step.Status.COMPLETED, result=result, ran_for=_since(started))
    return result


def _now_and_monotonic() -> tuple[datetime | None, float]:
    return clock.param(), time.monotonic()


def _since(started: tuple[datetime | None, float]) -> timedelta:
    """How long a step ran: on this host's monotonic clock, which a skewed wall clock does not
    touch; in process mode (SQLite, tests) on the process's clock, which time_machine moves."""
    wall, monotonic = started
    if wall is not None:
        return clock.now() - wall
    return timedelta(seconds=time.monotonic() - monotonic)


def step[F: Callable[..., Any]](fn: F | None = None, *, name: str | None = None) -> Any:
    """Make a function a durable step: inside a run it runs once, and replays return its recorded
    (JSON) result. Use as @step or @step(name=...)."""

    def decorate(fn: F) -> F:
        step_name = name or fn.__name__

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return run_step(step_name, lambda: fn(*args, **kwargs))

        return wrapper  # type: ignore[return-value]  # functools.wraps: the same signature as fn

    return decorate(fn) if fn is not None else decorate


def suspend(ctx: RunContext, *, waiting_for: str, deadline: Any) -> None:
    """Mark the run suspended on a hook (inside lock_own_run's transaction)."""
    Run.objects.filter(id=ctx.run_id).update(suspended=True, waiting_for=waiting_for, wait_deadline=deadline)
