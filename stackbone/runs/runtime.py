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
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import json
import logging
import pkgutil
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Coalesce

from stackbone.plumbing import clock
from stackbone.runs import statements
from stackbone.runs.endings import ENDED
from stackbone.runs.json_values import unstorable
from stackbone.runs.models import Run, Step
from stackbone.runs.signals import find_stuck_waits, run_ended, run_queued, run_starting

logger = logging.getLogger(__name__)

# A worker renews the lease of the run it advances every HEARTBEAT_SECONDS, so a step may take
# as long as it needs, and a worker that dies (SIGKILL, a lost machine) stalls the run it was
# advancing for at most LEASE before recovery dispatches it again (found by the chaos run: with a
# 5-minute lease and no heartbeat, every killed advance stranded its run for 5 minutes).
LEASE = timedelta(seconds=30)
ZERO = timedelta(0)
UNFINISHED = [Run.Status.QUEUED, Run.Status.PENDING, Run.Status.RUNNING]
WAITING_STATUSES = [Run.Status.RUNNING, Run.Status.QUEUED]  # suspended on a hook, or queued (SPEC 11)
HEARTBEAT_SECONDS = 10.0
STALE_DISPATCH = timedelta(seconds=30)
RECOVER_BATCH = 1_000
WAKE_BATCH = 1_000
DISPATCH_CHUNK = 50
DISPATCH_TASKS = 200

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

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class StepError(Exception):
    """A step raised: the body sees this, both the first time and on every replay."""

    def __init__(self, step: str, error: str) -> None:
        super().__init__(f"step {step!r} failed: {error}")
        self.step = step
        self.error = error


class Suspend(BaseException):  # noqa: N818 - control flow, not an error
    """Unwinds a workflow body that waits on a hook. A BaseException so that a body's
    `except Exception` cannot swallow it."""


class LeaseLost(BaseException):  # noqa: N818 - control flow, not an error
    """The run was cancelled or taken over while this worker advanced it: stop at once."""


# --- the registry --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workflow:
    name: str
    fn: Callable[[Any], Any]
    reference: str = ""  # the field of its input a run is found by (reference_of), "" for none

    def __call__(self, input: Any) -> Any:
        return self.fn(input)


_registry: dict[str, Workflow] = {}
_discovered = False

REFERENCE_MAX_LENGTH = 128  # a reference longer than this is not kept: a search reads at most 128 characters
BAD_REFERENCE = (
    "workflow {name!r}: reference must name a field of the input (a string of 1 to 200 characters), not {value!r}"
)


def check_reference(name: str, reference: object) -> str:
    """The field a workflow names as its reference, "" for None; anything else is a WorkflowError."""
    if reference is None:
        return ""
    if not isinstance(reference, str) or not 1 <= len(reference) <= 200 or unstorable(reference) is not None:
        raise WorkflowError(BAD_REFERENCE.format(name=name, value=reference))
    return reference


def reference_of(wf: Workflow, input: Any) -> str:
    """What a run of `wf` with `input` is found by (its reference field's value, as text), or "":

    - text is kept without its surrounding spaces, numbers as JSON writes them (42, 4.5);
    - no field, an empty text, true/false, null, an object or a list: none (they name no one run);
    - text longer than REFERENCE_MAX_LENGTH: none, as a search could not match it whole.

    The input is already checked (_check_json), so the text holds no NUL and no lone surrogate."""
    if not wf.reference or not isinstance(input, dict):
        return ""
    value = input.get(wf.reference)
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        text = json.dumps(value)
    else:
        return ""
    if len(text) > REFERENCE_MAX_LENGTH or unstorable(text) is not None:
        return ""
    return text


def workflow(fn: Callable[[Any], Any] | None = None, *, name: str | None = None, reference: str | None = None) -> Any:
    """Register a workflow function under its name (or `name`). Use as @workflow or
    @workflow(name=..., reference=...): `reference` names the field of the input each run is
    found by in a search (reference_of)."""

    def register(fn: Callable[[Any], Any]) -> Workflow:
        workflow_name = name or fn.__name__
        wf = Workflow(name=workflow_name, fn=fn, reference=check_reference(workflow_name, reference))
        existing = _registry.get(wf.name)
        if existing is not None and existing.fn.__qualname__ != fn.__qualname__:
            raise WorkflowError(f"two workflows are named {wf.name!r}: pass workflow(name=...) to tell them apart")
        _registry[wf.name] = wf
        return wf

    return register(fn) if fn is not None else register


def get_workflow(name: str) -> Workflow:
    discover()
    found = _registry.get(name)
    if found is None:
        found = _registered_by_its_module(name)
    if found is None:
        raise WorkflowError(UNKNOWN_WORKFLOW.format(name=name))
    return found


def _registered_by_its_module(name: str) -> Workflow | None:
    """A workflow named by its module path (`billing.tasks.send_invoice`: a django.tasks task,
    limits.django_tasks) registers when its module is imported, which a worker may not have done:
    import that module and look again. Only a module of the project's own packages (its installed
    apps' and its settings'), never whatever a run row or a start request names."""
    module, _, attribute = name.rpartition(".")
    if not module or not attribute or module.split(".")[0] not in _project_packages():
        return None
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and (module == error.name or module.startswith(f"{error.name}.")):
            return None  # no such module: an unknown workflow, not a broken one
        raise
    return _registry.get(name)


def _project_packages() -> set[str]:
    from django.apps import apps

    packages = {config.name.split(".")[0] for config in apps.get_app_configs()}
    settings_module = getattr(settings, "SETTINGS_MODULE", None)
    if settings_module:
        packages.add(settings_module.split(".")[0])
    return packages


def workflow_names() -> list[str]:
    """Every workflow this installation can start (the modules settings.STACKBONE_WORKFLOWS names,
    imported on first use), sorted."""
    discover()
    return sorted(_registry)


def discover() -> None:
    """Import the modules settings.STACKBONE_WORKFLOWS names (packages with their submodules)."""
    global _discovered
    if _discovered:
        return
    for module_name in getattr(settings, "STACKBONE_WORKFLOWS", []):
        module = importlib.import_module(module_name)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{module_name}."):
            importlib.import_module(info.name)
    _discovered = True


# --- the context of a run being advanced ---------------------------------------------------------


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


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("stackbone_run", default=None)


def current_run() -> RunContext | None:
    return _current.get()


def body_context(what: str) -> RunContext:
    """The run whose body is executing, or a clear error for a call outside a body or in a step."""
    ctx = _current.get()
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
    ctx = _current.get()
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
    ctx = _current.get()
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
            _check_json(result, f"the result of step {name!r}")
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


# --- starting, advancing, cancelling --------------------------------------------------------------


def start_run(
    wf: Workflow | str, input: Any = None, *, bounds: list[str] | None = None, concurrency_key: str = ""
) -> Run:
    """Create a run of a workflow (object or registered name) and dispatch it after commit.

    With `bounds` (the limits the whole run holds, SPEC 11: limits.runs.start_run works them
    out), the run is created queued and waiting, and `run_queued` tells the layer above in the
    same transaction: it queues the run, or wakes it at once when its bounds have room. A worker
    then starts it only once `run_starting` confirms (advance)."""
    name = wf.name if isinstance(wf, Workflow) else wf
    if not isinstance(name, str):
        raise WorkflowError("start_run takes a @workflow function or its registered name")
    registered = get_workflow(name)
    input = {} if input is None else input
    _check_json(input, "the input")
    reference = reference_of(registered, input)
    now = clock.expression()  # the database's time, read by each statement
    with transaction.atomic():
        if bounds:
            run = Run.objects.create(
                workflow=name,
                input=input,
                status=Run.Status.QUEUED,
                suspended=True,
                waiting_for=START_GATE,
                bounds=list(bounds),
                concurrency_key=concurrency_key,
                reference=reference,
                created_at=now,
                updated_at=now,
            )
            answers = [answer for _receiver, answer in run_queued.send(sender=Run, run=run)]
            if answers and all(answer == "start" for answer in answers):
                # Its bounds had room: the slots are its own already, so it starts like any run.
                Run.objects.filter(id=run.id).update(
                    status=Run.Status.PENDING, suspended=False, waiting_for="", dispatched_at=now
                )
                _dispatch_on_commit([run.id])
        else:
            run = Run.objects.create(
                workflow=name, input=input, reference=reference, created_at=now, updated_at=now, dispatched_at=now
            )
            _dispatch_on_commit([run.id])
    run.refresh_from_db()
    return run


START_GATE = "start"  # what a queued run waits on: its bounds (SPEC 11.3)


def prepared_input(wf: Workflow, input: Any, what: str = "the input") -> tuple[Any, str]:
    """A run's input as its row keeps it (None: {}; what JSON cannot keep is a WorkflowError
    naming `what`) and its reference (reference_of)."""
    input = {} if input is None else input
    _check_json(input, what)
    return json.loads(json.dumps(input)), reference_of(wf, input)


def loaded_run(**fields: Any) -> Run:
    """A Run holding `fields` as its row has them, without reading it back (a writer that knows
    every column it wrote: limits' start of a batch)."""
    run = Run(**fields)
    run._state.adding = False
    run._state.db = DEFAULT_DB_ALIAS
    return run


def dispatch_on_commit(run_ids: list[str]) -> None:
    """Publish these runs' advance tasks once the transaction commits (at once outside one)."""
    if run_ids:
        _dispatch_on_commit(run_ids)


def advanced_inline() -> bool:
    """Whether a dispatch runs the advance in this process before it returns (Celery's eager
    mode, as tests use it): a start then returns its runs as read after that advance."""
    from celery import current_app

    return bool(current_app.conf.task_always_eager)


def cancel_run(run_id: str) -> bool:
    """Cancel a pending or running run. Whoever holds something for it hears of it in the same
    transaction (run_ended: the limits engine takes it out of every queue and frees what ends with
    the run). Returns False for a run already finished or unknown."""
    now = clock.expression()
    with transaction.atomic():
        cancelled = Run.objects.filter(id=run_id, status__in=UNFINISHED).update(
            status=Run.Status.CANCELLED,
            finished_at=now,
            updated_at=now,
            suspended=False,
            lease_owner="",
            lease_until=None,
        )
        if not cancelled:
            return False
        Step.objects.filter(run_id=run_id, status=Step.Status.WAITING).update(
            status=Step.Status.FAILED, error="run cancelled", finished_at=now
        )
        run_ended.send(sender=Run, run_id=run_id, status=Run.Status.CANCELLED)
    return True


def advance(run_id: str) -> str:
    """Advance a run as far as it goes. Returns what happened: 'completed', 'failed',
    'suspended', 'cancelled' (stopped by a cancel), 'skipped' (not runnable, or another worker
    holds it), or 'ended' (a queued run ended unstarted at its start gate: skipped, SPEC 14).

    1. Take the lease with a compare-and-set (runnable, and no live lease). A queued run starts
       only if `run_starting` confirms its bounds (SPEC 11.3); otherwise it waits again
       ('queued') or fails before its first step.
    2. Call the workflow body with the recorded steps; it runs to the end, raises, or suspends.
    3. Record the outcome under the lease; a finished run leaves every queue (end_run).
    4. Release the lease; if a wake arrived meanwhile, dispatch again.
    """
    owner = uuid.uuid4().hex
    # One compare-and-set takes the lease and, for a pending run, starts it; a queued run starts
    # only through the gate below.
    taken = statements.take_lease(run_id, owner, LEASE, clock.param())
    if not taken:
        return "skipped"
    # A run no advance has recorded a step of (most runs, at their first advance) needs no second
    # query for its steps.
    run = Run.objects.annotate(has_steps=Exists(Step.objects.filter(run_id=OuterRef("pk")))).get(id=run_id)
    recorded = {s.seq: s for s in run.step_records.all()} if run.has_steps else {}
    ctx = RunContext(run_id=run_id, owner=owner, recorded=recorded, workflow=run.workflow, bounds=tuple(run.bounds))
    if run.status == Run.Status.QUEUED:
        verdict = _pass_the_start_gate(run, owner)
        if verdict == "wait":
            return "queued"
        if verdict == ENDED:  # the layer above ended it unstarted (skipped, SPEC 14): stackbone.runs.endings
            return ENDED
        if verdict != "start":
            return _finish(ctx, Run.Status.FAILED, error=verdict)
    token = _current.set(ctx)
    heartbeat = _Heartbeat(run_id, owner)
    try:
        wf = get_workflow(run.workflow)
        output = wf(run.input)
        _check_json(output, "the workflow's output")
    except Suspend:
        return _release_lease(ctx)
    except LeaseLost:
        return "cancelled"
    except INTERRUPTIONS:
        # The database went away under this advance (a restart, a failover): not the workflow's
        # fault, so the run does not fail. Give the lease back if the database answers again;
        # the task retries, and recovery picks the run up in any case (found by the chaos run).
        with contextlib.suppress(DatabaseError):
            Run.objects.filter(id=run_id, lease_owner=owner).update(lease_owner="", lease_until=None)
        raise
    except Exception as error:
        failure = storable_text("".join(traceback.format_exception_only(error)).strip())
        return _finish(ctx, Run.Status.FAILED, error=failure)
    finally:
        heartbeat.stop()
        _current.reset(token)
    return _finish(ctx, Run.Status.COMPLETED, output=output)


class _Heartbeat:
    """Renews a run's lease every HEARTBEAT_SECONDS from a thread (its own database connection)
    while this worker advances it; a compare-and-set on the owner, so a lease already lost stays
    lost. Most advances end long before the first beat and never touch the database here."""

    def __init__(self, run_id: str, owner: str) -> None:
        self.run_id, self.owner = run_id, owner
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"lease-{run_id}", daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        """A beat that cannot reach the database (its connection was killed, the server
        restarts) drops the connection and tries again at the next beat: the worker still
        advances the run, and its lease must not lapse under a step that is still running."""
        from django.db import connections

        try:
            while not self.stopping.wait(HEARTBEAT_SECONDS):
                try:
                    renewed = Run.objects.filter(id=self.run_id, lease_owner=self.owner).update(
                        lease_until=clock.expression(plus=LEASE)
                    )
                except DatabaseError as error:
                    logger.warning("could not renew the lease of %s (%s); trying again", self.run_id, error)
                    connections.close_all()
                    continue
                if not renewed:
                    return
        except Exception:
            logger.exception("could not renew the lease of %s", self.run_id)
        finally:
            connections.close_all()  # this thread's connections only

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()


def _finish(ctx: RunContext, status: str, *, output: Any = None, error: str = "") -> str:
    with transaction.atomic():
        if not statements.finish(ctx.run_id, ctx.owner, status, output, error, clock.param()):
            return "cancelled"
        run_ended.send(sender=Run, run_id=ctx.run_id, status=status)
    return str(status)


def _release_lease(ctx: RunContext) -> str:
    Run.objects.filter(id=ctx.run_id, lease_owner=ctx.owner).update(lease_owner="", lease_until=None)
    if Run.objects.filter(id=ctx.run_id, status=Run.Status.RUNNING, suspended=False).exists():
        # A wake arrived while this worker still held the lease: its task may have found the
        # lease taken and given up, so go again.
        _dispatch([ctx.run_id])
    return "suspended"


def _pass_the_start_gate(run: Run, owner: str) -> str:
    """Ask the layer above whether a queued run may start now (run_starting), under the run's row
    lock: 'start' (the run turns running in this transaction), 'wait' (it goes back to waiting and
    the lease is given back), or the error the run fails with."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(id=run.id, lease_owner=owner, status=Run.Status.QUEUED).first()
        if locked is None:
            return "wait"  # cancelled meanwhile: nothing to start
        # A queued run without bounds (one deferred to its start time, start_run_at) has nothing to confirm.
        answers = [answer for _receiver, answer in run_starting.send(sender=Run, run=locked)] if locked.bounds else []
        if ENDED in answers:
            return ENDED
        failure = next((answer for answer in answers if answer not in ("start", "wait")), None)
        if failure is not None:
            return str(failure)
        if "wait" in answers:
            Run.objects.filter(id=run.id).update(
                suspended=True, waiting_for=START_GATE, lease_owner="", lease_until=None, updated_at=clock.expression()
            )
            return "wait"
        Run.objects.filter(id=run.id).update(
            status=Run.Status.RUNNING, started_at=Coalesce(F("started_at"), clock.expression())
        )
        return "start"


def suspend(ctx: RunContext, *, waiting_for: str, deadline: Any) -> None:
    """Mark the run suspended on a hook (inside lock_own_run's transaction)."""
    Run.objects.filter(id=ctx.run_id).update(suspended=True, waiting_for=waiting_for, wait_deadline=deadline)


def wake(run_ids: list[str]) -> int:
    """Make suspended runs runnable, WAKE_BATCH runs per UPDATE, and dispatch them after commit.
    Idempotent: a run that is not suspended any more is left alone (its dispatch, if any, finds
    nothing to do). One batch is one statement (a hand-off's wake: no BEGIN and COMMIT of its
    own); several are one transaction, so a sweep's wake of 100,000 runs waits for one commit, not
    100 (issue 44). A crash before the commit leaves them suspended, and recover() wakes those a
    layer above says are due (find_stuck_waits); one after it and before the dispatch leaves
    runnable runs that recover() sends."""
    now = clock.param()
    woken = 0
    with transaction.atomic() if len(run_ids) > WAKE_BATCH else contextlib.nullcontext():
        for start in range(0, len(run_ids), WAKE_BATCH):
            woken += statements.wake(run_ids[start : start + WAKE_BATCH], now)
        if woken:
            _dispatch_on_commit(run_ids)
    return woken


def recover() -> int:
    """Pick up runs that should be moving but have no task in flight (a worker died, a wake or a
    task was lost): at worker start and by the 15-second sweep. A lost wake delays a run by at
    most one pass.

    1. Runnable runs (pending, or running and not suspended) with no live lease whose last
       dispatch is older than 30 s: dispatch again.
    2. Suspended runs whose wait is over but were not woken: their deadline passed more than
       30 s ago (the sweep has timed the wait out), or a layer above says so (find_stuck_waits:
       the limits engine reserved a slot for them), or a deferred run's time has come
       (start_run_at; its countdown message was lost, or never sent): wake them.

    Every "due" here is in the database's time (stackbone.plumbing.clock), read once.
    """
    now = clock.now()
    stale = now - STALE_DISPATCH
    ids = list(
        Run.objects.filter(status__in=UNFINISHED, suspended=False, dispatched_at__lt=stale)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .order_by("dispatched_at")
        .values_list("id", flat=True)[:RECOVER_BATCH]
    )
    if ids:
        Run.objects.filter(id__in=ids).update(dispatched_at=now)
        _dispatch(ids)
    over = Q(wait_deadline__lt=stale) | Q(waiting_for=DEFERRED, wait_deadline__lte=now)  # start_run_at: due now
    for _receiver, run_ids in find_stuck_waits.send(sender=Run, now=now):
        over |= Q(id__in=run_ids)
    stuck = list(
        Run.objects.filter(status__in=WAITING_STATUSES, suspended=True)
        .filter(over)
        .values_list("id", flat=True)[:RECOVER_BATCH]
    )
    woken = wake(stuck) if stuck else 0
    return len(ids) + woken


# --- deferred starts (django.tasks' run_after, SPEC 15.4) ------------------------------------------

DEFERRED = "run_after"  # what a deferred run waits on: its start time, kept as its wait_deadline
START_DEFERRED = "studio.tasks.start_deferred_run"
COUNTDOWN_WITHIN = timedelta(minutes=10)  # nearer starts get a countdown message; later ones wait for recovery


def start_run_at(
    wf: Workflow | str,
    input: Any = None,
    *,
    not_before: datetime,
    bounds: list[str] | None = None,
    concurrency_key: str = "",
) -> Run:
    """Create a run that starts at `not_before`, never earlier, and durably: a row, not a message.

    1. The run is created queued and suspended on DEFERRED, its wait_deadline the start time: no
       advance takes a suspended run, so nothing can run it early.
    2. After commit, a start due within COUNTDOWN_WITHIN gets a countdown message
       (start_deferred_run), which wakes the run once the database's clock has reached its time.
    3. recover() (every 15 s, and at every worker's start) wakes any deferred run whose time has
       passed, so a lost message, a broker or worker restart, or a start days away is started
       within one pass.
    4. Woken, it passes the start gate as a queued run does: with `bounds` it takes its place in
       their queues then (run_starting, in the order such runs arrive), or starts if they have
       room; without, it starts.
    """
    name = wf.name if isinstance(wf, Workflow) else wf
    if not isinstance(name, str):
        raise WorkflowError("start_run_at takes a @workflow function or its registered name")
    registered = get_workflow(name)
    input = {} if input is None else input
    _check_json(input, "the input")
    now = clock.expression()
    with transaction.atomic():
        run = Run.objects.create(
            workflow=name,
            input=input,
            status=Run.Status.QUEUED,
            suspended=True,
            waiting_for=DEFERRED,
            wait_deadline=not_before,
            bounds=list(bounds or []),
            concurrency_key=concurrency_key,
            reference=reference_of(registered, input),
            created_at=now,
            updated_at=now,
        )
        transaction.on_commit(lambda: _count_down_to(run.id, not_before))
    run.refresh_from_db()
    return run


def start_if_due(run_id: str) -> bool:
    """The countdown message of a deferred run: wake it if its time has come on the database's
    clock. One that arrives early (the sending host's clock ahead of the database's) counts down
    again for the rest. False for a run already started, cancelled or gone."""
    due = (
        Run.objects.filter(id=run_id, status=Run.Status.QUEUED, suspended=True, waiting_for=DEFERRED)
        .values_list("wait_deadline", flat=True)
        .first()
    )
    if due is None:
        return False
    if due > clock.now():
        _count_down_to(run_id, due)
        return False
    return wake([run_id]) == 1


def _count_down_to(run_id: str, moment: datetime) -> None:
    """Send start_deferred_run for `moment` (counted on the database's clock) if it is within
    COUNTDOWN_WITHIN. Never raises: recovery starts the run if no message does. In Celery's eager
    mode (no worker; a countdown would run at once, and again) only a start already due is sent."""
    from celery import current_app

    left = moment - clock.now()
    if left > COUNTDOWN_WITHIN or (left > ZERO and current_app.conf.task_always_eager):
        return
    try:
        _task(START_DEFERRED).apply_async((run_id,), countdown=max(left.total_seconds(), 0.0))
    except Exception as error:
        logger.warning(
            "could not send the start of %s (%s: %s); recovery starts it", run_id, type(error).__name__, error
        )


def _dispatch_on_commit(run_ids: list[str]) -> None:
    transaction.on_commit(lambda: _dispatch(run_ids))


def _dispatch(run_ids: list[str]) -> None:
    """One task per run; a mass wake (a sweep granting thousands) goes out in chunks of at least
    DISPATCH_CHUNK runs per task and at most DISPATCH_TASKS tasks (100,000 runs: 200 messages of
    500), so publishing does not dominate the wake, and a pool of up to DISPATCH_TASKS workers
    still shares it.

    Never raises: it runs after the commit of the change that woke the runs (a release, a
    grant), and a broker that is down must not turn that committed change into an error for
    the caller (found by the chaos run: a release_slot step whose wake could not be published
    while Redis restarted was recorded as failed, and its run failed, although the release had
    committed). The runs stay dispatched-but-unsent; recover() sends them again after
    STALE_DISPATCH."""
    advance_run, advance_runs = _task(ADVANCE_RUN), _task(ADVANCE_RUNS)
    try:
        if len(run_ids) <= DISPATCH_CHUNK:
            for run_id in run_ids:
                advance_run.delay(run_id)
            return
        chunk = max(DISPATCH_CHUNK, -(-len(run_ids) // DISPATCH_TASKS))
        for start in range(0, len(run_ids), chunk):
            advance_runs.delay(run_ids[start : start + chunk])
    except Exception as error:
        logger.warning(
            "could not dispatch %d run(s) (%s: %s); recovery sends them again",
            len(run_ids),
            type(error).__name__,
            error,
        )


ADVANCE_RUN = "studio.tasks.advance_run"
ADVANCE_RUNS = "studio.tasks.advance_runs"


def _task(name: str) -> Any:
    """A task of stackbone.runs.tasks by its name, from the Celery app's registry (the tasks module
    imports this one; this one finds the tasks without importing it back)."""
    from celery import current_app

    return current_app.tasks[name]


def storable_text(text: str) -> str:
    """`text` as every database stores it: NUL and lone surrogates (which an exception's message
    may carry) written as escapes, so recording a step's failure never fails itself."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _check_json(value: Any, what: str) -> None:
    from stackbone.runs.json_values import unstorable  # what every database stores (NaN, NUL: no)

    reason = unstorable(value)
    if reason is not None:
        raise WorkflowError(NOT_JSON.format(what=what, error=reason))
