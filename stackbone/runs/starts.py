"""Starting and cancelling runs: a run created and dispatched after commit (start_run), created
to start at a moment of the database's clock (start_run_at), or created in bulk by a writer that
knows its rows (prepared_input, loaded_run: limits' start of a batch); and a cancel that ends a
run not executing at once and lets an executing one keep what it holds until it stops (cancel_run)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Case, DateTimeField, F, Q, Value, When

from stackbone.plumbing import clock
from stackbone.runs.dispatch import DEFERRED, START_GATE, UNFINISHED, count_down_to, dispatch_on_commit
from stackbone.runs.errors import WorkflowError, check_json
from stackbone.runs.models import Run, Step
from stackbone.runs.registry import Workflow, get_workflow, reference_of
from stackbone.runs.signals import run_ended, run_queued


def start_run(
    wf: Workflow | str, input: Any = None, *, bounds: list[str] | None = None, concurrency_key: str = ""
) -> Run:
    """Create a run of a workflow (object or registered name) and dispatch it after commit.

    With `bounds` (the limits the whole run holds, SPEC 11: limits.runs.start_run works them
    out), the run is created queued and waiting, and `run_queued` tells the layer above in the
    same transaction: it queues the run, or wakes it at once when its bounds have room. A worker
    then starts it only once `run_starting` confirms (advance)."""
    name, registered = _registered(wf, "start_run")
    input = _checked_input(input, "the input")
    reference = reference_of(registered, input)
    now = clock.expression()  # the database's time, read by each statement
    with transaction.atomic():
        if bounds:
            run = _queued(name, input, reference, START_GATE, bounds=bounds, concurrency_key=concurrency_key, now=now)
            answers = [answer for _receiver, answer in run_queued.send(sender=Run, run=run)]
            if answers and all(answer == "start" for answer in answers):
                # Its bounds had room: the slots are its own already, so it starts like any run.
                Run.objects.filter(id=run.id).update(
                    status=Run.Status.PENDING, suspended=False, waiting_for="", dispatched_at=now
                )
                dispatch_on_commit([run.id])
        else:
            run = Run.objects.create(
                workflow=name, input=input, reference=reference, created_at=now, updated_at=now, dispatched_at=now
            )
            dispatch_on_commit([run.id])
    run.refresh_from_db()
    return run


def prepared_input(wf: Workflow, input: Any, what: str = "the input") -> tuple[Any, str]:
    """A run's input as its row keeps it (None: {}; what JSON cannot keep is a WorkflowError
    naming `what`) and its reference (reference_of)."""
    input = _checked_input(input, what)
    return json.loads(json.dumps(input)), reference_of(wf, input)


def loaded_run(**fields: Any) -> Run:
    """A Run holding `fields` as its row has them, without reading it back (a writer that knows
    every column it wrote: limits' start of a batch)."""
    run = Run(**fields)
    run._state.adding = False
    run._state.db = DEFAULT_DB_ALIAS
    return run


def cancel_run(run_id: str, *, reason: str = "", limit: str = "", caused_by: str = "") -> bool:
    """Cancel an unfinished run. Returns False for a run already finished (or cancelled) or unknown.

    `reason`, `limit`, `caused_by`: the cause a layer above records when another run cancelled it
    (limits' cancel_running, SPEC 14.4, 14.6: Run.end_reason, end_limit, caused_by); an empty
    one is kept as none (NULL), as an operator's cancel keeps them.

    The cancel is recorded at once: the run's status is `cancelled` from this commit on, whatever
    it was doing. What it holds is freed only once its work has stopped (SPEC 2.5, 11.4):

    - A run not executing (queued, pending, suspended on a wait, or running with no live lease)
      ends now: whoever holds something for it hears of it in the same transaction (run_ended:
      the limits engine takes it out of every queue and frees what ends with the run).
    - A run executing (running, not suspended, a live lease held by a worker) may be inside a
      step or a with_limit block: it keeps its lease and everything it holds, and its finished_at
      stays empty ("stopping"). The worker advancing it finds the cancel at its next step
      boundary (lock_own_run), stops, and only then ends it (endings.stop_cancelled: run_ended
      in that transaction). A worker that died stops renewing the lease: once it expires,
      recover() ends the run (dispatch.end_stopped_cancels).
    """
    now = clock.expression()
    executing = Q(status=Run.Status.RUNNING, suspended=False, lease_until__gt=now) & ~Q(lease_owner="")
    with transaction.atomic():
        # One UPDATE decides on the row as it is (its SET reads the old values): an executing run
        # keeps its lease and waits for its worker; any other run ends now.
        cancelled = Run.objects.filter(id=run_id, status__in=UNFINISHED).update(
            status=Run.Status.CANCELLED,
            updated_at=now,
            suspended=False,
            finished_at=Case(When(executing, then=Value(None)), default=now, output_field=DateTimeField()),
            lease_owner=Case(When(executing, then=F("lease_owner")), default=Value("")),
            lease_until=Case(When(executing, then=F("lease_until")), default=Value(None), output_field=DateTimeField()),
            **({"end_reason": reason, "end_limit": limit or None, "caused_by": caused_by or None} if reason else {}),
        )
        if not cancelled:
            return False
        Step.objects.filter(run_id=run_id, status=Step.Status.WAITING).update(
            status=Step.Status.FAILED, error="run cancelled", finished_at=now
        )
        if Run.objects.filter(id=run_id, finished_at__isnull=False).exists():
            run_ended.send(sender=Run, run_id=run_id, status=Run.Status.CANCELLED)
    return True


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
    name, registered = _registered(wf, "start_run_at")
    input = _checked_input(input, "the input")
    now = clock.expression()
    with transaction.atomic():
        reference = reference_of(registered, input)
        run = _queued(
            name, input, reference, DEFERRED, bounds=bounds, concurrency_key=concurrency_key, now=now, until=not_before
        )
        transaction.on_commit(lambda: count_down_to(run.id, not_before))
    run.refresh_from_db()
    return run


def _registered(wf: Workflow | str, verb: str) -> tuple[str, Workflow]:
    """The name a run of `wf` (a @workflow function or its registered name) is started under, and
    its registered workflow; anything else is a WorkflowError naming `verb`."""
    name = wf.name if isinstance(wf, Workflow) else wf
    if not isinstance(name, str):
        raise WorkflowError(f"{verb} takes a @workflow function or its registered name")
    return name, get_workflow(name)


def _checked_input(input: Any, what: str) -> Any:
    """A run's input as its row keeps it (None: {}); what JSON cannot keep is a WorkflowError."""
    input = {} if input is None else input
    check_json(input, what)
    return input


def _queued(
    name: str,
    input: Any,
    reference: str,
    waiting_for: str,
    *,
    bounds: list[str] | None,
    concurrency_key: str,
    now: Any,
    until: datetime | None = None,
) -> Run:
    """A run created queued and suspended on `waiting_for`: its bounds (START_GATE), or its start
    time `until` (DEFERRED, kept as its wait_deadline)."""
    return Run.objects.create(
        workflow=name,
        input=input,
        status=Run.Status.QUEUED,
        suspended=True,
        waiting_for=waiting_for,
        wait_deadline=until,
        bounds=list(bounds or []),
        concurrency_key=concurrency_key,
        reference=reference,
        created_at=now,
        updated_at=now,
    )
