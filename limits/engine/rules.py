"""What every locked section shares: taking the locks, the clock, writing the counters, the audit
row, waking runs after commit, and the grant (`settle_all`: the rules of limits.engine.grant). The
Python engine's (limits.engine.python); the PostgreSQL engine does all of it inside its functions.

Every function here runs inside a transaction that holds the lock of the limit it is given
(`locked_limit`, `locked_by_name`, or keys.lock: SELECT ... FOR NO KEY UPDATE in id order). The
counters on the limit row change in memory beside the rows they count; `save_counters` writes
them once, at the end of the locked section. Runs to wake are collected in `Changes` and
announced after commit (`wake_on_commit`), never while a lock is held.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import F

from limits.engine import grant, keys, woken
from limits.engine.errors import UNKNOWN_LIMIT, LimitsError
from limits.engine.results import DEFAULT_TIMEOUT_MS, RESERVATION_MS, Changes
from limits.models import CAPACITY_IN_FORCE, AuditEvent, Limit, is_storable_text
from stackbone.plumbing import clock as box_clock

__all__ = ["DEFAULT_TIMEOUT_MS", "RESERVATION_MS", "Changes"]  # their home is limits.engine.results
GRANT_BATCH = grant.GRANT_BATCH
SYSTEM_ACTOR = "system"
SWEEP_ACTOR = "sweep"
DEPLOY_ACTOR = "deploy"

# The capacity in force in a query (SPEC 5.2): its home is limits.models (CAPACITY_IN_FORCE).
EFFECTIVE_CAPACITY = CAPACITY_IN_FORCE
# Limit.room > 0 as a filter (with EFFECTIVE_CAPACITY aliased as effective_capacity).
HAS_FREE_CAPACITY = {"effective_capacity__gt": F("busy_count") + F("reserved_count"), "paused_at__isnull": True}


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
KEYED_COUNTER_FIELDS = [
    "keyed_busy_count",
    "keyed_reserved_count",
    "keyed_waiting_count",
    "group_waiting_count",
    "nokey_fair_pass",  # the no-key runs' place in a fair limit's turns, beside their pool's figures
]


def clock_all(locked: dict[int, Limit]) -> datetime:
    """One time for a change to several locked limits: the latest of their clocks (`clock`)."""
    reading = box_clock.now()
    now = max(clock(limit, reading) for limit in locked.values())
    for limit in locked.values():
        limit.last_event_at = now
    return now


def settle_all(locked: dict[int, Limit], now: datetime, changes: Changes) -> None:
    """Hand the free capacity of the locked limits to their queues: the grant rule of
    limits.engine.grant (`settle`) over them all, so a group is granted on all its limits at once.
    The Python engine's grant; the PostgreSQL engine's is limits_grant, inside its functions."""
    if not any(limit.waiting_count for limit in locked.values()):
        return
    grant.settle(locked, now, changes)


def save_all(locked: dict[int, Limit]) -> None:
    for limit in locked.values():
        save_counters(limit)


def settle_save_wake(locked: dict[int, Limit], now: datetime, changes: Changes) -> None:
    """The end of a change to locked limits: their free capacity granted to the queues
    (settle_all), their counters written once (save_all), the runs granted woken after the commit
    (wake_on_commit)."""
    settle_all(locked, now, changes)
    save_all(locked)
    wake_on_commit(changes.woken)


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


wake_on_commit = woken.wake_on_commit  # announced after commit, never while a lock is held


def locked_limit(name: str) -> Limit:
    if not is_storable_text(name):
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    try:
        return Limit.objects.locked().get(name=name)
    except Limit.DoesNotExist:
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit") from None


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
