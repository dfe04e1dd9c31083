"""The grant rules, one Python track for every case (SPEC 3-5, 9, 10, 12.3, 13.2; SQLite runs them, and they
are the readable definition of limits/sql/engine.sql, held to it by the model test on both
databases): joining the queue, the grant over a set of locked limits (`settle`: time-outs, then
oldest first, all or nothing for a group, passed-over and owed runs), confirm, lapse, requeue,
and the key pool's room (`Pools.has_room`).

A plain limit (`Limit.is_plain`: no per_key in force, no keyed or group entry waiting) is the
case of one pool and no groups: `settle` grants its heads set-based (`grant_heads`). Every grant
asks `Limit.room` how many slots it may hand out: none while the limit is paused (5.6).

Must never happen (limits.verify checks each from the rows):
- a key pool holds more busy + reserved slots than its size, or a limit more than its capacity;
- a run holds some slots of a group but not all (no partial group is ever granted or confirmed);
- a waiting run that could have been granted (its key pool and every limit it needs had room,
  and nothing was held for an owed run) is passed by a younger run of the same limit;
- a younger run is granted a slot of a limit while an owed run of that limit waits.

Locks: every function here runs under the row locks of the limits it is given, taken in id order
by `lock` (with the limits of every group waiting in their queues), so two acquisitions of
crossing limits (A+B and B+A) never deadlock. A group whose limits are not all locked is left
waiting (the next release of one of its limits, or the sweep within 15 s, takes it up).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from fractions import Fraction

from django.db import connection
from django.db.models import Count, F, Min, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from limits.config import BOX_NAME
from limits.engine.results import RESERVATION_MS, WHOLE_RUN_SUFFIX, Changes, Reason
from limits.models import LIVE_SLOT_STATES, Limit, LimitKey, QueueEntry, Slot, pool_size
from stackbone.plumbing import clock as box_clock

OWED_AFTER_MS = 2 * 60 * 1000  # SPEC 10.4: passed over and waiting longer than this: owed
SCAN_BATCH = 500
GRANT_BATCH = 5_000  # entries granted per statement by grant_heads
MAX_GROUP = 3  # limits a caller names; the box bound (SPEC 12.2) may come on top
BOX_REASONS = frozenset({"box_full", "workflow_at_base"})


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


# --- the grant -----------------------------------------------------------------------------------


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


def queue_full(limit: Limit, key: str) -> str | None:
    """SPEC 14.5: 'queue_full' when the limit's queue holds its max_waiting runs,
    'key_queue_full' when `key`'s runs hold its max_waiting_per_key of it (the no-key runs are
    one key), else None: one more may join (engine.sql: limits_queue_full)."""
    cap = limit.max_waiting
    if cap is not None and limit.waiting_count >= cap:
        return "queue_full"
    per_key = limit.max_waiting_per_key
    if per_key is not None and pools(limit).waiting(key) >= per_key:
        return "key_queue_full"
    return None


def refusal(limit: Limit, key: str, request: str, base: int | None, now: datetime) -> str | None:
    """SPEC 14.2, 6.5: why an acquisition of `limit` (`key`'s pool) cannot be granted at once,
    once the runs waiting had their turn (the caller settled the limit), as a results.REASONS
    code; None when it can. Capacity held for an owed run (10.4) is not free for it
    (engine.sql: limits_refusal)."""
    if limit.paused:
        return "limit_paused"
    if not limit.room:
        return "box_full" if limit.is_box else "limit_full"
    if not pools(limit).has_room(key):
        return "workflow_at_base" if limit.is_box else "key_pool_full"
    if not whole_run_room(limit, request, base):
        return "whole_runs_at_base"
    if limit.waiting_count and owed_barrier(limit, now) is not None:
        return "held_for_owed"
    return None


def held(limit: Limit, now: datetime | None = None) -> int:
    """Free capacity held for an owed run (shown as held in Studio): all of it while one waits."""
    if limit.group_waiting_count == 0 or owed_barrier(limit, now or box_clock.now()) is None:
        return 0
    return limit.room


def why_waiting(
    entries: Sequence[QueueEntry],
    now: datetime | None = None,
    *,
    limits: Iterable[Limit] = (),
    next_keys: dict[int, str | None] | None = None,
) -> dict[int, Reason]:
    """Why each of these waiting entries is not granted now (SPEC 6.5), by the grant's own rules
    (`_Grant.open_to`: Limit.room, Pools.has_room, owed_barrier), checked in the order a grant
    meets them: the limit paused, the limit full, the key's pool full, capacity held for an older
    owed run; then, for a group, the same on each other limit of its group. The box bound (SPEC
    12) says box_full (its ceiling) or workflow_at_base (the workflow's pool), as itself. An entry that none of
    these stops is next: the next settle grants it (a hand-over under way, or the sweep's).

    A full fair limit (SPEC 13.7) says limit_full of the runs of the key its next freed slot goes
    to (and of a key whose own pool is full), and fair_turn of the others: other keys hold less
    of their share and are served first. The next key is limits.eta.fair_order's first, as the
    queue's first row (limits.selectors.fair_head): the slots free oldest grant first. A caller
    that walked the queue already gives it in `next_keys` ({limit id: the first row's key}).

    Read without locks, for the pages and the API: a constant number of queries for any number
    of entries (the limits not given in `limits`, the groups' other entries, and only for limits
    with room or fair: the key rows asked about, one owed-run probe per limit with groups waiting;
    per full fair limit, two to four to find its next key). {entry id: Reason}; entries no longer
    waiting are left out."""
    from limits import eta  # the fair order's walk (a leaf module, no Django: nothing comes back here)

    now = now or box_clock.now()
    waiting = [e for e in entries if e.state == QueueEntry.State.WAITING]
    if not waiting:
        return {}
    requests = {e.request for e in waiting if e.group_size > 1}
    partners = list(QueueEntry.objects.filter(request__in=requests, state=QueueEntry.State.WAITING)) if requests else []
    known = {limit.id: limit for limit in limits}
    needed = {e.limit_id for e in [*waiting, *partners]}
    if needed - set(known):
        known |= {limit.id: limit for limit in Limit.objects.filter(id__in=needed - set(known))}
    by_id = {limit_id: known[limit_id] for limit_id in needed}
    keys_asked: dict[int, set[str]] = {}
    for e in [*waiting, *partners]:
        # A limit without room stops its runs before any pool; a full fair limit, only those of
        # the key next or of a full pool (the others wait their turn).
        if e.key and (by_id[e.limit_id].room or by_id[e.limit_id].is_fair):
            keys_asked.setdefault(e.limit_id, set()).add(e.key)
    for limit in by_id.values():
        pools(limit).rows.update(dict.fromkeys(keys_asked.get(limit.id, ()), None))
    if keys_asked:
        rows = LimitKey.objects.filter(
            limit_id__in=list(keys_asked), key__in={key for keys in keys_asked.values() for key in keys}
        )
        for row in rows:
            if row.key in keys_asked.get(row.limit_id, ()):
                pools(by_id[row.limit_id]).rows[row.key] = row
    base = box_base() if any(e.request.endswith(WHOLE_RUN_SUFFIX) for e in waiting) else None
    barriers = {
        limit.id: owed_barrier(limit, now) if limit.group_waiting_count and limit.room else None
        for limit in by_id.values()
    }

    turns: dict[int, str | None] = dict(next_keys or {})

    def fair_next(limit: Limit) -> str | None:
        """The key whose run this full fair limit's next freed slot goes to (SPEC 13.7), by
        limits.eta.fair_order: the keys of the slots that free first (the oldest grants), the
        first key in the fair order whose pool has room (limitkey_fair_order on PostgreSQL) and
        those slots' keys, and the runs without a key. As selectors.fair_head reads them for one
        run; None when none of them can be served then."""
        frees_read = max(limit.in_use - limit.capacity, 0) + 16
        slots, table = Slot._meta.db_table, LimitKey._meta.db_table
        arm = (
            f"SELECT * FROM (SELECT key, granted_at, id FROM {slots} WHERE limit_id = %s AND state = %s"
            " ORDER BY granted_at, id LIMIT %s) AS {name}"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"{arm.format(name='busy')} UNION ALL {arm.format(name='reserved')} ORDER BY 2, 3 LIMIT %s",
                [limit.pk, Slot.State.BUSY, frees_read, limit.pk, Slot.State.RESERVED, frees_read, frees_read],
            )
            frees = [key for key, _, _ in cursor.fetchall()]
        room = "COALESCE(pool_override, %s) IS NULL OR busy_count + reserved_count < COALESCE(pool_override, %s)"
        sql = f"""
            SELECT * FROM (
                SELECT * FROM {table} WHERE limit_id = %s AND head IS NOT NULL AND ({room})
                ORDER BY limit_id, busy_count + reserved_count >= minimum, {eta.fair_share_sql(connection.vendor)},
                         fair_pass, head
                LIMIT 1
            ) AS first_key"""
        params = [limit.pk, limit.per_key, limit.per_key]
        freeing = sorted({key for key in frees if key})
        if freeing:  # an arm of its own: with an OR, PostgreSQL would read every key of the limit
            sql += f" UNION ALL SELECT * FROM {table} WHERE limit_id = %s AND head IS NOT NULL AND key IN ("
            sql += ", ".join(["%s"] * len(freeing)) + ")"
            params += [limit.pk, *freeing]
        rows = LimitKey.objects.raw(sql, params)
        candidates = {
            row.key: eta.FairKey(
                key=row.key,
                in_use=row.in_use,
                weight=row.weight,
                minimum=row.minimum,
                pool=pool_size(row.pool_override, limit.per_key),
                fair_pass=row.fair_pass,
                stride=stride(row.weight),
                waiting=row.waiting_count,
                heads=[row.head] if row.head is not None else [],
            )
            for row in rows
        }
        if limit.waiting_count > limit.keyed_waiting_count:
            oldest = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING, key="")
            head = oldest.order_by("position").values_list("position", flat=True).first()
            candidates[""] = eta.FairKey(
                key="",
                in_use=limit.in_use - limit.keyed_busy_count - limit.keyed_reserved_count,
                weight=1,
                minimum=0,
                pool=limit.per_key,
                fair_pass=limit.nokey_fair_pass,
                stride=stride(1),
                waiting=limit.waiting_count - limit.keyed_waiting_count,
                heads=[head] if head is not None else [],
            )
        walk = eta.fair_order(candidates, room=limit.capacity - limit.in_use, frees=frees, rows=1)
        return walk.order[0][0] if walk.order else None

    def stopped_on(entry: QueueEntry) -> Reason | None:
        limit = by_id[entry.limit_id]
        if limit.paused:
            return Reason("limit_paused", limit.name)
        if not limit.room and limit.is_fair and limit.waiting_count and pools(limit).has_room(entry.key):
            if limit.id not in turns:
                turns[limit.id] = fair_next(limit)
            turn = turns[limit.id]
            if turn is not None and turn != entry.key:
                return Reason("fair_turn", limit.name, key=entry.key)
        if not limit.room:
            return Reason("box_full" if limit.is_box else "limit_full", limit.name)
        if not pools(limit).has_room(entry.key):
            return Reason("workflow_at_base" if limit.is_box else "key_pool_full", limit.name, key=entry.key)
        if not whole_run_room(limit, entry.request, base):
            return Reason("whole_runs_at_base", limit.name)
        barrier = barriers[limit.id]
        if barrier is not None and barrier.position < entry.position:
            return Reason("held_for_owed", limit.name, owed_run=barrier.run_id)
        return None

    group_of: dict[str, list[QueueEntry]] = {}
    for e in partners:
        group_of.setdefault(e.request, []).append(e)
    found: dict[int, Reason] = {}
    for entry in waiting:
        reason = stopped_on(entry)
        if reason is None:
            for other in sorted(group_of.get(entry.request, ()), key=lambda e: by_id[e.limit_id].name):
                if other.limit_id == entry.limit_id:
                    continue
                stopped = stopped_on(other)
                if stopped is not None and stopped.code in BOX_REASONS:
                    reason = stopped  # the box is said as itself: it stops the run whatever it waits for
                    break
                if stopped is not None:
                    reason = Reason("group_limit_full", stopped.limit, key=stopped.key, detail=stopped.code)
                    break
        found[entry.id] = reason or Reason("next", by_id[entry.limit_id].name)
    return found


class _Grant:
    """One settle over a set of locked limits."""

    def __init__(self, locked: dict[int, Limit], now: datetime, changes: Changes) -> None:
        self.locked, self.now, self.changes = locked, now, changes
        self._base: list[int | None] = []  # SPEC 12.3: the box's base, read when first needed
        self.barriers: dict[int, QueueEntry | None] = {}
        # Per limit: waiting group entries seen with room in their key pool but not granted.
        self.blocked: dict[int, list[QueueEntry]] = {}
        self.decided: set[str] = set()  # group requests already granted or found blocked
        self.dealt: set[int] = set()  # entries a fair limit's stream has yielded (_fair_stream)

    def base(self) -> int | None:
        if not self._base:
            self._base.append(box_base())
        return self._base[0]

    def barrier(self, limit: Limit) -> QueueEntry | None:
        if limit.id not in self.barriers:
            self.barriers[limit.id] = owed_barrier(limit, self.now) if limit.group_waiting_count else None
        return self.barriers[limit.id]

    def open_to(self, limit: Limit, entry: QueueEntry) -> bool:
        """Whether this limit can give `entry` a slot now: total, key pool, and no owed run
        ahead of it (10.4)."""
        if not limit.room or not pools(limit).has_room(entry.key):
            return False
        if entry.request.endswith(WHOLE_RUN_SUFFIX) and not whole_run_room(limit, entry.request, self.base()):
            return False
        barrier = self.barrier(limit)
        return barrier is None or entry.position <= barrier.position

    def run(self) -> None:
        for entry in self._candidates():
            limit = self.locked[entry.limit_id]
            if entry.request in self.decided or not self.open_to(limit, entry):
                continue
            if entry.group_size == 1:
                self._grant([entry])
                continue
            group, complete = self._group(entry)
            if self._left_to_fairness(limit, entry, group):
                # Watched here all the same: a younger grant of this limit passes it over (10.4).
                self.blocked.setdefault(limit.id, []).append(entry)
                continue
            if complete and all(self.open_to(self.locked[e.limit_id], e) for e in group):
                self._grant(group)
                continue
            # Blocked (another of its limits is full or held): watched on every limit it waits
            # in, so a younger grant on any of them passes it over (10.4).
            self.decided.add(entry.request)
            for e in group:
                self.blocked.setdefault(e.limit_id, []).append(e)

    def _left_to_fairness(self, limit: Limit, entry: QueueEntry, group: list[QueueEntry]) -> bool:
        """Whether a group met in this limit's stream is left to another of its limits that is
        fair, whose stream grants it when 13.2 says (this limit's room permitting):
        - on that limit an older run of its key waits that its stream has not dealt with yet
          (within a key, strict arrival order);
        - or this limit is first come, first served (the box's place, say) and the run is not
          owed: the fair order, not this limit's arrival order, picks which key's run a freed
          fair slot goes to. An owed run keeps its place (13.4: the owed-run guard first).
        Not decided here, so the fair stream may still grant it in this settle; watched on this
        limit, so a younger run granted here passes it over (10.4: it lost this limit's room)."""
        fair = [e for e in group if e.limit_id != limit.id and self.locked[e.limit_id].is_fair]
        owed = entry.passed_over_at is not None and entry.enqueued_at < self.now - timedelta(milliseconds=OWED_AFTER_MS)
        if fair and not limit.is_fair and not owed:
            return True
        for e in fair:
            older = QueueEntry.objects.filter(
                limit_id=e.limit_id, state=QueueEntry.State.WAITING, key=e.key, position__lt=e.position
            )
            if older.exclude(id__in=self.dealt).exists():
                return True
        return False

    def _candidates(self) -> Iterator[QueueEntry]:
        """Waiting entries of the locked limits with room, oldest first over all of them (entry
        ids follow arrival; within one limit they follow the position), skipping full pools. A
        fair limit's stream comes in the order of SPEC 13.2 (`_fair_stream`), which a grant
        changes: each stream's next head is read only once its last one was dealt with."""
        streams = {
            limit.id: self._fair_stream(limit) if limit.is_fair else self._stream(limit)
            for limit in self.locked.values()
            if limit.waiting_count
        }
        heads: dict[int, QueueEntry] = {}
        while True:
            for limit_id in [i for i in streams if i not in heads]:
                head = next(streams[limit_id], None)
                if head is None:
                    del streams[limit_id]
                else:
                    heads[limit_id] = head
            if not heads:
                return
            yield heads.pop(min(heads, key=lambda i: heads[i].id))

    def _fair_stream(self, limit: Limit) -> Iterator[QueueEntry]:
        """A fair limit's waiting entries in the order of SPEC 13.2, read again after each one is
        dealt with (a grant changes its key's share): among the keys with a waiting entry whose
        pool has room, first those holding fewer than their `min`, then the smallest (busy +
        reserved) / weight, ties to the smallest pass (its turns), then to the key whose oldest
        waiting entry arrived first; within a key, arrival order. An entry dealt with and not
        granted (a group another limit stops, 10.2) is passed: the key's next one comes up. No
        entry behind an owed run (10.4)."""
        passed: list[int] = []
        while limit.room:
            waiting = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING).exclude(id__in=passed)
            full = pools(limit).full_keys()
            if full:
                waiting = waiting.exclude(key__in=full)
            barrier = self.barrier(limit)
            if barrier is not None:
                waiting = waiting.filter(position__lte=barrier.position)
            heads = dict(waiting.values_list("key").annotate(head=Min("position")).order_by())
            if not heads:
                return
            shares = fair_shares(limit, heads)
            key = min(heads, key=lambda k: (*shares[k], heads[k]))
            entry = waiting.get(key=key, position=heads[key])
            passed.append(entry.id)
            self.dealt.add(entry.id)
            yield entry

    def _stream(self, limit: Limit) -> Iterator[QueueEntry]:
        after = 0
        while limit.room:
            rows = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING, position__gt=after)
            full = pools(limit).full_keys()
            if full:
                rows = rows.exclude(key__in=full)
            barrier = self.barrier(limit)
            if barrier is not None:
                rows = rows.filter(position__lte=barrier.position)
            batch = list(rows.order_by("position")[:SCAN_BATCH])
            if not batch:
                return
            yield from batch
            after = batch[-1].position

    def _group(self, entry: QueueEntry) -> tuple[list[QueueEntry], bool]:
        """The waiting entries of this entry's group on the locked limits, and whether that is
        the whole group (all its entries still waiting, all their limits locked)."""
        group = list(QueueEntry.objects.filter(request=entry.request, state=QueueEntry.State.WAITING))
        here = [e for e in group if e.limit_id in self.locked]
        return here, len(here) == len(group) == entry.group_size

    def _grant(self, entries: list[QueueEntry]) -> None:
        """Reserve one slot per entry, together (3.5, 10.2), and mark the runs this grant passes."""
        now = self.now
        for entry in entries:  # judged before this grant takes its room (10.4: "had room")
            self._mark_passed_over(self.locked[entry.limit_id], entry)
        QueueEntry.objects.filter(id__in=[e.id for e in entries]).update(
            state=QueueEntry.State.GRANTED, finished_at=now
        )
        slots = []
        for entry in entries:
            limit = self.locked[entry.limit_id]
            ranked = take_turn(limit, entry.key)
            slots.append(
                Slot(
                    limit=limit,
                    run_id=entry.run_id,
                    request=entry.request,
                    label=entry.label,
                    key=entry.key,
                    group_size=entry.group_size,
                    state=Slot.State.RESERVED,
                    queue_entry=entry,
                    granted_at=now,
                    reserved_until=now + timedelta(milliseconds=RESERVATION_MS),
                    expires_at=now + timedelta(milliseconds=limit.max_hold_ms),
                    fair_pass=ranked,
                )
            )
            count_entries(limit, [entry], waiting=-1)
            limit.reserved_count += 1
            pools(limit).add(entry.key, reserved=1)
            barrier = self.barriers.get(limit.id)
            if barrier is not None and barrier.id == entry.id:
                del self.barriers[limit.id]  # the owed run got its slots: the next one, if any
        Slot.objects.bulk_create(slots)
        if len(entries) > 1:
            self.decided.add(entries[0].request)  # its other entries may still come up in other streams
        self.changes.granted += len(entries)
        self.changes.woken.append(entries[0].run_id)

    def _mark_passed_over(self, limit: Limit, granted: QueueEntry) -> None:
        """A younger run is granted a slot of this limit: every older group waiting here whose
        key pool on this limit has room (before this grant), and that the base of whole runs does
        not hold back here (12.3), was passed over (10.4). The mark is
        the run's, on all its entries, so once owed it holds capacity on every limit it needs; a
        run already waiting more than OWED_AFTER_MS is owed from this very grant on."""
        passed = {
            e.request
            for e in self.blocked.get(limit.id, [])
            if e.position < granted.position
            and e.passed_over_at is None
            and pools(limit).has_room(e.key)
            and (not e.request.endswith(WHOLE_RUN_SUFFIX) or whole_run_room(limit, e.request, self.base()))
        }
        if not passed:
            return
        QueueEntry.objects.filter(
            request__in=passed, state=QueueEntry.State.WAITING, passed_over_at__isnull=True
        ).update(passed_over_at=self.now)
        owed_before = self.now - timedelta(milliseconds=OWED_AFTER_MS)
        owed_now = False
        for entries in self.blocked.values():
            for e in entries:
                if e.request in passed:
                    e.passed_over_at = self.now
                    owed_now = owed_now or e.enqueued_at < owed_before
        if owed_now:
            self.barriers.clear()  # found again, with this run among the owed


def settle(locked: dict[int, Limit], now: datetime, changes: Changes) -> None:
    """Hand the free capacity of the locked limits to their queues (3.3-3.5, 9.3, 10.2-10.4): time
    out the waits past their deadline, then, oldest first over all the locked limits, grant each
    waiting run that can be granted now: its key pool and every limit it needs have room, and no
    owed run of those limits is older. A single run is reserved its slot; a group all of its slots
    in this transaction, or none. A run that cannot be granted does not stop younger runs behind
    it. On PostgreSQL limits_grant (engine.sql) is this function, one call for the lot.

    A plain limit (Limit.is_plain: no pool in force, nothing keyed or grouped waiting) is the case
    of one pool and no groups: its heads are granted in queue order while it has room, set-based
    (`grant_heads`), before the other limits' runs; no group waits in it, so the order between
    them does not matter."""
    for limit in locked.values():
        time_out(limit, now, changes, locked)
    for limit in locked.values():
        if limit.is_plain:
            grant_heads(limit, now, changes)
    _Grant(locked, now, changes).run()


_HEADS = f"""
    UPDATE {QueueEntry._meta.db_table} SET state = 'granted', finished_at = %s
    WHERE id IN (
        SELECT id FROM {QueueEntry._meta.db_table}
        WHERE limit_id = %s AND state = 'waiting' ORDER BY position LIMIT %s
    )
    RETURNING id, run_id"""
_SLOT_COLUMNS = "id, limit_id, run_id, request, label, state, queue_entry_id, granted_at, reserved_until, expires_at"
# limits.models.new_slot_id in SQLite's SQL: 'slot_' and 32 hex digits from its strong random
# source (tests/services/test_slot_ids.py holds the three spellings to one format).
SQLITE_NEW_SLOT_ID = "'slot_' || lower(hex(randomblob(16)))"


def grant_heads(limit: Limit, now: datetime, changes: Changes) -> None:
    """A plain limit's grant: reserve a slot for each run at the head of its queue, in queue
    order, while busy + reserved < capacity (SPEC 3.5, 4.1). Set-based, in batches of GRANT_BATCH
    (a sweep after a capacity raise may grant 100,000): the entries turn granted and the database
    inserts their slots from them. Raw SQL because the ORM would build a model object per row."""
    ops = connection.ops
    reserved_until = now + timedelta(milliseconds=RESERVATION_MS)
    expires_at = now + timedelta(milliseconds=limit.max_hold_ms)
    times = [ops.adapt_datetimefield_value(t) for t in (now, reserved_until, expires_at)]
    insert = (
        f"INSERT INTO {Slot._meta.db_table} ({_SLOT_COLUMNS}, key, group_size, freed_by, ends_with_run) "
        f"SELECT {SQLITE_NEW_SLOT_ID}, %s, run_id, request, label, 'reserved', id, %s, %s, %s, '', 1, '', %s"
    )
    with connection.cursor() as cursor:
        while limit.waiting_count and limit.room:
            cursor.execute(_HEADS, [times[0], limit.id, min(limit.room, GRANT_BATCH)])
            heads = cursor.fetchall()
            if not heads:
                return
            marks = ", ".join(["%s"] * len(heads))
            cursor.execute(
                f"{insert} FROM {QueueEntry._meta.db_table} WHERE id IN ({marks})",
                [limit.id, *times, False, *(entry_id for entry_id, _ in heads)],
            )
            limit.waiting_count -= len(heads)
            limit.reserved_count += len(heads)
            changes.granted += len(heads)
            changes.woken.extend(run_id for _, run_id in heads)


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
