"""The grant, one Python track for every case (SPEC 3.3-3.5, 4.1, 9.3, 10.2-10.4, 12.3, 13.2;
SQLite runs it, and it is the readable definition of limits_grant in limits/sql/engine.sql, held
to it by the model test on both databases): `settle` hands the free capacity of a set of locked
limits to their queues: time-outs, then oldest first, all or nothing for a group, passed-over and
owed runs, a fair limit's turns (`_Grant`). Built on the key pools, turns, time-outs and locks of
limits.engine.keys.

A plain limit (`Limit.is_plain`: no per_key in force, no keyed or group entry waiting) is the
case of one pool and no groups: `settle` grants its heads set-based (`grant_heads`). Every grant
asks `Limit.room` how many slots it may hand out: none while the limit is paused (5.6).

Must never happen (limits.verify checks each from the rows):
- a key pool holds more busy + reserved slots than its size, or a limit more than its capacity;
- a run holds some slots of a group but not all (no partial group is ever granted or confirmed);
- a waiting run that could have been granted (its key pool and every limit it needs had room,
  and nothing was held for an owed run) is passed by a younger run of the same limit;
- a younger run is granted a slot of a limit while an owed run of that limit waits.

Locks: it runs under the row locks of the limits it is given (`keys.lock`, in id order, with the
limits of every group waiting in their queues). A group whose limits are not all locked is left
waiting (the next release of one of its limits, or the sweep within 15 s, takes it up).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Min

# keys.OWED_AFTER_MS is read at each call, as the PostgreSQL engine reads it: the stress test's
# workers compress it (tests/concurrency/worker.py).
from limits.engine import keys
from limits.engine.keys import (
    box_base,
    count_entries,
    fair_shares,
    owed_barrier,
    pools,
    take_turn,
    time_out,
    whole_run_room,
)
from limits.engine.results import RESERVATION_MS, WHOLE_RUN_SUFFIX, Changes
from limits.models import Limit, QueueEntry, Slot

SCAN_BATCH = 500
GRANT_BATCH = 5_000  # entries granted per statement by grant_heads


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
        owed = entry.passed_over_at is not None and entry.enqueued_at < self.now - timedelta(
            milliseconds=keys.OWED_AFTER_MS
        )
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
        after = None  # from the lowest position: the front band (SPEC 14.4) is below 0
        while limit.room:
            rows = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING)
            if after is not None:
                rows = rows.filter(position__gt=after)
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
        owed_before = self.now - timedelta(milliseconds=keys.OWED_AFTER_MS)
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
