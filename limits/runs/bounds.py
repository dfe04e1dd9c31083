"""Concurrency of whole workflows (SPEC 11): a run that holds slots from before its first step to
its end, granted by the rules of several limits in one acquisition (SPEC 10).

    @workflow(concurrency={"total": 4, "per_key": 1}, limits=["partner-api"])
    def sync_account(input): ...

    start_run(sync_account, {...}, concurrency_key="acme")          # waits 'queued' if need be

- The workflow's own bound is the limit `workflow.<workflow name>` (kind 'workflow'), synced from
  the decorator at every migrate (`sync`): its capacity is `total` (100000 when only per_key is
  given), its per_key `per_key`, and it has no max hold. Operators override and reset its total
  and per-key like any limit's.
- A run's bounds: its workflow's own bound (when the workflow declares `concurrency`) and the
  named limits (the decorator's, or those `start_run(limits=...)` gives: `[]` keeps only the own
  bound). At most two named limits; with the own bound, at most three limits: one group.
- The run is created `queued` and takes its place in every queue at once (`queued`, in the
  transaction that creates it); when every bound has room it takes the slots at once and starts
  as any run does. When a queued run's group is granted, the run is woken; the worker that
  starts it confirms the reservations (`starting`). The slots are tied to the run, so ending the
  run frees them (services.end_run) and the next run starts. A start that does not happen within
  2 minutes lapses and the run goes back to the end of every queue (SPEC 3.6, 10.2).
- A named limit's max hold still applies to the slot the run holds of it (SPEC 11.4).
- The box's run concurrency (SPEC 12, when the workspace declares run_concurrency): every run
  also holds a slot of the box bound `box` while it executes, from its workflow's pool (per_key
  = the base, so no workflow executes more than the base; capacity = the burst ceiling). It is
  one more limit of the start acquisition, so a run waits `queued` in trigger order for its
  bounds and a box slot together. A run that waits for a limit's slot in its body gives its box
  slot back and waits for both together (limits.workflow, limits.box.box_place). And no limit serves more
  than the base of whole runs at once (12.3): a workflow's own total, or a named limit's
  capacity, above the base acts as the base for the slots runs hold for their whole run
  (limits.engine.keys.whole_run_room).

Must never happen (limits verify checks it from the rows, as for any group): a run holds some of
its bounds and not the others; a bound holds more runs than its total or a key more than its
per_key; a run takes a step before its bounds are confirmed for it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import F, Subquery

from limits import services
from limits.box import QUEUE_TIMEOUT_MS, box_pool
from limits.box import box_place as box_place
from limits.config import (
    BOUND_PREFIX,
    BOX_NAME,
    CANCEL_RUNNING,
    MAX_CAPACITY,
    MIN_CAPACITY,
    NAME_RE,
    check_key,
    check_max_waiting,
    check_name,
    strictest_on_full,
)
from limits.config import KEY_MAX_LENGTH as KEY_MAX_LENGTH
from limits.durations import MAX_DURATION_MS as MAX_DURATION_MS
from limits.engine import server
from limits.engine.keys import OWED_AFTER_MS, pools
from limits.models import LABEL_MAX_LENGTH, Limit, LimitKey, QueueEntry, Slot
from stackbone.runs import runtime
from stackbone.runs.endings import ENDED, end_unstarted
from stackbone.runs.models import Run, new_run_id

# Names limits.run_bounds had before issue 48 moved the box's place to limits.box (box_place,
# _box_place) and those it imported (KEY_MAX_LENGTH, MAX_DURATION_MS): the old path is this module,
# so they stay for one release (tests/test_layers.py holds every name the old paths had).
_box_place = box_pool

MAX_NAMED_LIMITS = 2
BOX_NAMED = (
    "'box' is the box's run concurrency, not a named limit: every run holds it while the workspace "
    "declares run_concurrency"
)
CONCURRENCY_FIELDS = frozenset({"total", "per_key", "on_full", "max_waiting", "max_waiting_per_key"})
# SPEC 14.1: what a start does when its workflow's own bound is full: all four are built for a
# start; 'cancel_running' (14.4) needs the workflow's own bound (NO_OWN_BOUND).
BOUND_ON_FULL = ("wait", "skip", "replace", CANCEL_RUNNING)
START_ON_FULL = BOUND_ON_FULL  # built for a run's start
NO_OWN_BOUND = (
    "'cancel_running' needs the workflow's own bound (SPEC 14.4): declare @workflow(concurrency={{'total' or "
    "'per_key': ...}}); {workflow!r} has none"
)
# SPEC 14.4: a canceller's entry in its bound's queue waits in the front band, at its ticket less
# this (engine.sql: limits_cancel_running), ahead of every entry at its ticket.
FRONT_BAND = 1 << 62
START_REQUEST_SUFFIX = services.WHOLE_RUN_SUFFIX  # the acquisition of a run's bounds: "<run id>:start"


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one workflow declared."""

    total: int | None
    per_key: int | None
    limits: tuple[str, ...]
    module: str = ""  # where the workflow is defined
    # SPEC 14.1: its own bound's on_full and queue caps (synced to the bound's Limit), and what its
    # starts ask for by default (a django.tasks task's on_full; None: the bounds' own).
    on_full: str = "wait"
    max_waiting: int | None = None
    max_waiting_per_key: int | None = None
    start_on_full: str | None = None

    @property
    def declared(self) -> tuple[int | None, int | None, str, int | None, int | None]:
        """What its own bound declares, as sync_workflow_bounds takes it."""
        return (self.total, self.per_key, self.on_full, self.max_waiting, self.max_waiting_per_key)

    @property
    def has_own_bound(self) -> bool:
        return self.total is not None or self.per_key is not None


_declared: dict[str, Bounds] = {}


def bound_name(workflow_name: str) -> str:
    return f"{BOUND_PREFIX}{workflow_name}"


def declare(
    workflow_name: str, concurrency: object, limits: object, module: str = "", start_on_full: object = None
) -> None:
    """Check a @workflow's concurrency and limits (at import) and remember them for sync and
    start. Raises WorkflowError naming the workflow and the field. `start_on_full`: what its starts
    ask for when start_run names none (a django.tasks task's on_full)."""
    total = per_key = max_waiting = max_waiting_per_key = None
    on_full = "wait"
    if concurrency is not None:
        if not isinstance(concurrency, Mapping) or not concurrency:
            raise _error(workflow_name, "concurrency must be a dict with 'total', 'per_key' or both")
        unknown = sorted(set(concurrency) - CONCURRENCY_FIELDS, key=str)
        if unknown:
            raise _error(
                workflow_name,
                f"concurrency: unknown field {unknown[0]!r} "
                "(allowed: total, per_key, on_full, max_waiting, max_waiting_per_key)",
            )
        if concurrency.get("total") is None and concurrency.get("per_key") is None:
            raise _error(workflow_name, "concurrency must give 'total', 'per_key' or both")
        total = _whole(workflow_name, "total", concurrency.get("total"), MAX_CAPACITY)
        per_key = _whole(workflow_name, "per_key", concurrency.get("per_key"), total or MAX_CAPACITY)
        on_full = check_start_on_full(
            workflow_name, concurrency.get("on_full", "wait"), "concurrency on_full", own_bound=True
        )
        max_waiting = _cap(workflow_name, "max_waiting", concurrency.get("max_waiting"))
        max_waiting_per_key = _cap(workflow_name, "max_waiting_per_key", concurrency.get("max_waiting_per_key"))
        name = bound_name(workflow_name)
        if NAME_RE.fullmatch(name) is None:
            raise _error(
                workflow_name,
                f"its own bound would be named {name!r}, which is not a valid limit name: "
                "give the workflow a name of lowercase letters, digits, '.', '_' and '-'",
            )
    named = _named_limits(workflow_name, limits)
    own_bound = total is not None or per_key is not None
    start = (
        None
        if start_on_full is None
        else check_start_on_full(workflow_name, start_on_full, "on_full", own_bound=own_bound)
    )
    _declared[workflow_name] = Bounds(
        total, per_key, named, module, on_full, max_waiting, max_waiting_per_key, start_on_full=start
    )


def declared_bounds(
    workflows: list[str] | None = None,
) -> dict[str, tuple[int | None, int | None, str, int | None, int | None]]:
    """{bound name: (total, per_key, on_full, max_waiting, max_waiting_per_key)} of the box's
    workflows that cap their runs: those of the modules settings.STACKBONE_WORKFLOWS names (what
    the box discovers), or those named."""
    runtime.discover()
    packages = tuple(settings.STACKBONE_WORKFLOWS)
    return {
        bound_name(name): bounds.declared
        for name, bounds in _declared.items()
        if bounds.has_own_bound
        and (name in workflows if workflows is not None else _in_packages(bounds.module, packages))
    }


def sync(workflows: list[str] | None = None) -> services.SyncReport:
    """Bring the workflows' own bounds to the database (at every migrate, with the workspace);
    `workflows` names the ones to sync instead (tests)."""
    return services.sync_workflow_bounds(declared_bounds(workflows))


def _in_packages(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in packages)


def bounds_for_run(workflow_name: str, limits: object = None, concurrency_key: object = None) -> tuple[list[str], str]:
    """The limits a run of this workflow holds (its own bound first, then the named limits: the
    decorator's, or `limits` given at start; then the box while it is declared), and its key (''
    for none). Checked at start: an unknown or undeclared limit, more than two named limits, or a
    bad key is a WorkflowError. The Python rules' start (SQLite); PostgreSQL's is start_on_server."""
    bounds, declared = start_bounds(workflow_name, limits)
    named = bounds[1:] if declared.has_own_bound else bounds
    if named:
        found = dict(Limit.objects.filter(name__in=named).values_list("name", "declared"))
        for name in named:
            if name not in found:
                raise _error(workflow_name, f"unknown limit {name!r}")
            if not found[name]:
                raise _error(workflow_name, f"limit {name!r} is no longer declared in the workspace")
    key = run_key(workflow_name, concurrency_key)
    if declared.has_own_bound:
        services.ensure_workflow_bound(bounds[0], *declared.declared)  # SPEC 11.6
    box = [BOX_NAME] if Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).exists() else []
    return bounds + box, key


def start_bounds(workflow_name: str, limits: object = None) -> tuple[list[str], Bounds]:
    """The bounds a run of this workflow holds, without the box: its own bound first, then the
    named limits (the decorator's, or `limits` given at start), their form checked here; whether
    they exist is the start's to find (limits_start_runs, or bounds_for_run)."""
    bounds = _declared.get(workflow_name, Bounds(None, None, ()))
    named = bounds.limits if limits is None else _named_limits(workflow_name, limits)
    own = [bound_name(workflow_name)] if bounds.has_own_bound else []
    return own + list(named), bounds


def run_key(workflow_name: str, concurrency_key: object, field: str = "concurrency_key") -> str:
    """A run's concurrency key as checked at start ('' for None); a bad one is a WorkflowError
    naming `field`."""
    if concurrency_key is None:
        return ""
    try:
        return check_key(concurrency_key)
    except ValueError as error:
        raise _error(workflow_name, f"{field}: {error}") from None


def start_on_server(
    wf: runtime.Workflow,
    prepared: Sequence[tuple[Any, str]],
    keys: Sequence[str],
    limits: object,
    on_full: str | None = None,
) -> list[Run] | None:
    """limits.runs.start_runs on PostgreSQL: the runs written and their bounds acquired in one
    call (limits_start_runs; SPEC 11.2, 11.3, 11.6, 12.2), the runs it started published and the
    runs it woke woken after commit. A missing own bound (11.6) is synced and the call made
    again; an unknown or undeclared named limit is the WorkflowError bounds_for_run words. None:
    the case is the Python rules' (nothing was written). `on_full`: the start's (SPEC 14.1), None
    for its bounds' own; a run answered at once comes back 'skipped' (SPEC 14.2, 14.5), a run of
    the batch a later one of it replaced 'replaced' (14.3: its cause read back, one query)."""
    bounds, declared = start_bounds(wf.name, limits)
    ids = [new_run_id() for _ in prepared]
    label = wf.name[:LABEL_MAX_LENGTH]
    for attempt in (1, 2):
        try:
            answer = server.start_runs(
                ids,
                wf.name,
                [input for input, _ in prepared],
                [reference for _, reference in prepared],
                list(keys),
                bounds,
                label,
                QUEUE_TIMEOUT_MS,
                OWED_AFTER_MS,
                on_full,
            )
            problem, bad_name, statuses, held, created, woken = answer[:6]
        except DatabaseError as error:
            if getattr(error.__cause__, "sqlstate", None) == "LMSTR":  # a limit undeclared mid-batch
                raise _error(wf.name, f"the batch was refused, nothing started: {error.__cause__}") from None
            raise
        if problem is None:
            break
        own = bounds[0] if declared.has_own_bound else None
        if problem in ("unknown", "undeclared") and own is not None and bad_name == own and attempt == 1:
            services.ensure_workflow_bound(own, *declared.declared)
            continue
        if problem == "unknown":
            raise _error(wf.name, f"unknown limit {bad_name!r}")
        if problem == "undeclared":
            raise _error(wf.name, f"limit {bad_name!r} is no longer declared in the workspace")
        return None
    else:  # pragma: no cover - the bound was just synced
        return None
    server.wake_on_commit(woken)
    replaced = [run_id for run_id, status in zip(ids, statuses, strict=True) if status == Run.Status.REPLACED]
    causes = dict(Run.objects.filter(id__in=replaced).values_list("id", "caused_by")) if replaced else {}
    runs = [
        runtime.loaded_run(
            id=run_id,
            workflow=wf.name,
            input=input,
            status=status,
            output=None,
            error="",
            suspended=status == Run.Status.QUEUED,
            waiting_for=runtime.START_GATE if status == Run.Status.QUEUED else "",
            wait_deadline=None,
            bounds=held,
            concurrency_key=key,
            reference=reference,
            lease_owner="",
            lease_until=None,
            dispatched_at=created if status == Run.Status.PENDING else None,
            created_at=created,
            started_at=None,
            finished_at=created if status in (Run.Status.SKIPPED, Run.Status.REPLACED) else None,
            updated_at=created,
            end_reason=reason or None,
            end_limit=full_name or None,
            caused_by=causes.get(run_id),
        )
        for run_id, (input, reference), key, status, reason, full_name in zip(
            ids, prepared, keys, statuses, answer.reasons, answer.full_names, strict=True
        )
    ]
    runtime.dispatch_on_commit([run.id for run in runs if run.status == Run.Status.PENDING])
    if runtime.advanced_inline():
        for run in runs:
            run.refresh_from_db()
    return runs


# --- the run layer's signals (limits/apps.py connects them) ---------------------------------------


# The on_full of the start being made in this context (limits.runs.start_run's `on_full`), which the
# run layer's run_queued does not carry: None for the bounds' own (SPEC 14.1).
_start_on_full: contextvars.ContextVar[str | None] = contextvars.ContextVar("start_on_full", default=None)


@contextlib.contextmanager
def starting_with(on_full: str | None) -> Iterator[None]:
    """The starts made inside ask for `on_full` (the Python rules' start_run, run by run)."""
    token = _start_on_full.set(on_full)
    try:
        yield
    finally:
        _start_on_full.reset(token)


def queued(sender: object, run: Run, **kwargs: object) -> str:
    """A run with bounds was created queued: take its place in every queue and answer 'wait', or,
    if every bound had room, hold the slots for the run and answer 'start'; or, answered at once
    (SPEC 14.2, 14.5: its start's on_full 'skip', else its bounds' own, or a queue at its cap), end
    it 'skipped' with its reason and answer 'ended' (nothing of it is in any queue)."""
    outcome = _acquire(run, _start_on_full.get())
    if outcome.state == "busy":
        _tie(run, outcome)
        return "start"
    if outcome.state in ("skipped", "refused"):
        end_unstarted(run.id, Run.Status.SKIPPED, reason=outcome.reason, limit=outcome.limit)
        return ENDED
    if outcome.state != "waiting":
        raise runtime.WorkflowError(f"run {run.id} could not queue for {' + '.join(run.bounds)}")
    cancel_running(run, _start_on_full.get())
    return "wait"


def starting(sender: object, run: Run, **kwargs: object) -> str:
    """A worker is about to start a woken queued run: confirm its reserved slots together (the
    same request), tie them to the run, and say 'start'; 'wait' if they lapsed meanwhile (it is
    back in the queues); an error message if its wait ended (timed out, cancelled). A run deferred
    to its start time (runtime.start_run_at) asks for its place only now: answered at once (SPEC
    14.2, 14.5, with its workflow's start on_full) it ends 'skipped' here ('ended'). A run whose
    start a newer one replaced (SPEC 14.3) and that is still queued (the replacing call found its
    row held, by this worker) ends 'replaced' here ('ended')."""
    outcome = _acquire(run, _declared.get(run.workflow, Bounds(None, None, ())).start_on_full)
    if outcome.state in ("skipped", "refused"):
        end_unstarted(run.id, Run.Status.SKIPPED, reason=outcome.reason, limit=outcome.limit)
        return ENDED
    if outcome.state == "busy":
        _tie(run, outcome)
        return "start"
    if outcome.state == "waiting":
        return "wait"
    if outcome.state == "timed_out":
        return f"no slot of {' + '.join(run.bounds)} within {QUEUE_TIMEOUT_MS} ms: the run never started"
    if outcome.state == "replaced":  # SPEC 14.3: the engine could not end it then (this worker held its row)
        reason, limit = _replaced_cause(outcome)
        end_unstarted(run.id, Run.Status.REPLACED, reason=reason, limit=limit, caused_by=outcome.replaced_by_run)
        return ENDED
    return f"the wait for {' + '.join(run.bounds)} was cancelled"


def _replaced_cause(outcome: services.Acquisition) -> tuple[str, str]:
    """The reason and limit of a run whose start was replaced and which the replacing call could not
    end (full.end_replaced_starts): those the runs it ended with it were given, else its first
    limit, 'limit_full'."""
    sibling = (
        Run.objects.filter(caused_by=outcome.replaced_by_run, status=Run.Status.REPLACED)
        .exclude(end_reason="")
        .values_list("end_reason", "end_limit")
        .first()
    )
    if sibling is not None and sibling[0] and sibling[1]:
        return sibling[0], sibling[1]
    return "limit_full", outcome.limit


def _acquire(run: Run, on_full: str | None = None) -> services.Acquisition:
    """The start's acquisition; a start's 'cancel_running' waits there (its cancel is cancel_running's)."""
    box = box_pool(run.workflow) if BOX_NAME in run.bounds else None
    if on_full == CANCEL_RUNNING:
        on_full = "wait"
    return services.acquire_group(
        [name for name in run.bounds if name != BOX_NAME],
        run_id=run.id,
        request=f"{run.id}{START_REQUEST_SUFFIX}",
        label=run.workflow[:200],
        key=run.concurrency_key or None,
        timeout=QUEUE_TIMEOUT_MS,
        box=box,
        on_full=on_full,
    )


def cancel_running(run: Run, on_full: str | None) -> str | None:
    """SPEC 14.4, the Python rules' limits_cancel_running (engine.sql, which says the rule): a
    queued run under its workflow's own bound (run.bounds[0]), on_full 'cancel_running' in force
    (`on_full`, the start's, else the strictest of its bounds'), whose key's pool of the bound is
    full, cancels the pool's oldest holder not already being cancelled (cancel_run's path, its cause
    recorded) and moves its own entry in the bound's queue to the front band. The run cancelled,
    or None."""
    limits = {limit.name: limit for limit in Limit.objects.filter(name__in=run.bounds)}
    own = limits.get(run.bounds[0]) if run.bounds else None
    if own is None or own.kind != Limit.Kind.WORKFLOW:
        return None
    if (on_full or strictest_on_full(limit.on_full for limit in limits.values())) != CANCEL_RUNNING:
        return None
    key = run.concurrency_key
    keyed = own.per_key is not None
    if (keyed and pools(own).has_room(key)) or (not keyed and own.room):
        return None  # the bound's pool has room: something else stops it
    holders = Slot.objects.filter(limit=own, state=Slot.State.BUSY, ends_with_run=True).exclude(run_id=run.id)
    if keyed:
        holders = holders.filter(key=key)
    live = Run.objects.filter(status__in=[Run.Status.PENDING, Run.Status.RUNNING]).values("id")
    victim = holders.filter(run_id__in=live).order_by("granted_at", "id").values_list("run_id", flat=True).first()
    if victim is None:
        return None  # every holder is being cancelled already: it waits at its ticket
    request = f"{run.id}{START_REQUEST_SUFFIX}"
    QueueEntry.objects.filter(limit=own, request=request, state=QueueEntry.State.WAITING).update(
        position=F("position") - FRONT_BAND
    )
    if key:
        head = QueueEntry.objects.filter(limit=own, key=key, state=QueueEntry.State.WAITING).order_by("position")
        LimitKey.objects.filter(limit=own, key=key).update(head=Subquery(head.values("position")[:1]))
    Limit.objects.filter(id=own.id).update(cancelled_count=F("cancelled_count") + 1)
    runtime.cancel_run(victim, reason=CANCEL_RUNNING, limit=own.name, caused_by=run.id)
    return victim


def _tie(run: Run, outcome: services.Acquisition) -> None:
    """The slots are held for the whole run: ending it frees them (services.end_run)."""
    for _name, slot_id in outcome.slots or ((outcome.limit, str(outcome.slot_id)),):
        services.tie_to_run(slot_id, run.id)


# --- checks --------------------------------------------------------------------------------------


def _named_limits(workflow_name: str, limits: object) -> tuple[str, ...]:
    if limits is None:
        return ()
    if isinstance(limits, str) or not isinstance(limits, Sequence):
        raise _error(workflow_name, "limits must be a list of limit names")
    if len(limits) > MAX_NAMED_LIMITS:
        raise _error(workflow_name, f"limits: at most {MAX_NAMED_LIMITS} named limits, not {len(limits)}")
    if len(set(limits)) != len(limits):
        raise _error(workflow_name, "limits: each limit at most once")
    for name in limits:
        try:
            check_name(name)
        except ValueError as error:
            raise _error(workflow_name, f"limits: {error}") from None
        if name.startswith(BOUND_PREFIX):
            raise _error(workflow_name, f"limits: {name!r} is a workflow's own bound, not a named limit")
        if name == BOX_NAME:  # issue 45: it was held twice, once named and once as the box
            raise _error(workflow_name, f"limits: {BOX_NAMED}")
    return tuple(limits)


def check_start_on_full(workflow_name: str, value: object, field: str = "on_full", *, own_bound: bool = True) -> str:
    """SPEC 14.1: an on_full for a run's start ('wait', 'skip', 'replace', and 'cancel_running'
    when the workflow has its own bound, `own_bound`), or a WorkflowError naming `field`."""
    if value == CANCEL_RUNNING and not own_bound:
        raise runtime.WorkflowError(
            f"workflow {workflow_name!r}: {field}: {NO_OWN_BOUND.format(workflow=workflow_name)}", field
        )
    if value in START_ON_FULL:
        assert isinstance(value, str)
        return value
    raise runtime.WorkflowError(
        f"workflow {workflow_name!r}: {field} must be one of {', '.join(repr(v) for v in BOUND_ON_FULL)}, "
        f"not {value!r}",
        field,
    )


def _cap(workflow_name: str, field: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        return check_max_waiting(value)
    except ValueError as error:
        raise _error(workflow_name, f"concurrency {field} {error}") from None


def _whole(workflow_name: str, field: str, value: Any, maximum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_CAPACITY <= value <= maximum:
        raise _error(
            workflow_name, f"concurrency {field} must be a whole number from {MIN_CAPACITY} to {maximum}, not {value!r}"
        )
    return value


def _error(workflow_name: str, message: str) -> runtime.WorkflowError:
    return runtime.WorkflowError(f"workflow {workflow_name!r}: {message}")
