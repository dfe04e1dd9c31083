"""Forget a limit that left the config: `stackbone limits forget <limit>` (issue 30).

A limit removed from the workspace config is kept, undeclared, while anything may still need it
(its slots stay releasable, its waiting runs time out). Once nothing does, an operator can remove
it with its history: its freed slots, finished queue entries, keys, audit rows and insights rows.
The removal itself is recorded (ForgottenLimit: who, when, what it declared, how many rows went),
in the same transaction.

Refused, changing nothing, when the limit:
- is declared (in the workspace, or a workflow that still exists for a workflow's bound): a
  deploy would only bring it back;
- has a slot in use (busy or reserved) or a run waiting: it is still working.

Under the limit's lock (`Limit.objects.locked()`), so no engine change of that limit runs
alongside; one that waited for the lock then finds no such limit. Not part of the engine's hot
path: the engine never deletes a limit, this is the one place that does.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from limits.models import (
    AuditEvent,
    ForgottenLimit,
    Limit,
    LimitKey,
    LimitKeySpan,
    LimitMinute,
    LimitTotals,
    QueueEntry,
    Slot,
    is_storable_text,
)
from limits.services import UNKNOWN_LIMIT, LimitsError
from stackbone.plumbing import clock as box_clock

STILL_DECLARED = (
    "limit {name!r} is still declared in the workspace: remove it from the config and deploy "
    "(migrate or limits sync) first; nothing forgotten"
)
STILL_DECLARED_BOUND = (
    "limit {name!r} is the bound of a workflow that still caps its runs: remove the workflow's "
    "concurrency first; nothing forgotten"
)
STILL_USED = (
    "limit {name!r} still has {in_use} slot(s) in use and {waiting} run(s) waiting: release them or "
    "let them end first; nothing forgotten"
)
RACED = "limit {name!r} was being counted by the sweep's rollup: try again in a minute; nothing forgotten"


def forget_limit(name: str, *, actor: str) -> ForgottenLimit:
    """Remove an undeclared, idle limit and its history; return the record of it.

    1. Lock the limit's row; refuse if it is declared, has a slot in use or a run waiting.
    2. Delete its history, the rows that point to it first: slots, queue entries, keys, audit
       rows, insights rows.
    3. Delete the limit and write the ForgottenLimit record, in the same transaction.
    """
    if not is_storable_text(name):
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    try:
        with transaction.atomic(durable=True):
            limit = Limit.objects.locked().filter(name=name).first()
            if limit is None:
                raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
            _refuse_unless_forgettable(limit)
            removed = {
                "slots": Slot.objects.filter(limit=limit).delete()[0],
                "queue_entries": QueueEntry.objects.filter(limit=limit).delete()[0],
                "keys": LimitKey.objects.filter(limit=limit).delete()[0],
                "audit_events": AuditEvent.objects.filter(limit=limit).delete()[0],
                "minutes": LimitMinute.objects.filter(limit=limit).delete()[0],
                "key_spans": LimitKeySpan.objects.filter(limit=limit).delete()[0],
                "totals": LimitTotals.objects.filter(limit=limit).delete()[0],
            }
            record = ForgottenLimit.objects.create(
                name=limit.name,
                kind=limit.kind,
                at=box_clock.now(),
                actor=actor,
                declared_capacity=limit.declared_capacity,
                declared_max_hold_ms=None if limit.is_workflow_bound else limit.declared_max_hold_ms,
                removed=removed,
            )
            limit.delete()
            return record
    except IntegrityError:
        # PostgreSQL: the rollup wrote an insights row for the limit while it was being removed
        # (its foreign key is checked at commit). The whole removal was rolled back.
        raise LimitsError(RACED.format(name=name), field="limit") from None


def _refuse_unless_forgettable(limit: Limit) -> None:
    if limit.declared:
        message = STILL_DECLARED_BOUND if limit.is_workflow_bound else STILL_DECLARED
        raise LimitsError(message.format(name=limit.name), field="limit")
    in_use = Slot.objects.filter(limit=limit, state__in=[Slot.State.BUSY, Slot.State.RESERVED]).count()
    waiting = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING).count()
    # The rows decide, not only the counters: a counter that drifted must not let live work go.
    in_use, waiting = max(in_use, limit.in_use), max(waiting, limit.waiting_count)
    if in_use or waiting:
        raise LimitsError(STILL_USED.format(name=limit.name, in_use=in_use, waiting=waiting), field="limit")
