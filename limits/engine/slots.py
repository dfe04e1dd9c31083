"""The workflow-facing operations: acquire, confirm, release, end a run, tie a slot to its run.

They may run inside a caller's transaction, so that the run layer can record a step in the same
commit as the engine change; nested, they take no savepoint (two statements less): if one raises,
the caller's whole transaction rolls back. On PostgreSQL the common cases are one database call
each (limits.engine.server); the rest, and everything on SQLite, runs the rules of
limits.engine.rules in one transaction.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta
from typing import Literal

from django.db import connection, transaction
from django.db.models import Q

from limits.engine import rules, server
from limits.engine.errors import (
    BAD_TIMEOUT,
    UNDECLARED_LIMIT,
    UNKNOWN_LIMIT,
    LimitsError,
    check_label,
    check_request,
    check_run_id,
    duration_ms,
)
from limits.engine.results import Acquisition
from limits.engine.rules import DEFAULT_TIMEOUT_MS, RESERVATION_MS, Changes
from limits.models import AuditEvent, Limit, QueueEntry, Slot, is_storable_text

# What a queue entry that was not granted amounts to, as an acquire outcome.
_ENTRY_OUTCOMES: dict[str, Literal["waiting", "timed_out", "cancelled"]] = {
    "waiting": "waiting",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
}


def acquire(
    limit_name: str,
    *,
    run_id: str,
    request: str | None = None,
    label: str | None = None,
    timeout: int | str | None = None,
) -> Acquisition:
    """Take a slot of `limit_name` for `run_id`, or join the queue.

    `request` names this acquire call (the run layer passes a key that is stable across replays):
    calling again with the same request returns what became of it instead of acquiring twice, and
    confirms a slot reserved for it. Steps:

    1. Look up the request: a live slot (confirm it if reserved), a waiting entry, or an ended wait.
    2. Otherwise lock the limit. If no run waits and busy + reserved < capacity, grant a busy slot.
    3. Otherwise join the end of the queue with deadline = now + timeout (default 24 h). If there
       is free capacity (the runs ahead are all past their deadline), settle the limit: those
       time out and the head is granted, which may be this very request: confirm it at once.
    """
    check_run_id(run_id)
    request = request or uuid.uuid4().hex
    check_request(request)
    label = check_label(label)
    timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None else duration_ms(timeout, BAD_TIMEOUT, "timeout")
    if server.available():
        fast = server.acquire(limit_name, run_id, request, label, timeout_ms)
        if fast is not server.NOT_HANDLED_HERE:
            return fast
    with transaction.atomic(savepoint=False):
        outcome = _acquire_in_transaction(limit_name, run_id, request, label, timeout_ms)
    if isinstance(outcome, LimitsError):
        raise outcome  # raised out here: a nested block without a savepoint must exit cleanly
    return outcome


def confirm(slot_id: str) -> bool:
    """Turn a reserved slot busy, if its 2 minutes have not passed. A late confirm lapses the
    reservation as the sweep would (3.6) and returns False."""
    if server.available() and is_storable_text(slot_id):
        fast = server.confirm(slot_id)
        if fast is not server.NOT_HANDLED_HERE:
            return bool(fast)
    with transaction.atomic(savepoint=False):
        slot = rules.locked_slot(slot_id)
        if slot is None or slot.state != Slot.State.RESERVED:
            return False
        changes = Changes()
        confirmed = rules.confirm_locked(slot.limit, slot, rules.clock(slot.limit), changes)
        rules.save_counters(slot.limit)
        rules.wake_on_commit(changes.woken)
        return confirmed


def release(slot_id: str, *, actor: str | None = None) -> bool:
    """Free a busy or reserved slot and hand the capacity to the head of the queue at once.

    Returns False and changes nothing for a slot already free, taken back, or unknown (safe to
    retry). With an `actor` (an operator) the release is recorded as an audit event. A released
    reservation sends its run back to the end of the queue, keeping its deadline, as a lapse does.
    """
    if not isinstance(slot_id, str):
        return False
    if server.available() and actor is None and is_storable_text(slot_id):
        fast = server.release(slot_id, RESERVATION_MS)
        if fast is not server.NOT_HANDLED_HERE:
            released, woken = fast
            rules.wake_on_commit(woken)
            return released
    with transaction.atomic(savepoint=False):
        slot = rules.locked_slot(slot_id)
        if slot is None or not slot.is_live:
            return False
        limit, changes = slot.limit, Changes()
        now = rules.clock(limit)
        Slot.objects.filter(id=slot.id).update(state=Slot.State.RELEASED, freed_at=now, freed_by=actor or "")
        if slot.state == Slot.State.BUSY:
            limit.busy_count -= 1
        else:
            limit.reserved_count -= 1
            rules.requeue(limit, [slot], now)
        rules.settle(limit, now, changes)
        rules.save_counters(limit)
        if actor is not None:
            rules.audit(limit, actor, AuditEvent.Action.RELEASE, now, slot_id=slot.id, old=slot.state, new="released")
        rules.wake_on_commit(changes.woken)
        return True


def tie_to_run(slot_id: str, run_id: str) -> bool:
    """Mark a busy slot of `run_id` as held for work inside that run (with_limit, SPEC 2.5): it
    is freed when the run ends, if nothing released it before. Call it in the transaction that
    records the slot for the run, so the slot is never busy for the work without the mark.
    Returns False (and changes nothing) for a slot that is not busy for that run."""
    return bool(Slot.objects.filter(id=slot_id, run_id=run_id, state=Slot.State.BUSY).update(ends_with_run=True))


def end_run(run_id: str) -> int:
    """A run ended (completed, failed or was cancelled): its waits are cancelled, its unconfirmed
    reservations freed (3.4, 3.7), and the busy slots held for work inside it (with_limit,
    `tie_to_run`) freed (2.5); the capacity goes to the next runs. Other busy slots it holds are
    untouched: they belong to the work (2.7). Returns how many entries and slots it ended.

    Never: a slot tied to a run stays busy or reserved after that run ended (`limits verify`
    checks it from the rows)."""
    check_run_id(run_id)
    ended = 0
    with transaction.atomic(savepoint=False):
        changes = Changes()
        ending_slots = Slot.objects.filter(run_id=run_id).filter(
            Q(state=Slot.State.RESERVED) | Q(state=Slot.State.BUSY, ends_with_run=True)
        )
        limit_ids = set(
            QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING).values_list("limit_id", flat=True)
        ) | set(ending_slots.values_list("limit_id", flat=True))
        for limit in Limit.objects.select_for_update().filter(id__in=limit_ids).order_by("id"):
            now = rules.clock(limit)
            cancelled = QueueEntry.objects.filter(limit=limit, run_id=run_id, state=QueueEntry.State.WAITING).update(
                state=QueueEntry.State.CANCELLED, finished_at=now
            )
            freed = Counter(ending_slots.filter(limit=limit).values_list("state", flat=True))
            if freed:
                ending_slots.filter(limit=limit).update(state=Slot.State.RUN_ENDED, freed_at=now)
            limit.waiting_count -= cancelled
            limit.reserved_count -= freed[Slot.State.RESERVED.value]
            limit.busy_count -= freed[Slot.State.BUSY.value]
            rules.settle(limit, now, changes)
            rules.save_counters(limit)
            ended += cancelled + freed.total()
        rules.wake_on_commit(changes.woken)
    return ended


def _acquire_in_transaction(
    limit_name: str, run_id: str, request: str, label: str, timeout_ms: int
) -> Acquisition | LimitsError:
    previous = _previous_outcome(request)
    if previous is not None:
        return previous
    limit = Limit.objects.select_for_update().filter(name=limit_name).first()
    if limit is None:
        return LimitsError(UNKNOWN_LIMIT.format(name=limit_name), field="limit")
    if not limit.declared:
        return LimitsError(UNDECLARED_LIMIT.format(name=limit.name), field="limit")
    now = rules.clock(limit)
    if limit.waiting_count == 0 and limit.in_use < limit.capacity:
        slot = rules.grant_busy(limit, run_id=run_id, request=request, label=label, now=now)
        rules.save_counters(limit)
        return Acquisition("busy", limit.name, request, slot_id=slot.id)
    deadline = now + timedelta(milliseconds=timeout_ms)
    rules.join_queue(
        limit, run_id=run_id, request=request, label=label, now=now, deadline=deadline, timeout_ms=timeout_ms
    )
    changes = Changes()
    rules.settle(limit, now, changes)
    mine = Slot.objects.filter(request=request, state=Slot.State.RESERVED).first() if changes.granted else None
    if mine is not None:
        changes.woken.remove(run_id)
        rules.confirm_locked(limit, mine, now, changes)
    rules.save_counters(limit)
    rules.wake_on_commit(changes.woken)
    if mine is not None:
        return Acquisition("busy", limit.name, request, slot_id=mine.id)
    return Acquisition("waiting", limit.name, request, timeout_ms=timeout_ms, deadline=deadline)


def _previous_outcome(request: str) -> Acquisition | None:
    """What became of an earlier acquire call with this request, confirming a reservation that
    waits for it. None for a new request."""
    if not _request_seen(request):
        return None
    slots = list(Slot.objects.filter(request=request).select_related("limit", "queue_entry"))
    live = next((slot for slot in slots if slot.is_live), None)
    if live is not None and live.state == Slot.State.RESERVED:
        locked = rules.locked_slot(live.id)
        if locked is None or locked.state != Slot.State.RESERVED:
            return _previous_outcome(request)
        changes = Changes()
        confirmed = rules.confirm_locked(locked.limit, locked, rules.clock(locked.limit), changes)
        rules.save_counters(locked.limit)
        rules.wake_on_commit(changes.woken)
        return (
            Acquisition("busy", locked.limit.name, request, slot_id=locked.id)
            if confirmed
            else _previous_outcome(request)
        )
    if live is not None:
        return Acquisition("busy", live.limit.name, request, slot_id=live.id)
    entries = sorted(QueueEntry.objects.filter(request=request).select_related("limit"), key=lambda e: e.position)
    entry = entries[-1] if entries else None
    if entry is not None and entry.state != QueueEntry.State.GRANTED:
        state = _ENTRY_OUTCOMES[entry.state]
        return Acquisition(state, entry.limit.name, request, timeout_ms=entry.timeout_ms, deadline=entry.deadline)
    if entry is not None and not any(slot.queue_entry_id == entry.id for slot in slots):
        return _previous_outcome(request)  # granted after the slots were read (READ COMMITTED): read again
    confirmed_slot = next((slot for slot in slots if slot.confirmed_at is not None), None)
    if confirmed_slot is not None:
        return Acquisition("busy", confirmed_slot.limit.name, request, slot_id=confirmed_slot.id)
    if slots:
        return Acquisition("cancelled", slots[0].limit.name, request)
    return None


_REQUEST_SEEN = f"""
    SELECT 1 FROM {Slot._meta.db_table} WHERE request = %s
    UNION ALL SELECT 1 FROM {QueueEntry._meta.db_table} WHERE request = %s
    LIMIT 1"""


def _request_seen(request: str) -> bool:
    """One indexed probe, raw: most acquire calls are new, and the ORM's two joined reads that
    _previous_outcome needs otherwise cost a third of an uncontended cycle."""
    with connection.cursor() as cursor:
        cursor.execute(_REQUEST_SEEN, [request, request])
        return cursor.fetchone() is not None
