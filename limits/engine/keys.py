"""What the grant rules stand on, one Python track for every case (SPEC 3-5, 9, 10, 12.3, 13.2;
SQLite runs them, and they are the readable definition of limits/sql/engine.sql, held to it by the
model test on both databases): the key pools and their room (`Pools`, `Pools.has_room`), a fair
limit's turns, the locks, joining the queue, time-outs, the owed-run barrier, confirm, lapse and
requeue. The grant itself is limits.engine.grant (`settle`: time-outs, then oldest first, all or
nothing for a group, passed-over and owed runs; its docstring says what must never happen), and
why a waiting run is not granted (SPEC 6.5) is limits.engine.waiting (`why_waiting`): both are
built on this module, which imports neither.

Locks: every function here runs under the row locks of the limits it is given, taken in id order
by `lock` (with the limits of every group waiting in their queues), so two acquisitions of
crossing limits (A+B and B+A) never deadlock. A group whose limits are not all locked is left
waiting (the next release of one of its limits, or the sweep within 15 s, takes it up).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from fractions import Fraction

from django.db.models import Count, F, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from limits.config import BOX_NAME
from limits.engine.results import WHOLE_RUN_SUFFIX, Changes
from limits.models import LIVE_SLOT_STATES, Limit, LimitKey, QueueEntry, Slot, pool_size
from stackbone.plumbing import clock as box_clock

OWED_AFTER_MS = 2 * 60 * 1000  # SPEC 10.4: passed over and waiting longer than this: owed
MAX_GROUP = 3  # limits a caller names; the box bound (SPEC 12.2) may come on top


class Pools:
    """The key pools of one locked limit: rows read when first needed, changed in memory with the
    limit's counters, written by `save` (rules.save_counters). The no-key pool has no row: its
    figures are the limit's counters minus the keyed ones."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self.rows: dict[str, LimitKey | None] = {}
        self.dirty: set[str] = set()

    def row(self, key: str, *, create: bool = False) -> LimitKey | None:
        row = self.rows.get(key)
        if row is None and (key not in self.rows or create):
            row = LimitKey.objects.filter(limit=self.limit, key=key).first()
            if row is None and create:
                row = LimitKey.objects.create(limit=self.limit, key=key)
            self.rows[key] = row
        return row

    def size(self, key: str) -> int | None:
        """The pool's size in force: the key's own override, else the limit's per_key; None when
        only the total applies (SPEC 9.1, 9.4)."""
        row = self.row(key) if key else None
        return pool_size(None if row is None else row.pool_override, self.limit.per_key)

    def in_use(self, key: str) -> int:
        if key:
            row = self.row(key)
            return 0 if row is None else row.in_use
        limit = self.limit
        return limit.in_use - limit.keyed_busy_count - limit.keyed_reserved_count

    def has_room(self, key: str) -> bool:
        size = self.size(key)
        return size is None or self.in_use(key) < size

    def waiting(self, key: str) -> int:
        if key:
            row = self.row(key)
            return 0 if row is None else row.waiting_count
        return self.limit.waiting_count - self.limit.keyed_waiting_count

    # --- a fair limit's turns (SPEC 13.2: stride scheduling) ----------------------------------

    def weight(self, key: str) -> int:
        row = self.row(key) if key else None
        return 1 if row is None else row.weight

    def fair_pass(self, key: str) -> int:
        """The key's pass: its place in the limit's turns (the no-key runs' on the limit row)."""
        if not key:
            return self.limit.nokey_fair_pass
        row = self.row(key)
        return 0 if row is None else row.fair_pass

    def set_pass(self, key: str, value: int) -> None:
        if not key:
            self.limit.nokey_fair_pass = value
            return
        row = self.row(key, create=True)
        assert row is not None
        row.fair_pass = value
        self.dirty.add(key)

    def lowest_active_pass(self, leaving_out: str) -> int:
        """The smallest pass among the keys holding or waiting on the limit, but `leaving_out`
        (0 when none): where a key that had nothing enters the turns (13.2). One index probe
        (limitkey_active_pass) over the rows not in memory, then the rows changed in memory."""
        limit = self.limit
        active = Q(busy_count__gt=0) | Q(reserved_count__gt=0) | Q(waiting_count__gt=0)
        stored = LimitKey.objects.filter(active, limit=limit).exclude(key__in=[leaving_out, *self.rows])
        found = [p for p in [stored.order_by("fair_pass").values_list("fair_pass", flat=True).first()] if p is not None]
        found += [
            row.fair_pass
            for key, row in self.rows.items()
            if row is not None and key != leaving_out and row.in_use + row.waiting_count > 0
        ]
        if leaving_out and self.in_use("") + self.waiting(""):
            found.append(limit.nokey_fair_pass)
        return min(found, default=0)

    def add(self, key: str, *, busy: int = 0, reserved: int = 0, waiting: int = 0) -> None:
        """Count a change of the key's slots or entries (the caller changes the limit's own
        counters)."""
        if not key:
            return
        row = self.row(key, create=True)
        assert row is not None
        row.busy_count += busy
        row.reserved_count += reserved
        row.waiting_count += waiting
        self.limit.keyed_busy_count += busy
        self.limit.keyed_reserved_count += reserved
        self.limit.keyed_waiting_count += waiting
        self.dirty.add(key)

    def full_keys(self) -> set[str]:
        """Keys whose pool has no room now ("" for the no-key pool): a query on the pool rows,
        then the rows changed in memory."""
        limit = self.limit
        size = Coalesce("pool_override", limit.per_key) if limit.per_key is not None else F("pool_override")
        full = set(
            LimitKey.objects.filter(limit=limit)
            .alias(size=size)
            .filter(size__isnull=False, size__lte=F("busy_count") + F("reserved_count"))
            .values_list("key", flat=True)
        )
        for key, row in self.rows.items():
            if row is not None:
                full.discard(key)
                if not self.has_room(key):
                    full.add(key)
        if not self.has_room(""):
            full.add("")
        return full

    def save(self) -> None:
        """Write the changed pool rows, each with its head read again from the queue (the entries
        are written by now): the position of its oldest waiting entry."""
        for key in self.dirty:
            row = self.rows[key]
            assert row is not None
            oldest = QueueEntry.objects.filter(limit_id=row.limit_id, key=key, state=QueueEntry.State.WAITING).order_by(
                "position"
            )
            LimitKey.objects.filter(id=row.id).update(
                busy_count=row.busy_count,
                reserved_count=row.reserved_count,
                waiting_count=row.waiting_count,
                fair_pass=row.fair_pass,
                head=Subquery(oldest.values("position")[:1]),
            )
        self.dirty.clear()


def box_base() -> int | None:
    """The base of the box's run concurrency in force (SPEC 12.1, 12.5), None without one."""
    found = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).values_list(
        "per_key_override", "declared_per_key"
    )
    row = found.first()
    return None if row is None else row[0] if row[0] is not None else row[1]


def whole_run_room(limit: Limit, request: str, base: int | None) -> bool:
    """SPEC 12.3: a limit serves at most `base` runs for their whole run at once (its slots of
    acquisitions "<run>:start", busy or reserved), whatever its capacity or total; the box
    itself is capped by its ceiling and per-workflow pools instead. True without a box, or for
    an acquisition that is not a whole run's."""
    if base is None or limit.is_box or not request.endswith(WHOLE_RUN_SUFFIX):
        return True
    held = Slot.objects.filter(limit=limit, state__in=LIVE_SLOT_STATES, request__endswith=WHOLE_RUN_SUFFIX)
    return held.count() < base


PASS_STRIDE = 232_792_560  # lcm(1..20): a turn in pass units, so weights up to 20 stride exactly


def stride(weight: int) -> int:
    """What one grant adds to a key's pass (SPEC 13.2: 1 / weight of a turn), in whole units so
    both engines add the same: engine.sql's limits_stride."""
    return PASS_STRIDE // weight


def enter_turns(limit: Limit, key: str) -> None:
    """SPEC 13.2: a key of a fair limit that starts holding or waiting when it had nothing held or
    waiting there enters the turns at the smallest pass among the keys holding or waiting (0 if
    none): it neither jumps the whole line nor waits behind the backlog. Before its counters
    change."""
    found = pools(limit)
    if limit.is_fair and found.in_use(key) == 0 and found.waiting(key) == 0:
        found.set_pass(key, found.lowest_active_pass(key))


def take_turn(limit: Limit, key: str) -> int | None:
    """SPEC 13.2: a grant to this key of a fair limit adds 1 / weight of a turn to its pass.
    The pass it was ranked at (kept on the slot, for limits verify), None on a fifo limit."""
    if not limit.is_fair:
        return None
    found = pools(limit)
    ranked = found.fair_pass(key)
    found.set_pass(key, ranked + stride(found.weight(key)))
    return ranked


def restart_turns(limit: Limit) -> None:
    """A switch between fifo and fair (an operator's, or a deploy's of the share in force) starts
    every key's turns afresh, all at pass 0 (docs/concurrency.md). Before the limit's pools are
    read in this locked section."""
    LimitKey.objects.filter(limit=limit).exclude(fair_pass=0).update(fair_pass=0)
    limit.nokey_fair_pass = 0
    limit.__dict__.pop("_pools", None)


def fair_shares(limit: Limit, keys: Iterable[str]) -> dict[str, tuple[bool, Fraction, int]]:
    """SPEC 13.2's order of these keys of a fair limit: (holding at least its min, (busy +
    reserved) / weight, pass), smallest first. The no-key pool ('') has weight 1 and min 0."""
    keys = list(keys)
    rows = pools(limit).rows
    missing = [k for k in keys if k and k not in rows]
    if missing:
        rows |= dict.fromkeys(missing) | {row.key: row for row in LimitKey.objects.filter(limit=limit, key__in=missing)}
    found = {}
    for key in keys:
        row = rows.get(key) if key else None
        weight, minimum = (row.weight, row.minimum) if row is not None else (1, 0)
        in_use = pools(limit).in_use(key)
        found[key] = (in_use >= minimum, Fraction(in_use, weight), pools(limit).fair_pass(key))
    return found


def pools(limit: Limit) -> Pools:
    """The Pools of this locked limit object (one per object, so changes add up)."""
    found: Pools | None = limit.__dict__.get("_pools")
    if found is None:
        found = limit.__dict__["_pools"] = Pools(limit)
    return found


# --- locks ---------------------------------------------------------------------------------------


def partners(limit_ids: Iterable[int]) -> set[int]:
    """The limits of every group waiting in, or reserved from, these limits, and of every group
    waiting in the limits of those reservations (read without locks: `lock` takes them all in id
    order). A released or lapsed reservation frees each limit of its group, so the groups waiting
    in those limits can be granted in the same transaction, not at the next sweep.

    Then, transitively, the limits of the groups waiting in any limit so found where a run passed
    over waits: a grant here may give that run its slots, and the capacity its limit held for it
    (10.4) goes to the groups behind it, which can be granted only with all their limits locked
    (else they would wait with nothing stopping them until the next sweep)."""
    ids = set(limit_ids)
    if not ids:
        return set()
    reserved = Slot.objects.filter(limit_id__in=ids, state=Slot.State.RESERVED, group_size__gt=1)
    freed = set(
        Slot.objects.filter(request__in=reserved.values("request"), state=Slot.State.RESERVED).values_list(
            "limit_id", flat=True
        )
    )
    found = _waiting_groups_limits(ids | freed) | freed
    checked = ids | freed
    while new := found - checked:
        checked |= new
        holding = QueueEntry.objects.filter(
            limit_id__in=new, state=QueueEntry.State.WAITING, passed_over_at__isnull=False
        ).values_list("limit_id", flat=True)
        found |= _waiting_groups_limits(set(holding))
    return found


def _waiting_groups_limits(limit_ids: set[int]) -> set[int]:
    """The limits of every group waiting in these limits."""
    if not limit_ids:
        return set()
    waiting = QueueEntry.objects.filter(limit_id__in=limit_ids, state=QueueEntry.State.WAITING, group_size__gt=1)
    return set(
        QueueEntry.objects.filter(request__in=waiting.values("request"), state=QueueEntry.State.WAITING).values_list(
            "limit_id", flat=True
        )
    )


def lock(limit_ids: Iterable[int]) -> dict[int, Limit]:
    """Lock these limits and their groups' other limits, in id order; {id: locked limit}."""
    ids = set(limit_ids)
    if (
        Limit.objects.filter(id__in=ids, group_waiting_count__gt=0).exists()
        or Slot.objects.filter(limit_id__in=ids, state=Slot.State.RESERVED, group_size__gt=1).exists()
    ):
        ids |= partners(ids)
    return {limit.id: limit for limit in Limit.objects.locked().filter(id__in=ids).order_by("id")}


# --- joining and leaving the queue ---------------------------------------------------------------


def count_entries(limit: Limit, entries: Iterable[QueueEntry], *, waiting: int) -> None:
    """Entries joined (waiting=+1) or left (-1) a locked limit's queue: its counters and pools."""
    for entry in entries:
        limit.waiting_count += waiting
        pools(limit).add(entry.key, waiting=waiting)
        if entry.group_size > 1:
            limit.group_waiting_count += waiting


def count_slots_freed(limit: Limit, slots: Iterable[Slot]) -> None:
    """Busy or reserved slots of a locked limit were freed: its counters and pools."""
    for slot in slots:
        if slot.state == Slot.State.BUSY:
            limit.busy_count -= 1
            pools(limit).add(slot.key, busy=-1)
        else:
            limit.reserved_count -= 1
            pools(limit).add(slot.key, reserved=-1)


def time_out(limit: Limit, now: datetime, changes: Changes, locked: dict[int, Limit] | None = None) -> None:
    """Waits past their deadline leave the queue (3.3). Single entries set-based (a sweep may time
    out 100,000 of them), counted by key for their pools. A group's entries share their deadline
    and leave every queue together: only when all their limits are `locked`; otherwise they wait
    for a settle that locks them all (the sweep's does)."""
    if limit.waiting_count == 0:
        return
    stale = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING, deadline__lte=now)
    singles = stale.filter(group_size=1)
    single_runs = list(singles.values_list("run_id", "key"))
    if single_runs:
        singles.update(state=QueueEntry.State.TIMED_OUT, finished_at=now)
        limit.waiting_count -= len(single_runs)
        for key, count in Counter(key for _, key in single_runs if key).items():
            pools(limit).add(key, waiting=-count)
    leaving: list[QueueEntry] = []
    group_requests = set(stale.filter(group_size__gt=1).values_list("request", flat=True))
    if group_requests and locked is not None:
        groups: dict[str, list[QueueEntry]] = {}
        for entry in QueueEntry.objects.filter(request__in=group_requests, state=QueueEntry.State.WAITING):
            groups.setdefault(entry.request, []).append(entry)
        for entries in groups.values():
            if all(entry.limit_id in locked for entry in entries):
                leaving.extend(entries)
    if leaving:
        QueueEntry.objects.filter(id__in=[entry.id for entry in leaving]).update(
            state=QueueEntry.State.TIMED_OUT, finished_at=now
        )
        for entry in leaving:
            count_entries(limit if locked is None else locked[entry.limit_id], [entry], waiting=-1)
    changes.timed_out += len(single_runs) + len(leaving)
    changes.woken.extend(dict.fromkeys([*(run_id for run_id, _ in single_runs), *(e.run_id for e in leaving)]))


# --- owed runs (10.4) ----------------------------------------------------------------------------


def owed_barrier(limit: Limit, now: datetime) -> QueueEntry | None:
    """The oldest owed run waiting for this limit (10.4): passed over (on any of its limits: the
    mark is on all its entries), and waiting more than OWED_AFTER_MS. No younger run of the limit
    is granted while it waits."""
    return (
        QueueEntry.objects.filter(
            limit=limit,
            state=QueueEntry.State.WAITING,
            passed_over_at__isnull=False,
            enqueued_at__lt=now - timedelta(milliseconds=OWED_AFTER_MS),
        )
        .order_by("position")
        .first()
    )


def held(limit: Limit, now: datetime | None = None) -> int:
    """Free capacity held for an owed run (shown as held in Studio): all of it while one waits."""
    if limit.group_waiting_count == 0 or owed_barrier(limit, now or box_clock.now()) is None:
        return 0
    return limit.room


# --- a group's confirm and lapse -----------------------------------------------------------------


def group_slots(request: str, locked: dict[int, Limit]) -> list[Slot]:
    """The live slots of one acquisition, with their locked limits attached."""
    slots = list(
        Slot.objects.filter(request=request, state__in=(Slot.State.RESERVED, Slot.State.BUSY)).select_related(
            "queue_entry"
        )
    )
    for slot in slots:
        slot.limit = locked[slot.limit_id]
    return slots


def confirm_group(slots: list[Slot], now: datetime, changes: Changes) -> bool:
    """The run confirms the reserved slots of its acquisition (one, or a group's) together (3.5,
    10.2): all turn busy if their 2 minutes have not passed; otherwise they all lapse and the run
    goes to the end of each queue (`lapse`; the caller settles the freed capacity)."""
    reserved = [slot for slot in slots if slot.state == Slot.State.RESERVED]
    if not reserved:
        return bool(slots)
    if all(slot.reserved_until is not None and now <= slot.reserved_until for slot in reserved):
        Slot.objects.filter(id__in=[slot.id for slot in reserved]).update(state=Slot.State.BUSY, confirmed_at=now)
        for slot in reserved:
            slot.state, slot.confirmed_at = Slot.State.BUSY, now
            slot.limit.reserved_count -= 1
            slot.limit.busy_count += 1
            pools(slot.limit).add(slot.key, reserved=-1, busy=1)
        return True
    lapse(reserved, now, changes)
    return False


LAPSE_BATCH = 5_000  # slot ids per UPDATE (SQLite binds at most 32,766 values per statement)


def lapse(
    reserved: list[Slot], now: datetime, changes: Changes, *, state: str = Slot.State.LAPSED, freed_by: str = ""
) -> None:
    """Reserved slots nobody confirmed in time (or an operator released them: `freed_by` names
    who, `state` is then released): freed, and each run goes to the end of the queue of each,
    keeping its deadline, key and group (3.6, 10.2). The slots of a group come together. Each
    slot carries its locked limit (`slot.limit`) and the entry it was granted from."""
    ids = [slot.id for slot in reserved]
    for start in range(0, len(ids), LAPSE_BATCH):
        Slot.objects.filter(id__in=ids[start : start + LAPSE_BATCH]).update(
            state=state, freed_at=now, freed_by=freed_by
        )
    for slot in reserved:
        slot.limit.reserved_count -= 1
        pools(slot.limit).add(slot.key, reserved=-1)
    requeue(reserved, now)
    if state == Slot.State.LAPSED:
        changes.lapsed += len(reserved)


def requeue(slots: Iterable[Slot], now: datetime) -> None:
    """Send the runs of these freed reservations to the end of their limits' queues, keeping
    their deadline, key and group (3.6, 10.2)."""
    entries = []
    for slot in slots:
        limit, original = slot.limit, slot.queue_entry
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
                fair_pass=pools(limit).fair_pass(slot.key) if limit.is_fair else None,
            )
        )
        limit.next_position += 1
        count_entries(limit, [entries[-1]], waiting=1)
    QueueEntry.objects.bulk_create(entries)


def join(
    limit: Limit,
    *,
    run_id: str,
    request: str,
    label: str,
    key: str,
    group_size: int,
    now: datetime,
    deadline: datetime,
    timeout_ms: int,
    replacing: bool = False,
) -> QueueEntry:
    enter_turns(limit, key)
    entry = QueueEntry.objects.create(
        limit=limit,
        run_id=run_id,
        request=request,
        label=label,
        key=key,
        group_size=group_size,
        position=limit.next_position,
        enqueued_at=now,
        deadline=deadline,
        timeout_ms=timeout_ms,
        fair_pass=pools(limit).fair_pass(key) if limit.is_fair else None,
        replacing=replacing,
    )
    limit.next_position += 1
    count_entries(limit, [entry], waiting=1)
    return entry


def grant_busy(
    limit: Limit, *, run_id: str, request: str, label: str, key: str, group_size: int, now: datetime
) -> Slot:
    enter_turns(limit, key)
    slot = Slot.objects.create(
        limit=limit,
        run_id=run_id,
        request=request,
        label=label,
        key=key,
        group_size=group_size,
        state=Slot.State.BUSY,
        granted_at=now,
        confirmed_at=now,
        expires_at=now + timedelta(milliseconds=limit.max_hold_ms),
        fair_pass=take_turn(limit, key),
    )
    limit.busy_count += 1
    pools(limit).add(key, busy=1)
    return slot


def keyed_expired(limit: Limit, expired: Q) -> None:
    """Busy keyed slots the sweep is taking back (set-based): their pools' counters."""
    for key, count in _counts_by_key(Slot.objects.filter(expired, limit=limit).exclude(key="")):
        pools(limit).add(key, busy=-count)


def _counts_by_key(rows: QuerySet[Slot]) -> list[tuple[str, int]]:
    return list(rows.values_list("key").annotate(n=Count("id")).order_by())
