"""Invariants proven from the rows the engine keeps as history.

Every change to a limit's slots and queue happens under that limit's row lock, and every service
reads the clock after taking the lock, so the timestamps written for one limit follow the order
of its transactions (two transactions can share a microsecond; then we cannot tell their order and
give the engine the benefit of the doubt). Each function returns a list of violations: empty
means the invariant held.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from limits.models import Limit, QueueEntry, Slot

FREE, GRANT = 0, 1


def capacity_overruns(limit: Limit) -> list[str]:
    """At no instant did reserved + busy exceed the capacity (constant during the test).

    A sweep line over each slot's life [granted_at, freed_at): at equal timestamps a free is
    counted before a grant, since a release hands its slot over in the same transaction."""
    events: list[tuple[dt.datetime, int, str]] = []
    for slot_id, granted_at, freed_at in Slot.objects.filter(limit=limit).values_list("id", "granted_at", "freed_at"):
        events.append((granted_at, GRANT, slot_id))
        if freed_at is not None:
            if freed_at < granted_at:
                return [f"{slot_id} freed at {freed_at} before its grant at {granted_at}"]
            events.append((freed_at, FREE, slot_id))
    events.sort(key=lambda event: (event[0], event[1]))
    level, violations = 0, []
    for at, kind, slot_id in events:
        level += 1 if kind == GRANT else -1
        if level > limit.capacity:
            violations.append(f"{limit.name}: {level} slots in use at {at.isoformat()} (grant of {slot_id})")
    return violations


def queue_jumps(limit: Limit) -> list[str]:
    """Strict FIFO, in two parts.

    1. Grants from the queue: when entry E was granted (its slot's granted_at, equal to E's
       finished_at), no entry with a smaller position was still waiting. Such an entry F was
       queued before E (positions are handed out under the lock in order), so if F finished
       only after E's grant, E jumped it. F timing out or being cancelled at that very moment
       is not a jump (the grant skips waits past their deadline in the same transaction).
    2. Grants at once (a slot with no queue entry, 2.2): no entry was waiting at that moment,
       i.e. none was enqueued before it and finished after it.
    """
    entries = list(
        QueueEntry.objects.filter(limit=limit)
        .order_by("position")
        .values("id", "position", "state", "run_id", "enqueued_at", "finished_at")
    )
    slot_grants = dict(
        Slot.objects.filter(limit=limit, queue_entry__isnull=False).values_list("queue_entry_id", "granted_at")
    )
    violations: list[str] = []
    latest_finish: dt.datetime | None = None  # the latest finish among the entries before, None = still waiting
    culprit: dict[str, Any] | None = None
    started = False
    for entry in entries:
        if entry["state"] == QueueEntry.State.GRANTED:
            granted_at = slot_grants.get(entry["id"])
            if granted_at is None or granted_at != entry["finished_at"]:
                violations.append(f"{limit.name}: entry #{entry['position']} granted without a slot at its finish")
            elif started and (latest_finish is None or latest_finish > granted_at):
                violations.append(
                    f"{limit.name}: #{entry['position']} ({entry['run_id']}) granted at {granted_at.isoformat()} "
                    f"while #{culprit['position']} ({culprit['run_id']}) was waiting"  # type: ignore[index]
                )
        finish = entry["finished_at"]
        if not started or (latest_finish is not None and (finish is None or finish > latest_finish)):
            latest_finish, culprit = finish, entry
        started = True

    waits: list[tuple[dt.datetime, int]] = []
    for entry in entries:
        waits.append((entry["enqueued_at"], 2))
        if entry["finished_at"] is not None:
            waits.append((entry["finished_at"], 0))
    for granted_at in Slot.objects.filter(limit=limit, queue_entry__isnull=True).values_list("granted_at", flat=True):
        waits.append((granted_at, 1))
    waits.sort()
    waiting = 0
    for at, kind in waits:
        if kind == 2:
            waiting += 1
        elif kind == 0:
            waiting -= 1
        elif waiting:
            violations.append(f"{limit.name}: a slot granted at once at {at.isoformat()} while {waiting} run(s) waited")
    return violations


def request_histories(limit: Limit) -> list[str]:
    """No acquire call (request) was granted twice, none was lost.

    Per request: its queue entries, in position order, are all granted but the last (a request
    queues again only after its reservation lapsed or was released); its slots, in grant order,
    never overlap; every slot but the last was a reservation freed unconfirmed (lapsed or
    released by an operator), so at most one slot per request was ever confirmed."""
    violations: list[str] = []
    entries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in QueueEntry.objects.filter(limit=limit).order_by("position").values("request", "state"):
        entries[entry["request"]].append(entry)
    slots: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for slot in (
        Slot.objects.filter(limit=limit)
        .order_by("granted_at", "queue_entry__position")
        .values("id", "request", "state", "granted_at", "freed_at", "confirmed_at", "queue_entry_id")
    ):
        slots[slot["request"]].append(slot)
    for request, history in entries.items():
        if any(entry["state"] != QueueEntry.State.GRANTED for entry in history[:-1]):
            violations.append(f"{request}: queued again after an entry that was not granted: {history}")
    for request, history in slots.items():
        for earlier, later in zip(history, history[1:], strict=False):
            if earlier["freed_at"] is None or earlier["freed_at"] > later["granted_at"]:
                violations.append(f"{request}: two live slots at once ({earlier['id']}, {later['id']})")
            if earlier["confirmed_at"] is not None or earlier["state"] not in ("lapsed", "released"):
                violations.append(f"{request}: slot {earlier['id']} ({earlier['state']}) followed by another grant")
        if sum(slot["confirmed_at"] is not None for slot in history) > 1:
            violations.append(f"{request}: confirmed twice")
        direct = [slot for slot in history if slot["queue_entry_id"] is None]
        if direct and (len(history) > 1 or request in entries):
            violations.append(f"{request}: granted at once and also through the queue")
        granted = sum(entry["state"] == QueueEntry.State.GRANTED for entry in entries.get(request, []))
        if granted != len(history) - len(direct):
            violations.append(f"{request}: {granted} granted entries but {len(history) - len(direct)} queue slots")
    return violations


def counters_against_rows(limit: Limit) -> list[str]:
    limit.refresh_from_db()
    rows = (
        Slot.objects.filter(limit=limit, state="busy").count(),
        Slot.objects.filter(limit=limit, state="reserved").count(),
        QueueEntry.objects.filter(limit=limit, state="waiting").count(),
    )
    counters = (limit.busy_count, limit.reserved_count, limit.waiting_count)
    return [] if counters == rows else [f"{limit.name}: counters {counters} != rows {rows}"]


def all_violations(limit: Limit) -> list[str]:
    return capacity_overruns(limit) + queue_jumps(limit) + request_histories(limit) + counters_against_rows(limit)
