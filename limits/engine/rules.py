"""The rules that run under a limit's row lock, one home each: the clock, the counters, the grant
to the head of the queue, time-outs, confirmations, lapses, the audit row.

Every function here runs inside a transaction that holds the lock of the limit it is given
(`locked_limit`, `locked_slot`, or the caller's own SELECT ... FOR NO KEY UPDATE in id order). The
counters on the limit row change in memory beside the rows they count; `save_counters` writes
them once, at the end of the locked section. Runs to wake are collected in `Changes` and
announced after commit (`wake_on_commit`), never while a lock is held.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import F
from django.db.models.functions import Coalesce

from limits.engine import keys, server
from limits.engine.errors import UNKNOWN_LIMIT, LimitsError
from limits.engine.results import DEFAULT_TIMEOUT_MS, RESERVATION_MS, Changes
from limits.models import AuditEvent, Limit, QueueEntry, Slot, is_storable_text
from studio.plumbing import clock as box_clock

__all__ = ["DEFAULT_TIMEOUT_MS", "RESERVATION_MS", "Changes"]  # their home is limits.engine.results
GRANT_BATCH = 5_000
SYSTEM_ACTOR = "system"
SWEEP_ACTOR = "sweep"
DEPLOY_ACTOR = "deploy"

# The capacity in force, as a database expression (Limit.capacity in Python; limits_capacity()
# in engine.sql): an override wins over the declared value until it is reset (SPEC 5.2).
EFFECTIVE_CAPACITY = Coalesce("capacity_override", "declared_capacity")
HAS_FREE_CAPACITY = {"effective_capacity__gt": F("busy_count") + F("reserved_count")}


def clock(limit: Limit, now: datetime | None = None) -> datetime:
    """The time of a change to a locked limit: the box's clock (the database's, read after the
    lock was taken: studio.plumbing.clock), but never earlier than the limit's last change, so one
    limit's history follows its lock order (limits.verify relies on it; the database functions
    apply the same rule, limits_clock in engine.sql). `now`: a reading of that clock already taken
    under the same locks."""
    now = box_clock.now() if now is None else now
    if limit.last_event_at is not None and limit.last_event_at > now:
        now = limit.last_event_at
    limit.last_event_at = now
    return now


COUNTER_FIELDS = ["busy_count", "reserved_count", "waiting_count", "next_position", "last_event_at"]
KEYED_COUNTER_FIELDS = ["keyed_busy_count", "keyed_reserved_count", "keyed_waiting_count", "group_waiting_count"]


def clock_all(locked: dict[int, Limit]) -> datetime:
    """One time for a change to several locked limits: the latest of their clocks (`clock`)."""
    reading = box_clock.now()
    now = max(clock(limit, reading) for limit in locked.values())
    for limit in locked.values():
        limit.last_event_at = now
    return now


def settle_all(locked: dict[int, Limit], now: datetime, changes: Changes) -> None:
    """`settle` each locked limit; with key pools or groups among them, one settle of the lot
    (limits.engine.keys; on PostgreSQL its function limits_grant, one call), so a group is granted
    on all its limits at once."""
    if all(limit.is_plain for limit in locked.values()):
        for limit in locked.values():
            settle(limit, now, changes)
    elif server.available():
        _grant_on_server(locked, now, changes)
    else:
        keys.settle(locked, now, changes)


def _grant_on_server(locked: dict[int, Limit], now: datetime, changes: Changes) -> None:
    """keys.settle as limits_grant: the counters in memory are written first (the function reads
    them from the rows) and read back after (it writes them), with the key pools' rows."""
    save_all(locked)
    timed_out, granted, woken = server.grant(sorted(locked), now, RESERVATION_MS, keys.OWED_AFTER_MS)
    if timed_out or granted:
        fields = [*COUNTER_FIELDS, *KEYED_COUNTER_FIELDS]
        for row in Limit.objects.filter(id__in=list(locked)).values("id", *fields):
            limit = locked[row["id"]]
            for field in fields:
                setattr(limit, field, row[field])
            limit.__dict__.pop("_pools", None)  # read again from the rows when next needed
    changes.timed_out += timed_out
    changes.granted += granted
    changes.woken.extend(woken)


def save_all(locked: dict[int, Limit]) -> None:
    for limit in locked.values():
        save_counters(limit)


def locked_by_name(name: str) -> tuple[Limit, dict[int, Limit]]:
    """Lock a limit by name with the other limits of its groups (limits.engine.keys.lock)."""
    if not is_storable_text(name):
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    limit_id = Limit.objects.filter(name=name).values_list("id", flat=True).first()
    if limit_id is None:
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    locked = keys.lock([limit_id])
    return locked[limit_id], locked


def save_counters(limit: Limit) -> None:
    """Write the counters (and the clock) of a locked limit, and of its key pools that changed:
    once per locked section."""
    pools: keys.Pools | None = limit.__dict__.get("_pools")
    if pools is None:
        limit.save(update_fields=COUNTER_FIELDS)
        return
    pools.save()
    limit.save(update_fields=COUNTER_FIELDS + KEYED_COUNTER_FIELDS)


wake_on_commit = server.wake_on_commit  # announced after commit, never while a lock is held


def locked_limit(name: str) -> Limit:
    if not is_storable_text(name):
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    try:
        return Limit.objects.locked().get(name=name)
    except Limit.DoesNotExist:
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit") from None


def locked_slot(slot_id: str) -> Slot | None:
    """Lock the slot's limit, then read the slot: every change of a slot happens under its
    limit's lock, so the state read here holds until commit."""
    if not is_storable_text(slot_id):
        return None  # no slot id holds a NUL or a lone surrogate; the database could not compare it
    limit_id = Slot.objects.filter(id=slot_id).values_list("limit_id", flat=True).first()
    if limit_id is None:
        return None
    limit = Limit.objects.locked().get(id=limit_id)
    slot = Slot.objects.select_related("queue_entry").get(id=slot_id)
    slot.limit = limit
    return slot


def grant_busy(limit: Limit, *, run_id: str, request: str, label: str, now: datetime) -> Slot:
    """A busy slot at once (SPEC 2.2); the caller checked that nobody waits and a slot is free."""
    slot = Slot.objects.create(
        limit=limit,
        run_id=run_id,
        request=request,
        label=label,
        state=Slot.State.BUSY,
        granted_at=now,
        confirmed_at=now,
        expires_at=now + timedelta(milliseconds=limit.max_hold_ms),
    )
    limit.busy_count += 1
    return slot


def join_queue(
    limit: Limit, *, run_id: str, request: str, label: str, now: datetime, deadline: datetime, timeout_ms: int
) -> None:
    QueueEntry.objects.create(
        limit=limit,
        run_id=run_id,
        request=request,
        label=label,
        position=limit.next_position,
        enqueued_at=now,
        deadline=deadline,
        timeout_ms=timeout_ms,
    )
    limit.next_position += 1
    limit.waiting_count += 1


def settle(limit: Limit, now: datetime, changes: Changes, locked: dict[int, Limit] | None = None) -> None:
    """Hand free capacity to the queue (SPEC 3.3-3.5, 4.1):

    1. time out the waits past their deadline;
    2. reserve a slot for each run at the head, in queue order, while busy + reserved < capacity.
    Under the limit's lock; the caller saves the counters. On PostgreSQL limits_settle does both
    in one call (it reads the counters from the row, so they are written first).

    A limit with key pools or waiting groups is not plain: limits.engine.keys settles it, with
    the other limits the caller locked (`locked`; a group needing a limit not locked waits)."""
    if limit.waiting_count == 0 or limit.in_use >= limit.capacity:
        return
    if not limit.is_plain:
        settle_all(locked or {limit.id: limit}, now, changes)
        return
    if server.available():
        save_counters(limit)
        timed_out, granted = server.settle(limit.id, now, RESERVATION_MS)
        limit.waiting_count -= len(timed_out) + len(granted)
        limit.reserved_count += len(granted)
        changes.timed_out += len(timed_out)
        changes.granted += len(granted)
        changes.woken.extend(timed_out + granted)
        return
    time_out(limit, now, changes)
    reserved_until = now + timedelta(milliseconds=RESERVATION_MS)
    expires_at = now + timedelta(milliseconds=limit.max_hold_ms)
    while limit.waiting_count and limit.in_use < limit.capacity:
        run_ids = _grant_heads(limit, min(limit.capacity - limit.in_use, GRANT_BATCH), now, reserved_until, expires_at)
        if not run_ids:
            break
        limit.waiting_count -= len(run_ids)
        limit.reserved_count += len(run_ids)
        changes.granted += len(run_ids)
        changes.woken.extend(run_ids)


_HEADS = f"""
    UPDATE {QueueEntry._meta.db_table} SET state = 'granted', finished_at = %s
    WHERE id IN (
        SELECT id FROM {QueueEntry._meta.db_table}
        WHERE limit_id = %s AND state = 'waiting' ORDER BY position LIMIT %s
    )
    RETURNING id, run_id, request, label"""
_SLOT_COLUMNS = (
    "id, limit_id, run_id, request, label, state, queue_entry_id, granted_at, reserved_until, expires_at, freed_by"
)
# limits.models.new_slot_id in SQLite's SQL: 'slot_' and 32 hex digits from its strong random
# source (tests/services/test_slot_ids.py holds the three spellings to one format).
SQLITE_NEW_SLOT_ID = "'slot_' || lower(hex(randomblob(16)))"


def _grant_heads(limit: Limit, count: int, now: datetime, reserved_until: datetime, expires_at: datetime) -> list[str]:
    """Reserve a slot for each of the first `count` waiting entries, in queue order, set-based
    (SQLite; limits_grant_heads on PostgreSQL): the entries turn granted and the slots are
    inserted from them by the database. Raw SQL because the ORM would build a model object per
    granted row (a sweep can grant 100,000). Returns the run ids."""
    ops = connection.ops
    times = [ops.adapt_datetimefield_value(t) for t in (now, reserved_until, expires_at)]
    insert = (
        f"INSERT INTO {Slot._meta.db_table} ({_SLOT_COLUMNS}) "
        f"SELECT {SQLITE_NEW_SLOT_ID}, %s, run_id, request, label, 'reserved', id, %s, %s, %s, ''"
    )
    with connection.cursor() as cursor:
        cursor.execute(_HEADS, [times[0], limit.id, count])
        heads = cursor.fetchall()
        if heads:
            marks = ", ".join(["%s"] * len(heads))
            cursor.execute(
                f"{insert} FROM {QueueEntry._meta.db_table} WHERE id IN ({marks})",
                [limit.id, *times, *(entry_id for entry_id, *_ in heads)],
            )
        return [run_id for _, run_id, _, _ in heads]


def time_out(limit: Limit, now: datetime, changes: Changes) -> None:
    """Waits past their deadline leave the queue; their runs are woken to raise the timeout."""
    if limit.waiting_count == 0:
        return
    if not limit.is_plain:
        keys.time_out(limit, now, changes)
        return
    if server.available():
        run_ids = server.time_out(limit.id, now)
    else:
        stale = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING, deadline__lte=now)
        run_ids = list(stale.values_list("run_id", flat=True))
        if run_ids:
            stale.update(state=QueueEntry.State.TIMED_OUT, finished_at=now)
    limit.waiting_count -= len(run_ids)
    changes.timed_out += len(run_ids)
    changes.woken.extend(run_ids)


def confirm_locked(
    limit: Limit, slot: Slot, now: datetime, changes: Changes, locked: dict[int, Limit] | None = None
) -> bool:
    """A reservation confirmed within its 2 minutes turns busy (3.5); a late one lapses (3.6) and
    the freed slot goes by the grant rule over `locked` (the limits the caller locked with it: a
    group waiting for it and another limit is granted, SPEC 10.3)."""
    assert slot.reserved_until is not None, "a reserved slot has a deadline"
    if now <= slot.reserved_until:
        Slot.objects.filter(id=slot.id).update(state=Slot.State.BUSY, confirmed_at=now)
        slot.state, slot.confirmed_at = Slot.State.BUSY, now
        limit.reserved_count -= 1
        limit.busy_count += 1
        keys.pools(limit).add(slot.key, reserved=-1, busy=1)
        return True
    lapse(limit, [slot], now, changes)
    settle_all(locked or {limit.id: limit}, now, changes)
    return False


def lapse(limit: Limit, slots: list[Slot], now: datetime, changes: Changes) -> None:
    """Reservations nobody confirmed in time: free them and send their runs to the end of the
    queue with their original deadline (3.6)."""
    Slot.objects.filter(id__in=[slot.id for slot in slots]).update(state=Slot.State.LAPSED, freed_at=now)
    limit.reserved_count -= len(slots)
    for slot in slots:
        keys.pools(limit).add(slot.key, reserved=-1)
    requeue(limit, slots, now)
    changes.lapsed += len(slots)


def requeue(limit: Limit, slots: Iterable[Slot], now: datetime) -> None:
    """Send the runs of these freed reservations to the end of the queue, keeping their deadline,
    key and group (3.6)."""
    entries = []
    for slot in slots:
        original = slot.queue_entry
        assert original is not None, "a reserved slot always comes from the queue"
        entries.append(
            QueueEntry(
                limit=limit,
                run_id=slot.run_id,
                request=slot.request,
                label=slot.label,
                key=slot.key,
                group_size=slot.group_size,
                position=limit.next_position,
                enqueued_at=now,
                deadline=original.deadline,
                timeout_ms=original.timeout_ms,
            )
        )
        limit.next_position += 1
    QueueEntry.objects.bulk_create(entries)
    keys.count_entries(limit, entries, waiting=1)


def audit(
    limit: Limit,
    actor: str | None,
    action: str,
    now: datetime,
    *,
    old: str,
    new: str,
    slot_id: str = "",
    capacity_after: int | None = None,
    key: str = "",
) -> None:
    """One audit row, in the transaction of the change (SPEC 5.5). `capacity_after`: for capacity
    changes and syncs, the capacity in force afterwards, so limits.verify can tell the capacity at
    any instant from the rows."""
    AuditEvent.objects.create(
        at=now,
        actor=actor or SYSTEM_ACTOR,
        action=action,
        limit=limit,
        slot_id=slot_id,
        key=key,
        old_value=old,
        new_value=new,
        capacity_after=capacity_after,
    )
