"""The advance: one worker takes a run's lease, lets the layer above confirm a queued run's start,
replays the workflow body with the steps it recorded (steps), and records how it ended; a
heartbeat renews the lease while a step runs longer than a beat."""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback
import uuid
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Coalesce

from stackbone.plumbing import clock
from stackbone.runs import statements
from stackbone.runs.dispatch import START_GATE, dispatch
from stackbone.runs.endings import ENDED, stop_cancelled
from stackbone.runs.errors import INTERRUPTIONS, LeaseLost, Suspend, check_json
from stackbone.runs.json_values import storable_text
from stackbone.runs.models import Run, Step
from stackbone.runs.registry import get_workflow
from stackbone.runs.signals import run_ended, run_starting
from stackbone.runs.steps import LEASE, RunContext, current_context

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0  # how often an advance renews its run's lease (steps.LEASE)


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
    token = current_context.set(ctx)
    heartbeat = _Heartbeat(run_id, owner)
    try:
        wf = get_workflow(run.workflow)
        output = wf(run.input)
        check_json(output, "the workflow's output")
    except Suspend:
        return _release_lease(ctx)
    except LeaseLost:
        stop_cancelled(ctx.run_id, ctx.owner)  # cancelled while it ran: it has stopped now
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
        current_context.reset(token)
    return _finish(ctx, Run.Status.COMPLETED, output=output)


class _Heartbeat:
    """Renews a run's lease every HEARTBEAT_SECONDS from a thread (its own database connection)
    while this worker advances it; a compare-and-set on the owner, so a lease already lost stays
    lost. A run cancelled while it executes keeps its lease so (starts.cancel_run): the step still
    running is work its slots guard, and they stay held until the body reaches its next step
    boundary and stops (endings.stop_cancelled); a worker that dies stops the beats, and recovery
    ends the run once the lease has run out. Most advances end long before the first beat and
    never touch the database here."""

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
            stop_cancelled(ctx.run_id, ctx.owner)  # cancelled while its last step ran
            return "cancelled"
        run_ended.send(sender=Run, run_id=ctx.run_id, status=status)
    return str(status)


def _release_lease(ctx: RunContext) -> str:
    if stop_cancelled(ctx.run_id, ctx.owner):  # cancelled as it suspended
        return "cancelled"
    Run.objects.filter(id=ctx.run_id, lease_owner=ctx.owner).update(lease_owner="", lease_until=None)
    if Run.objects.filter(id=ctx.run_id, status=Run.Status.RUNNING, suspended=False).exists():
        # A wake arrived while this worker still held the lease: its task may have found the
        # lease taken and given up, so go again.
        dispatch([ctx.run_id])
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
