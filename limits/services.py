"""Every write to limits, slots and the queue.

Each function runs in one transaction that locks the rows of the limits it touches
(``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite every transaction is IMMEDIATE, so writers
serialize). Limits are always locked in id order, so two limits never wait on each other and
several never deadlock. Counters on the limit row change in the same transaction as the slot and
queue rows, under that lock.

Operator actions (release with an actor, set_capacity, set_max_hold, sync_workspace) and the
sweep are durable transactions. acquire, confirm, release and end_run may run inside a caller's
transaction, so that the run layer can record a step in the same commit as the engine change;
nested, they take no savepoint (two statements less): if one raises, the caller's whole
transaction rolls back.

On PostgreSQL the hot paths run as database functions (migration 0006): acquire, confirm and a
release without an actor are one statement each (outside a caller's transaction, in autocommit:
one round trip with its commit), so the limit's row lock is held for a few
statements inside the server and the commit, never across a round trip to Python; settling a
limit (time-outs, then grants to the head of the queue) is one call. A case a function does not
handle answers 'slow' before changing anything, and the Python below goes on in the same
transaction. On SQLite every rule runs in Python. The same tests (tests/services, and the model
test of tests/model against a pure-Python model of the spec) run on both.

Runs woken by a change (granted a reservation, or timed out) are announced with the
``limits.signals.runs_woken`` signal after the transaction commits, never while a lock is held.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from limits.config import CAPACITY_HELP, Workspace, check_capacity
from limits.durations import DurationError, parse_duration
from limits.models import (
    LABEL_MAX_LENGTH,
    LIVE_SLOT_STATES,
    REQUEST_MAX_LENGTH,
    RUN_ID_MAX_LENGTH,
    AuditEvent,
    Limit,
    QueueEntry,
    Slot,
    SweepState,
    is_storable_text,
)
from limits.signals import runs_woken

RESERVATION_MS = 2 * 60 * 1000
DEFAULT_TIMEOUT_MS = 24 * 60 * 60 * 1000
GRANT_BATCH = 5_000
HISTORY_BATCH = 5_000
SYSTEM_ACTOR = "system"
SWEEP_ACTOR = "sweep"
DEPLOY_ACTOR = "deploy"

UNKNOWN_LIMIT = "unknown limit {name!r}"
UNDECLARED_LIMIT = "limit {name!r} is no longer declared in the workspace, so it cannot be acquired"
BAD_LABEL = f"label must be a string of at most {LABEL_MAX_LENGTH} characters (no NUL characters)"
BAD_RUN_ID = f"run id must be a non-empty string of at most {RUN_ID_MAX_LENGTH} characters (no NUL characters)"
BAD_REQUEST = f"request must be a non-empty string of at most {REQUEST_MAX_LENGTH} characters (no NUL characters)"
BAD_CAPACITY = "capacity {error}"
BAD_MAX_HOLD = "max hold {error}"
BAD_TIMEOUT = "timeout {error}"


class LimitsError(Exception):
    """An expected failure: the message says what was wrong, and nothing was changed."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True, slots=True)
class Acquisition:
    """What an acquire call amounts to now. `state` is 'busy' (the slot is yours), 'waiting'
    (queued; the run is woken when that changes), 'timed_out' or 'cancelled'."""

    state: Literal["busy", "waiting", "timed_out", "cancelled"]
    limit: str
    request: str
    slot_id: str | None = None
    timeout_ms: int | None = None
    deadline: datetime | None = None


@dataclass(slots=True)
class SweepReport:
    limits: int = 0
    expired: int = 0
    lapsed: int = 0
    timed_out: int = 0
    granted: int = 0
    purged: int = 0

    def found_work(self) -> bool:
        return bool(self.expired or self.lapsed or self.timed_out or self.granted or self.purged)


@dataclass(slots=True)
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    undeclared: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Changes:
    """What a locked section did to one limit: counters to save and runs to wake after commit."""

    woken: list[str] = field(default_factory=list)
    granted: int = 0
    lapsed: int = 0
    timed_out: int = 0


# --- the workflow-facing engine ---------------------------------------------------------------


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
    _check_run_id(run_id)
    request = request or uuid.uuid4().hex
    if not is_storable_text(request) or len(request) > REQUEST_MAX_LENGTH:
        raise LimitsError(BAD_REQUEST, field="request")
    label = _check_label(label)
    timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None else _parse(timeout, BAD_TIMEOUT, "timeout")
    if _in_server():
        fast = _acquire_in_server(limit_name, run_id, request, label, timeout_ms)
        if fast is not None:
            return fast
    with transaction.atomic(savepoint=False):
        outcome = _acquire_in_transaction(limit_name, run_id, request, label, timeout_ms)
    if isinstance(outcome, LimitsError):
        raise outcome  # raised out here: a nested block without a savepoint must exit cleanly
    return outcome


def confirm(slot_id: str) -> bool:
    """Turn a reserved slot busy, if its 2 minutes have not passed. A late confirm lapses the
    reservation as the sweep would (3.6) and returns False."""
    if _in_server() and is_storable_text(slot_id):
        (outcome,) = _call("SELECT limits_confirm(%s, %s)", [slot_id, timezone.now()])
        if outcome != "slow":
            return outcome == "busy"
    with transaction.atomic(savepoint=False):
        slot = _locked_slot(slot_id)
        if slot is None or slot.state != Slot.State.RESERVED:
            return False
        changes = _Changes()
        confirmed = _confirm_locked(slot.limit, slot, _clock(slot.limit), changes)
        _save_counters(slot.limit)
        _wake_on_commit(changes.woken)
        return confirmed


def release(slot_id: str, *, actor: str | None = None) -> bool:
    """Free a busy or reserved slot and hand the capacity to the head of the queue at once.

    Returns False and changes nothing for a slot already free, taken back, or unknown (safe to
    retry). With an `actor` (an operator) the release is recorded as an audit event. A released
    reservation sends its run back to the end of the queue, keeping its deadline, as a lapse does.
    """
    if not isinstance(slot_id, str):
        return False
    if _in_server() and actor is None and is_storable_text(slot_id):
        outcome, woken = _call(
            "SELECT outcome, woken FROM limits_release(%s, %s, %s)", [slot_id, timezone.now(), RESERVATION_MS]
        )
        if outcome != "slow":
            _wake_on_commit(woken)
            return outcome == "released"
    with transaction.atomic(savepoint=False):
        slot = _locked_slot(slot_id)
        if slot is None or not slot.is_live:
            return False
        limit, changes = slot.limit, _Changes()
        now = _clock(limit)
        Slot.objects.filter(id=slot.id).update(state=Slot.State.RELEASED, freed_at=now, freed_by=actor or "")
        if slot.state == Slot.State.BUSY:
            limit.busy_count -= 1
        else:
            limit.reserved_count -= 1
            _requeue(limit, [slot], now)
        _settle(limit, now, changes)
        _save_counters(limit)
        if actor is not None:
            _audit(limit, actor, AuditEvent.Action.RELEASE, now, slot_id=slot.id, old=slot.state, new="released")
        _wake_on_commit(changes.woken)
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
    _check_run_id(run_id)
    ended = 0
    with transaction.atomic(savepoint=False):
        changes = _Changes()
        ending_slots = Slot.objects.filter(run_id=run_id).filter(
            Q(state=Slot.State.RESERVED) | Q(state=Slot.State.BUSY, ends_with_run=True)
        )
        limit_ids = set(
            QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING).values_list("limit_id", flat=True)
        ) | set(ending_slots.values_list("limit_id", flat=True))
        locked = list(Limit.objects.select_for_update().filter(id__in=limit_ids).order_by("id"))
        for limit in locked:
            now = _clock(limit)
            cancelled = QueueEntry.objects.filter(limit=limit, run_id=run_id, state=QueueEntry.State.WAITING).update(
                state=QueueEntry.State.CANCELLED, finished_at=now
            )
            freed = Counter(ending_slots.filter(limit=limit).values_list("state", flat=True))
            if freed:
                ending_slots.filter(limit=limit).update(state=Slot.State.RUN_ENDED, freed_at=now)
            limit.waiting_count -= cancelled
            limit.reserved_count -= freed[Slot.State.RESERVED.value]
            limit.busy_count -= freed[Slot.State.BUSY.value]
            _settle(limit, now, changes)
            _save_counters(limit)
            ended += cancelled + freed.total()
        _wake_on_commit(changes.woken)
    return ended


# --- operator actions ---------------------------------------------------------------------------


def set_capacity(name: str, value: int | None, *, actor: str | None = None) -> Limit:
    """Override a limit's capacity (1..100000), or reset it to the declared value with None.
    Raising it grants waiting runs at once; lowering it takes no slot back."""
    if value is not None:
        try:
            check_capacity(value)
        except ValueError as error:
            raise LimitsError(BAD_CAPACITY.format(error=error), field="capacity") from None
    with transaction.atomic(durable=True):
        limit, changes = _locked_limit(name), _Changes()
        now = _clock(limit)
        old = limit.capacity
        limit.capacity_override = value
        limit.save(update_fields=["capacity_override", "updated_at"])
        _settle(limit, now, changes)
        _save_counters(limit)
        new = f"{limit.capacity} (declared)" if value is None else str(limit.capacity)
        _audit(limit, actor, AuditEvent.Action.CAPACITY, now, old=str(old), new=new, capacity_after=limit.capacity)
        _wake_on_commit(changes.woken)
        return limit


def set_max_hold(name: str, value: int | str | None, *, actor: str | None = None) -> Limit:
    """Override a limit's max hold (same values as the config's max_hold), or reset it with None.
    Only slots granted afterwards get the new value: a slot's expiry is fixed at grant."""
    ms = None if value is None else _parse(value, BAD_MAX_HOLD, "max_hold")
    with transaction.atomic(durable=True):
        limit = _locked_limit(name)
        now = _clock(limit)
        old = limit.max_hold_ms
        limit.max_hold_override_ms = ms
        limit.save(update_fields=["max_hold_override_ms", "last_event_at", "updated_at"])
        new = f"{limit.max_hold_ms} (declared)" if ms is None else str(limit.max_hold_ms)
        _audit(limit, actor, AuditEvent.Action.MAX_HOLD, now, old=str(old), new=new)
        return limit


def sync_workspace(workspace: Workspace, *, actor: str = DEPLOY_ACTOR) -> SyncReport:
    """Bring the declared values of every limit in line with the workspace config.

    Operator overrides survive (a deploy does not clear them). Limits that left the config are
    kept and marked undeclared; a limit that comes back is declared again. A declared capacity
    that rose grants waiting runs at once.
    """
    report = SyncReport()
    with transaction.atomic(durable=True):
        existing = {limit.name: limit for limit in Limit.objects.select_for_update().order_by("id")}
        for name, spec in sorted(workspace.limits.items()):
            limit = existing.get(name)
            if limit is None:
                Limit.objects.create(name=name, declared_capacity=spec.capacity, declared_max_hold_ms=spec.max_hold_ms)
                report.created.append(name)
                continue
            before = (limit.declared, limit.declared_capacity, limit.declared_max_hold_ms)
            after = (True, spec.capacity, spec.max_hold_ms)
            if before == after:
                continue
            limit.declared, limit.declared_capacity, limit.declared_max_hold_ms = after
            limit.save(update_fields=["declared", "declared_capacity", "declared_max_hold_ms", "updated_at"])
            now, changes = _clock(limit), _Changes()
            _settle(limit, now, changes)
            _save_counters(limit)
            _wake_on_commit(changes.woken)
            _audit(
                limit,
                actor,
                AuditEvent.Action.SYNC,
                now,
                old=_declared_text(*before),
                new=_declared_text(*after),
                capacity_after=limit.capacity,
            )
            report.updated.append(name)
        for name, limit in existing.items():
            if name not in workspace.limits and limit.declared:
                limit.declared = False
                now = _clock(limit)
                limit.save(update_fields=["declared", "last_event_at", "updated_at"])
                _audit(
                    limit,
                    actor,
                    AuditEvent.Action.SYNC,
                    now,
                    old="declared",
                    new="undeclared",
                    capacity_after=limit.capacity,
                )
                report.undeclared.append(name)
    return report


# --- the sweep ----------------------------------------------------------------------------------


def sweep() -> SweepReport:
    """One pass of the background sweep (every 15 s). Idempotent, and safe to run twice at once.

    1. Find the limits with work, from partial indexes and the limit counters (a constant number
       of queries, whatever the size of the tables): busy slots past their expiry, reservations
       past their 2 minutes, waits past their deadline, and free capacity with runs waiting.
    2. For each such limit, in one transaction under its row lock:
       a. take back busy slots past expiry (one audit event for the lot);
       b. lapse reservations: the slot is freed and its run goes to the end of the queue with
          its original deadline;
       c. time out waits past their deadline;
       d. grant the free capacity to the head of the queue.
    Every step re-reads its rows under the lock, so a second sweep running at once finds them
    already done and changes nothing.
    3. Delete history older than STACKBONE_HISTORY_RETENTION (default 7 days): freed slots and
       finished queue entries, a bounded batch of each per pass.
    4. Record when it ran (limits.models.SweepState), for /healthz.
    """
    now, report = timezone.now(), SweepReport()
    limit_ids = set(
        Slot.objects.filter(state=Slot.State.BUSY, expires_at__lte=now).values_list("limit_id", flat=True).distinct()
    )
    limit_ids |= set(
        Slot.objects.filter(state=Slot.State.RESERVED, reserved_until__lte=now)
        .values_list("limit_id", flat=True)
        .distinct()
    )
    limit_ids |= set(
        QueueEntry.objects.filter(state=QueueEntry.State.WAITING, deadline__lte=now)
        .values_list("limit_id", flat=True)
        .distinct()
    )
    limit_ids |= set(
        Limit.objects.filter(waiting_count__gt=0)
        .alias(effective_capacity=Coalesce("capacity_override", "declared_capacity"))
        .filter(effective_capacity__gt=F("busy_count") + F("reserved_count"))
        .values_list("id", flat=True)
    )
    for limit_id in sorted(limit_ids):
        with transaction.atomic(durable=True):
            limit = Limit.objects.select_for_update().get(id=limit_id)
            now, changes = _clock(limit), _Changes()
            expired = Slot.objects.filter(limit=limit, state=Slot.State.BUSY, expires_at__lte=now).update(
                state=Slot.State.EXPIRED, freed_at=now, freed_by=SWEEP_ACTOR
            )
            if expired:
                limit.busy_count -= expired
                _audit(limit, SWEEP_ACTOR, AuditEvent.Action.EXPIRE, now, old="", new=f"{expired} slot(s)")
            lapsed = list(
                Slot.objects.filter(limit=limit, state=Slot.State.RESERVED, reserved_until__lte=now)
                .select_related("queue_entry")
                .order_by("queue_entry__position")
            )
            if lapsed:
                _lapse(limit, lapsed, now, changes)
            _time_out(limit, now, changes)
            _settle(limit, now, changes)
            _save_counters(limit)
            _wake_on_commit(changes.woken)
        report.limits += 1
        report.expired += expired
        report.lapsed += changes.lapsed
        report.timed_out += changes.timed_out
        report.granted += changes.granted
    report.purged = _purge_history(now - timedelta(milliseconds=history_retention_ms()))
    if not SweepState.objects.filter(id=1).update(last_run_at=now, last_report=asdict(report)):
        SweepState.objects.get_or_create(id=1, defaults={"last_run_at": now, "last_report": asdict(report)})
    return report


# --- the locked sections ------------------------------------------------------------------------


def _acquire_in_server(limit_name: str, run_id: str, request: str, label: str, timeout_ms: int) -> Acquisition | None:
    """limits_acquire (PostgreSQL): one round trip for a new request that is granted at once or
    queued behind full capacity, and for a request that holds a live slot (a reservation in time
    is confirmed). None for the rest, having changed nothing: _acquire_in_transaction decides."""
    outcome, name, slot_id, deadline = _call(
        "SELECT outcome, limit_name, slot_id, deadline FROM limits_acquire(%s, %s, %s, %s, %s, %s)",
        [limit_name, run_id, request, label, timeout_ms, timezone.now()],
    )
    if outcome == "busy":
        return Acquisition("busy", name, request, slot_id=slot_id)
    if outcome == "waiting":
        return Acquisition("waiting", name, request, timeout_ms=timeout_ms, deadline=deadline)
    return None


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
    now = _clock(limit)
    if limit.waiting_count == 0 and limit.in_use < limit.capacity:
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
        _save_counters(limit)
        return Acquisition("busy", limit.name, request, slot_id=slot.id)
    deadline = now + timedelta(milliseconds=timeout_ms)
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
    changes = _Changes()
    _settle(limit, now, changes)
    mine = Slot.objects.filter(request=request, state=Slot.State.RESERVED).first() if changes.granted else None
    if mine is not None:
        changes.woken.remove(run_id)
        _confirm_locked(limit, mine, now, changes)
    _save_counters(limit)
    _wake_on_commit(changes.woken)
    if mine is not None:
        return Acquisition("busy", limit.name, request, slot_id=mine.id)
    return Acquisition("waiting", limit.name, request, timeout_ms=timeout_ms, deadline=deadline)


def history_retention_ms() -> int:
    """settings.STACKBONE_HISTORY_RETENTION in ms (checked at start by limits.checks)."""
    return parse_duration(settings.STACKBONE_HISTORY_RETENTION, maximum=None)


def _purge_history(cutoff: datetime) -> int:
    """Delete up to HISTORY_BATCH freed slots and finished queue entries older than `cutoff`.
    Slots go first: an entry is kept while a slot granted from it remains. History rows never
    change, so this needs no lock, and two sweeps at once delete each row once."""
    slot_ids = list(Slot.objects.filter(freed_at__lt=cutoff).values_list("id", flat=True)[:HISTORY_BATCH])
    if slot_ids:
        Slot.objects.filter(id__in=slot_ids).delete()
    # `exclude(state="waiting")` is the partial index's condition: without it PostgreSQL scans
    # every entry (a million waiting ones make an idle sweep 150 ms).
    entries = QueueEntry.objects.exclude(state=QueueEntry.State.WAITING).filter(
        finished_at__lt=cutoff, slot__isnull=True
    )
    entry_ids = list(entries.values_list("id", flat=True)[:HISTORY_BATCH])
    if entry_ids:
        entries.filter(id__in=entry_ids).delete()
    return len(slot_ids) + len(entry_ids)


def _settle(limit: Limit, now: datetime, changes: _Changes) -> None:
    """Hand free capacity to the queue: time out the waits past their deadline, then reserve a
    slot for each run at the head, in queue order, while busy + reserved < capacity. Must run
    under the limit's lock; the caller saves the counters."""
    if limit.waiting_count == 0 or limit.in_use >= limit.capacity:
        return
    if _in_server():
        _save_counters(limit)
        timed_out, granted = _call("SELECT * FROM limits_settle(%s, %s, %s)", [limit.id, now, RESERVATION_MS])
        limit.waiting_count -= len(timed_out) + len(granted)
        limit.reserved_count += len(granted)
        changes.timed_out += len(timed_out)
        changes.granted += len(granted)
        changes.woken.extend(timed_out + granted)
        return
    _time_out(limit, now, changes)
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
# 128 random bits from SQLite's strong random source, like new_slot_id's 144.
_RANDOM_SLOT_ID = "'slot_' || lower(hex(randomblob(16)))"


def _grant_heads(limit: Limit, count: int, now: datetime, reserved_until: datetime, expires_at: datetime) -> list[str]:
    """Reserve a slot for each of the first `count` waiting entries, in queue order, set-based:
    the entries turn granted and the slots are inserted from them by the database, not built
    row by row in Python. Returns the run ids. (SQLite; on PostgreSQL, limits_grant_heads.)"""
    ops = connection.ops
    times = [ops.adapt_datetimefield_value(t) for t in (now, reserved_until, expires_at)]
    insert = (
        f"INSERT INTO {Slot._meta.db_table} ({_SLOT_COLUMNS}) "
        f"SELECT {_RANDOM_SLOT_ID}, %s, run_id, request, label, 'reserved', id, %s, %s, %s, ''"
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


def _time_out(limit: Limit, now: datetime, changes: _Changes) -> None:
    """Waits past their deadline leave the queue; their runs are woken to raise the timeout."""
    if limit.waiting_count == 0:
        return
    if _in_server():
        (run_ids,) = _call("SELECT limits_time_out(%s, %s)", [limit.id, now])
        limit.waiting_count -= len(run_ids)
        changes.timed_out += len(run_ids)
        changes.woken.extend(run_ids)
        return
    stale = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING, deadline__lte=now)
    run_ids = list(stale.values_list("run_id", flat=True))
    if run_ids:
        stale.update(state=QueueEntry.State.TIMED_OUT, finished_at=now)
        limit.waiting_count -= len(run_ids)
        changes.timed_out += len(run_ids)
        changes.woken.extend(run_ids)


def _confirm_locked(limit: Limit, slot: Slot, now: datetime, changes: _Changes) -> bool:
    if now <= slot.reserved_until:
        Slot.objects.filter(id=slot.id).update(state=Slot.State.BUSY, confirmed_at=now)
        slot.state, slot.confirmed_at = Slot.State.BUSY, now
        limit.reserved_count -= 1
        limit.busy_count += 1
        return True
    _lapse(limit, [slot], now, changes)
    _settle(limit, now, changes)
    return False


def _lapse(limit: Limit, slots: list[Slot], now: datetime, changes: _Changes) -> None:
    """Reservations nobody confirmed in time: free them and send their runs to the end of the
    queue with their original deadline (3.6)."""
    Slot.objects.filter(id__in=[slot.id for slot in slots]).update(state=Slot.State.LAPSED, freed_at=now)
    limit.reserved_count -= len(slots)
    _requeue(limit, slots, now)
    changes.lapsed += len(slots)


def _requeue(limit: Limit, slots: Iterable[Slot], now: datetime) -> None:
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
                position=limit.next_position,
                enqueued_at=now,
                deadline=original.deadline,
                timeout_ms=original.timeout_ms,
            )
        )
        limit.next_position += 1
    QueueEntry.objects.bulk_create(entries)
    limit.waiting_count += len(entries)


def _previous_outcome(request: str) -> Acquisition | None:
    """What became of an earlier acquire call with this request, confirming a reservation that
    waits for it. None for a new request."""
    if not _request_seen(request):
        return None
    slots = list(Slot.objects.filter(request=request).select_related("limit", "queue_entry"))
    live = next((slot for slot in slots if slot.is_live), None)
    if live is not None and live.state == Slot.State.RESERVED:
        locked = _locked_slot(live.id)
        if locked is None or locked.state != Slot.State.RESERVED:
            return _previous_outcome(request)
        changes = _Changes()
        confirmed = _confirm_locked(locked.limit, locked, _clock(locked.limit), changes)
        _save_counters(locked.limit)
        _wake_on_commit(changes.woken)
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
        state = {"waiting": "waiting", "timed_out": "timed_out", "cancelled": "cancelled"}[entry.state]
        return Acquisition(state, entry.limit.name, request, timeout_ms=entry.timeout_ms, deadline=entry.deadline)  # type: ignore[arg-type]
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


def _locked_limit(name: str) -> Limit:
    if not is_storable_text(name):
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    try:
        return Limit.objects.select_for_update().get(name=name)
    except Limit.DoesNotExist:
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit") from None


def _locked_slot(slot_id: str) -> Slot | None:
    """Lock the slot's limit, then read the slot: every change of a slot happens under its
    limit's lock, so the state read here holds until commit."""
    if not is_storable_text(slot_id):
        return None  # no slot id holds a NUL or a lone surrogate; the database could not compare it
    limit_id = Slot.objects.filter(id=slot_id).values_list("limit_id", flat=True).first()
    if limit_id is None:
        return None
    limit = Limit.objects.select_for_update().get(id=limit_id)
    slot = Slot.objects.select_related("queue_entry").get(id=slot_id)
    slot.limit = limit
    return slot


def _in_server() -> bool:
    """Whether the hot rules run as the database functions of migration 0006 (PostgreSQL)."""
    return connection.vendor == "postgresql"


def _call(sql: str, params: list[object]) -> tuple:  # type: ignore[type-arg]
    """One row of one engine function (PostgreSQL). Outside a transaction the statement is its
    own (autocommit): one round trip in all. A function that answers 'slow' changed nothing, so
    the Python path may then start its own transaction."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _clock(limit: Limit) -> datetime:
    """The time of a change to a locked limit: timezone.now(), but never earlier than the limit's
    last change, so one limit's history follows its lock order (the database functions read the
    clock before they take the lock and apply the same rule)."""
    now = timezone.now()
    if limit.last_event_at is not None and limit.last_event_at > now:
        now = limit.last_event_at
    limit.last_event_at = now
    return now


def _save_counters(limit: Limit) -> None:
    limit.save(update_fields=["busy_count", "reserved_count", "waiting_count", "next_position", "last_event_at"])


def _wake_on_commit(run_ids: list[str]) -> None:
    if run_ids:
        woken = list(dict.fromkeys(run_ids))
        transaction.on_commit(lambda: runs_woken.send(sender=Limit, run_ids=woken))


def _audit(
    limit: Limit,
    actor: str | None,
    action: str,
    now: datetime,
    *,
    old: str,
    new: str,
    slot_id: str = "",
    capacity_after: int | None = None,
) -> None:
    """`capacity_after`: for capacity changes and syncs, the capacity in force afterwards, so
    limits.verify can tell the capacity at any instant from the rows."""
    AuditEvent.objects.create(
        at=now,
        actor=actor or SYSTEM_ACTOR,
        action=action,
        limit=limit,
        slot_id=slot_id,
        old_value=old,
        new_value=new,
        capacity_after=capacity_after,
    )


def _declared_text(declared: bool, capacity: int, max_hold_ms: int) -> str:
    return f"capacity {capacity}, max hold {max_hold_ms} ms" + ("" if declared else ", undeclared")


def _parse(value: object, message: str, field_name: str) -> int:
    try:
        return parse_duration(value)
    except DurationError as error:
        raise LimitsError(message.format(error=error), field=field_name) from None


def _check_label(label: object) -> str:
    if label is None:
        return ""
    if not is_storable_text(label) or len(label) > LABEL_MAX_LENGTH:
        raise LimitsError(BAD_LABEL, field="label")
    return label


def _check_run_id(run_id: object) -> None:
    if not is_storable_text(run_id) or not run_id or len(run_id) > RUN_ID_MAX_LENGTH:
        raise LimitsError(BAD_RUN_ID, field="run_id")


__all__ = [
    "CAPACITY_HELP",
    "DEFAULT_TIMEOUT_MS",
    "LIVE_SLOT_STATES",
    "RESERVATION_MS",
    "Acquisition",
    "LimitsError",
    "SweepReport",
    "SyncReport",
    "acquire",
    "confirm",
    "end_run",
    "release",
    "set_capacity",
    "set_max_hold",
    "sweep",
    "sync_workspace",
]
