"""Prove from the rows alone that the engine kept its promises (`manage.py limits verify`).

The engine keeps freed slots and finished queue entries as history (until
STACKBONE_HISTORY_RETENTION), and an audit event, with `capacity_after`, for every capacity
change and sync. From those rows this module checks, per limit:

a. capacity: no grant brought reserved + busy above the capacity in force at that instant
   (lowering capacity takes no slot back, so the level may stay above a lowered capacity until
   slots free; only a grant can break the rule);
b. queue order: a slot granted from the queue passed over no entry with a smaller position that
   was still waiting with its deadline not yet passed; a slot granted at once (no queue entry)
   was granted while no run waited;
c. no acquire call (request) was granted twice: its slots never overlap, and at most one was
   ever confirmed; it queued again only after a reservation that lapsed or was released;
d. the counters on the limit row equal its live rows; a slot granted from the queue names an
   entry of the limit's queue that no other slot names;
e. a slot tied to its run (with_limit, SPEC 2.5) is not busy or reserved once that run ended;
f. keys (SPEC 9): no grant brought a key pool above its size (checked while no per-key change
   was audited for the limit: the sizes of the past are not kept), the pool counters equal the
   rows and each pool's head is the position of its oldest waiting entry (where a fair grant
   finds the key), and within one key grants follow arrival order (across keys an older entry of another
   key may wait: its pool was full);
g. groups (SPEC 10): every grant of an acquisition of several limits gave a slot of each, in one
   instant (no run ever held part of a group); an older group entry passed over is excused from
   b (it waited for another of its limits) but must carry passed_over_at;
h. whole runs (SPEC 11): a run that holds a limit for its whole run took no step before its
   slots were confirmed for it (its first step starts at or after the confirmation);
i. time, on the box's one clock (the database's, studio/plumbing/clock.py): no slot or entry
   stamped in the future of that clock, no slot taken back by the sweep before its grant + max
   hold (expires_at), no wait timed out before its deadline;
j. pause (SPEC 5.6): no slot granted while the limit was paused, between a pause and the resume
   that follows it (audited; a grant at the very instant of either cannot be ordered against it
   and is let be), and a limit paused now has the audit row of that pause;
k. the box (SPEC 12): a, d and f hold it to its ceiling and to the base per workflow (its key
   pools), g to all or nothing with the limits a run waits for; and no run executed outside a
   box slot: every step of a run that held box slots began while one of them was busy for it
   (so no run resumed from a wait, or started, without its box slot); and no limit held more
   whole runs' slots (requests '<run>:start') than the box's base (12.3; while the base is the
   declared one it was created with);
l. fair shares (SPEC 13.6), on a limit whose share is fair now: no single run was granted from
   the queue while a run of another key that could have been served stood before it in the
   order of 13.2 (with the keys' passes: the turns, replayed from the pass each slot and entry
   keeps), no key's grant was ranked at another pass than its turns add up to, and no capacity
   was left free while a run that could have been granted waited; judged only since the last
   change of the limit's share, weights, mins, pool sizes or declared values (`fair_since`), and
   silent where the rows cannot tell (`unfair_grants` says what it leaves out).

Why timestamps are enough: every change to a limit's slots and queue happens under that limit's
row lock, and every service reads the clock *after* taking the lock (tests/services/
test_replay_races.py holds it to that), so for one limit the times written follow the order of
its transactions. Two transactions can share a timestamp; then their order cannot be told and the
engine gets the benefit of the doubt (at one instant: capacity changes first, then frees, then
grants; a grant is judged against the higher of the capacities in force just before and at that
instant). This relies on one clock: every time is the database's (studio/plumbing/clock.py),
read under the lock, whatever host's clock is off; only a database clock stepped backwards could
make the checker report a violation that was not one.

History older than the retention may already be deleted (slots before their queue entries):
missing rows only ever hide a violation, never invent one, and the checks that pair an entry
with its slot skip pairs that finished before the retention cutoff.

One limit's history is read into memory (a few hundred bytes a row), inside one read-only
snapshot (REPEATABLE READ on PostgreSQL; on SQLite the transaction blocks writers meanwhile), so
the counters and the rows are read as of one instant even while the box runs.
"""

from __future__ import annotations

import datetime as dt
import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from types import TracebackType
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, Min, Q

from limits.config import BOX_NAME
from limits.engine.keys import OWED_AFTER_MS, PASS_STRIDE, stride
from limits.engine.results import WHOLE_RUN_SUFFIX
from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, LimitKey, QueueEntry, Slot
from stackbone.plumbing import clock as box_clock

CAPACITY, FREE, GRANT = 0, 1, 2
LIVE = frozenset(LIVE_SLOT_STATES)
FOREVER = dt.datetime.max.replace(tzinfo=dt.UTC)
_LEADING_INT = re.compile(r"\s*(\d+)")
_DECLARED_CAPACITY = re.compile(r"capacity (\d+)")
_BOX_CEILING = re.compile(r"ceiling (\d+)")  # the box's audit text (operator_actions._box_text)
OWED_AFTER = dt.timedelta(milliseconds=OWED_AFTER_MS)  # SPEC 10.4


@dataclass(slots=True)
class Verification:
    """What `verify` checked and what it found (no violations: every rule held)."""

    limits: int = 0
    slots: int = 0
    entries: int = 0
    capacity_changes: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        checked = (
            f"{self.limits} limit(s), {self.slots} slot(s), {self.entries} queue entr"
            f"{'y' if self.entries == 1 else 'ies'}, {self.capacity_changes} capacity change(s)"
        )
        if self.ok:
            return f"ok: {checked}: capacity, queue order, one grant per request and counters hold"
        return f"{len(self.violations)} violation(s) in {checked}"


def verify(names: list[str] | None = None, *, retention_ms: int | None = None) -> Verification:
    """Check every limit (or those named) from its rows. Unknown names are violations."""
    from limits.engine.sweeper import history_retention_ms

    result = Verification()
    cutoff = box_clock.now() - dt.timedelta(
        milliseconds=history_retention_ms() if retention_ms is None else retention_ms
    )
    ids = Limit.objects.order_by("name").values_list("id", "name")
    if names is not None:
        found = {name for _, name in ids.filter(name__in=names)}
        result.violations.extend(f"unknown limit {name!r}" for name in names if name not in found)
        ids = ids.filter(name__in=names)
    for limit_id, _name in list(ids):
        with _snapshot():
            limit = Limit.objects.get(id=limit_id)
            history = History.load(limit)
            now = box_clock.now()  # after the snapshot began: every row it sees was written before
            result.limits += 1
            result.slots += len(history.slots)
            result.entries += len(history.entries)
            result.capacity_changes += len(history.capacity_events)
            result.violations.extend(history.violations(cutoff) + history.times_off_the_clock(now))
    return result


class _snapshot:  # noqa: N801 - used as a context manager, like transaction.atomic
    """One transaction that sees one instant of the database."""

    def __enter__(self) -> None:
        outermost = not connection.in_atomic_block  # inside a caller's transaction: its snapshot
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._atomic.__exit__(exc_type, exc, traceback)


@dataclass(slots=True)
class History:
    """One limit's rows, as the checks need them."""

    limit: Limit
    slots: Sequence[Mapping[str, Any]]
    entries: Sequence[Mapping[str, Any]]
    capacity_events: Sequence[Mapping[str, Any]]
    pause_events: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def load(cls, limit: Limit) -> History:
        slots = list(
            Slot.objects.filter(limit=limit)
            .order_by("granted_at", "id")
            .values(
                "id",
                "request",
                "run_id",
                "state",
                "granted_at",
                "expires_at",
                "freed_at",
                "confirmed_at",
                "queue_entry_id",
                "ends_with_run",
                "key",
                "group_size",
                "fair_pass",
            )
        )
        entries = list(
            QueueEntry.objects.filter(limit=limit)
            .order_by("position")
            .values(
                "id",
                "position",
                "request",
                "run_id",
                "state",
                "enqueued_at",
                "deadline",
                "finished_at",
                "key",
                "group_size",
                "passed_over_at",
                "fair_pass",
            )
        )
        events = list(
            AuditEvent.objects.filter(
                limit=limit, action__in=[AuditEvent.Action.CAPACITY, AuditEvent.Action.SYNC, AuditEvent.Action.BOX]
            )
            .order_by("at", "id")
            .values("at", "action", "old_value", "new_value", "capacity_after")
        )
        pauses = list(
            AuditEvent.objects.filter(limit=limit, action__in=[AuditEvent.Action.PAUSE, AuditEvent.Action.RESUME])
            .order_by("at", "id")
            .values("at", "action")
        )
        return cls(limit, slots, entries, events, pauses)

    def violations(self, cutoff: dt.datetime) -> list[str]:
        return (
            self.capacity_overruns()
            + self.queue_jumps(cutoff)
            + self.request_histories(cutoff)
            + self.counters_against_rows()
            + self.tied_slots_of_ended_runs()
            + self.pool_overruns()
            + self.partial_groups(cutoff)
            + self.steps_before_start()
            + self.grants_while_paused()
            + self.steps_outside_the_box()
            + self.whole_runs_over_the_base()
            + self.unfair_grants(cutoff)
        )

    # --- a. capacity ------------------------------------------------------------------------

    def capacity_timeline(self) -> tuple[int, list[tuple[dt.datetime, int]]]:
        """The capacity in force before the first recorded change, and (at, capacity after) for
        each change. Rows written before `capacity_after` existed are read from their text."""
        events = self.capacity_events
        if not events:
            return self.limit.capacity, []
        overridden = False
        changes: list[tuple[dt.datetime, int]] = []
        current = _capacity_before(events[0])
        for event in events:
            if event["action"] == AuditEvent.Action.CAPACITY:
                overridden = "(declared)" not in event["new_value"]
            after = event["capacity_after"]
            if after is None:
                after = _capacity_after_from_text(event, current, overridden)
            changes.append((event["at"], after))
            current = after
        return _capacity_before(events[0]), changes

    def capacity_overruns(self) -> list[str]:
        """A sweep line over each slot's life [granted_at, freed_at) and the capacity changes.
        Each grant is judged against the capacity in force at its instant."""
        name = self.limit.name
        initial, changes = self.capacity_timeline()
        events: list[tuple[dt.datetime, int, Any]] = [(at, CAPACITY, value) for at, value in changes]
        violations: list[str] = []
        for slot in self.slots:
            events.append((slot["granted_at"], GRANT, slot["id"]))
            if slot["freed_at"] is not None:
                if slot["freed_at"] < slot["granted_at"]:
                    violations.append(f"{name}: {slot['id']} freed at {_iso(slot['freed_at'])} before its grant")
                    continue
                events.append((slot["freed_at"], FREE, slot["id"]))
        events.sort(key=lambda event: (event[0], event[1]))
        # The highest capacity in force at each instant (before it, and after each change at it):
        # changes that share an instant cannot be ordered against its grants.
        highest: dict[dt.datetime, int] = {}
        capacity = initial
        for at, value in changes:
            highest[at] = max(highest.get(at, capacity), capacity, value)
            capacity = value
        level, capacity = 0, initial
        instant, capacity_before_instant = None, initial
        for at, kind, value in events:
            if at != instant:
                instant, capacity_before_instant = at, capacity
            if kind == CAPACITY:
                capacity = value
            elif kind == FREE:
                level -= 1
            else:
                level += 1
                allowed = max(capacity, capacity_before_instant, highest.get(at, 0))
                if level > allowed:
                    violations.append(
                        f"{name}: grant of {value} at {_iso(at)} brought reserved+busy to {level} "
                        f"over capacity {allowed}"
                    )
        return violations

    # --- j. pause ---------------------------------------------------------------------------

    def paused_spans(self) -> list[tuple[dt.datetime, dt.datetime]]:
        """[pause, resume) of each pause in the audit; the last one open while paused now."""
        spans: list[tuple[dt.datetime, dt.datetime]] = []
        paused_at: dt.datetime | None = None
        for event in self.pause_events:
            if event["action"] == AuditEvent.Action.PAUSE:
                paused_at = event["at"] if paused_at is None else paused_at
            elif paused_at is not None:
                spans.append((paused_at, event["at"]))
                paused_at = None
        if paused_at is not None:
            spans.append((paused_at, FOREVER))
        return spans

    def grants_while_paused(self) -> list[str]:
        name, violations = self.limit.name, []
        spans = self.paused_spans()
        for slot in self.slots:
            granted = slot["granted_at"]
            for paused, resumed in spans:
                if paused < granted < resumed:
                    violations.append(
                        f"{name}: {slot['id']} granted at {_iso(granted)} while the limit was paused "
                        f"(since {_iso(paused)})"
                    )
        if self.limit.paused_at is not None and not (spans and spans[-1][1] == FOREVER):
            violations.append(f"{name}: paused since {_iso(self.limit.paused_at)} with no pause audited")
        return violations

    # --- b. queue order ---------------------------------------------------------------------

    def queue_jumps(self, cutoff: dt.datetime) -> list[str]:
        """Grants from the queue in position order, and grants at once only with no run waiting.

        1. Entry E granted at t (its slot's granted_at, equal to E's finished_at): every entry F
           with a smaller position had left the queue by t, or its deadline had passed by t.
           F was queued before E (positions are handed out under the lock, in order). F leaving
           at t itself is fine: the grant times out stale waits in the same transaction.
        2. A slot with no queue entry (granted at once, SPEC 2.2): no entry was waiting then.
        """
        name = self.limit.name
        granted_at = {slot["queue_entry_id"]: slot["granted_at"] for slot in self.slots if slot["queue_entry_id"]}
        violations: list[str] = []
        blocking: dt.datetime | None = None  # the latest instant until which an earlier entry blocked
        culprit: Mapping[str, Any] | None = None
        # With keys, strict order holds within each key (f): an older entry of another key may
        # wait because its pool is full. Group entries may wait for another limit (g).
        keyed = any(entry["key"] for entry in self.entries) or self.limit.per_key is not None
        # Under the box, a run's start may wait for the base of whole runs on this limit (12.3),
        # as a key's run waits for its pool: it is not passed over then.
        whole_runs_capped = any(e["request"].endswith(WHOLE_RUN_SUFFIX) for e in self.entries) and (
            Limit.objects.filter(kind=Limit.Kind.BOX).exists()
        )
        blocking_by_key: dict[str, tuple[dt.datetime, Mapping[str, Any]]] = {}
        group_blocking: list[Mapping[str, Any]] = []
        for entry in self.entries:
            if entry["state"] == QueueEntry.State.GRANTED:
                at = granted_at.get(entry["id"])
                if at is None or at != entry["finished_at"]:
                    if entry["finished_at"] is None or entry["finished_at"] >= cutoff:
                        violations.append(f"{name}: entry #{entry['position']} granted without a slot at its finish")
                elif blocking is not None and culprit is not None and blocking > at:
                    violations.append(
                        f"{name}: #{entry['position']} ({entry['run_id']}) granted at {_iso(at)} while "
                        f"#{culprit['position']} ({culprit['run_id']}) waited with its deadline to come"
                    )
                elif entry["key"] in blocking_by_key and blocking_by_key[entry["key"]][0] > at:
                    other = blocking_by_key[entry["key"]][1]
                    violations.append(
                        f"{name}: #{entry['position']} ({entry['run_id']}) granted at {_iso(at)} while "
                        f"#{other['position']} ({other['run_id']}) of the same key waited"
                    )
                passed = [e for e in group_blocking if at is not None and _unmarked_before(e, entry, at)]
                if at is not None and passed and entry["group_size"] == 1 and not keyed:
                    violations.append(
                        f"{name}: #{entry['position']} granted at {_iso(at)} passed group entry "
                        f"#{passed[0]['position']} over without marking it passed over"
                    )
            blocks_until = min(entry["finished_at"] or FOREVER, entry["deadline"])
            if entry["group_size"] > 1:
                # It may wait for another of its limits (g), or a whole run's start for the base.
                if not (whole_runs_capped and entry["request"].endswith(WHOLE_RUN_SUFFIX)):
                    group_blocking.append(entry)
            elif keyed:
                held = blocking_by_key.get(entry["key"])
                if held is None or blocks_until > held[0]:
                    blocking_by_key[entry["key"]] = (blocks_until, entry)
            elif blocking is None or blocks_until > blocking:
                blocking, culprit = blocks_until, entry

        waits: list[tuple[dt.datetime, int]] = []
        for entry in self.entries:
            if entry["finished_at"] == entry["enqueued_at"]:
                continue  # queued and served in one instant: it never stood in anyone's way
            waits.append((entry["enqueued_at"], 2))
            if entry["finished_at"] is not None:
                waits.append((entry["finished_at"], 0))
        waits.extend((slot["granted_at"], 1) for slot in self.slots if slot["queue_entry_id"] is None)
        waits.sort()
        waiting = 0
        for at, kind in waits:
            if kind == 2:
                waiting += 1
            elif kind == 0:
                waiting -= 1
            elif waiting > 0:
                violations.append(f"{name}: a slot granted at once at {_iso(at)} while {waiting} run(s) waited")
        return violations

    # --- c. one grant per request -----------------------------------------------------------

    def request_histories(self, cutoff: dt.datetime) -> list[str]:
        """Per acquire call (request): its queue entries, in position order, are all granted but
        the last (it queues again only after its reservation lapsed or was released); its slots,
        in grant order, never overlap; every slot but the last was a reservation freed
        unconfirmed (lapsed or released), so at most one was ever confirmed."""
        name = self.limit.name
        violations: list[str] = []
        entries: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for entry in self.entries:
            entries[entry["request"]].append(entry)
        slots: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        positions = {entry["id"]: entry["position"] for entry in self.entries}
        for slot in sorted(self.slots, key=lambda s: (s["granted_at"], positions.get(s["queue_entry_id"], 0))):
            slots[slot["request"]].append(slot)
        for request, history in entries.items():
            if any(entry["state"] != QueueEntry.State.GRANTED for entry in history[:-1]):
                states = ", ".join(entry["state"] for entry in history)
                violations.append(f"{name}: request {request} queued again after an entry not granted ({states})")
        for request, history in slots.items():
            for earlier, later in zip(history, history[1:], strict=False):
                if earlier["freed_at"] is None or earlier["freed_at"] > later["granted_at"]:
                    violations.append(
                        f"{name}: request {request} had two live slots at once: {earlier['id']}, {later['id']}"
                    )
                if earlier["confirmed_at"] is not None or earlier["state"] not in (
                    Slot.State.LAPSED,
                    Slot.State.RELEASED,
                ):
                    violations.append(
                        f"{name}: request {request}: slot {earlier['id']} ({earlier['state']}) "
                        "was followed by another grant"
                    )
            if sum(slot["confirmed_at"] is not None for slot in history) > 1:
                violations.append(f"{name}: request {request} was confirmed twice")
            direct = [slot for slot in history if slot["queue_entry_id"] is None]
            if direct and (len(history) > 1 or request in entries):
                violations.append(f"{name}: request {request} was granted at once and also through the queue")
            trimmed = any((entry["finished_at"] or FOREVER) < cutoff for entry in entries.get(request, [])) or any(
                (slot["freed_at"] or FOREVER) < cutoff for slot in history
            )
            granted = sum(entry["state"] == QueueEntry.State.GRANTED for entry in entries.get(request, []))
            if granted != len(history) - len(direct) and not trimmed:
                violations.append(
                    f"{name}: request {request}: {granted} granted entries but {len(history) - len(direct)} queue slots"
                )
        return violations

    # --- d. counters ------------------------------------------------------------------------

    def counters_against_rows(self) -> list[str]:
        rows = (
            sum(slot["state"] == Slot.State.BUSY for slot in self.slots),
            sum(slot["state"] == Slot.State.RESERVED for slot in self.slots),
            sum(entry["state"] == QueueEntry.State.WAITING for entry in self.entries),
        )
        counters = (self.limit.busy_count, self.limit.reserved_count, self.limit.waiting_count)
        found = []
        if counters != rows:
            found.append(f"{self.limit.name}: counters busy/reserved/waiting {counters} but the rows say {rows}")
        keyed_rows = (
            sum(slot["state"] == Slot.State.BUSY and slot["key"] != "" for slot in self.slots),
            sum(slot["state"] == Slot.State.RESERVED and slot["key"] != "" for slot in self.slots),
            sum(entry["state"] == QueueEntry.State.WAITING and entry["key"] != "" for entry in self.entries),
            sum(entry["state"] == QueueEntry.State.WAITING and entry["group_size"] > 1 for entry in self.entries),
        )
        limit = self.limit
        keyed = (
            limit.keyed_busy_count,
            limit.keyed_reserved_count,
            limit.keyed_waiting_count,
            limit.group_waiting_count,
        )
        if keyed != keyed_rows:
            found.append(f"{limit.name}: keyed/group counters {keyed} but the rows say {keyed_rows}")
        # A slot granted from the queue names an entry of its limit, and no other slot names it:
        # a foreign key and a unique constraint on one table, which PostgreSQL's partitioned
        # tables cannot hold across partitions (migration 0034). Retention deletes an entry only
        # once no slot names it.
        named = Counter(slot["queue_entry_id"] for slot in self.slots if slot["queue_entry_id"] is not None)
        entry_ids = {entry["id"] for entry in self.entries}
        for entry_id, slots in sorted(named.items()):
            if entry_id not in entry_ids:
                found.append(f"{limit.name}: a slot names queue entry {entry_id}, which is not one of its queue")
            elif slots > 1:
                found.append(f"{limit.name}: {slots} slots name queue entry {entry_id}")
        per_key: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for slot in self.slots:
            if slot["key"] and slot["state"] in LIVE:
                per_key[slot["key"]][0 if slot["state"] == Slot.State.BUSY else 1] += 1
        heads: dict[str, int] = {}
        for entry in self.entries:
            if entry["key"] and entry["state"] == QueueEntry.State.WAITING:
                per_key[entry["key"]][2] += 1
                heads[entry["key"]] = min(heads.get(entry["key"], entry["position"]), entry["position"])
        for pool in LimitKey.objects.filter(limit=limit):
            counted = [pool.busy_count, pool.reserved_count, pool.waiting_count]
            if counted != per_key.pop(pool.key, [0, 0, 0]):
                found.append(f"{limit.name}: key {pool.key!r} counters {counted} do not match its rows")
            if pool.head != heads.get(pool.key):  # where a fair grant finds the key (limits_fair_next)
                oldest = heads.get(pool.key)
                found.append(
                    f"{limit.name}: key {pool.key!r} head {pool.head} but its oldest waiting entry is at {oldest}"
                )
        found.extend(f"{limit.name}: key {key!r} has live rows but no pool row" for key in per_key)
        return found

    # --- f. key pools -------------------------------------------------------------------------

    def pool_overruns(self) -> list[str]:
        """No grant brought a key pool's busy + reserved above its size (the size in force now;
        skipped once a per-key change was audited, by an operator or a deploy: past sizes are
        not kept)."""
        limit = self.limit
        per_key_changed = (
            Q(action__in=[AuditEvent.Action.PER_KEY, AuditEvent.Action.BOX])
            | Q(Q(old_value__contains="per_key") | Q(new_value__contains="per_key"), action=AuditEvent.Action.SYNC)
            | Q(Q(old_value__contains="base") | Q(new_value__contains="base"), action=AuditEvent.Action.SYNC)
        )
        if AuditEvent.objects.filter(per_key_changed, limit=limit).exists():
            return []
        overrides = dict(
            LimitKey.objects.filter(limit=limit, pool_override__isnull=False).values_list("key", "pool_override")
        )
        if limit.per_key is None and not overrides:
            return []
        moments: dict[str, list[tuple[dt.datetime, int]]] = defaultdict(list)
        for slot in self.slots:
            moments[slot["key"]].append((slot["granted_at"], 1))
            if slot["freed_at"] is not None:
                moments[slot["key"]].append((slot["freed_at"], -1))
        violations = []
        for key, changes in moments.items():
            size = overrides.get(key, limit.per_key) if key else limit.per_key
            if size is None:
                continue
            level = 0
            for at, change in sorted(changes, key=lambda c: (c[0], c[1])):  # frees first at one instant
                level += change
                if level > size:
                    shown = repr(key) if key else "(no key)"
                    violations.append(f"{limit.name}: key {shown} held {level} slots at {_iso(at)}, pool {size}")
                    break
        return violations

    # --- i. time -----------------------------------------------------------------------------

    def times_off_the_clock(self, now: dt.datetime) -> list[str]:
        """Every time on the database's clock (`now`: read after the rows): none in its future,
        no expiry before grant + max hold, no time-out before the deadline. A host whose clock
        was off and stamped its own time would break one of these."""
        name = self.limit.name
        violations = []
        for slot in self.slots:
            for column in ("granted_at", "freed_at"):
                if slot[column] is not None and slot[column] > now:
                    violations.append(f"{name}: {slot['id']} {column} {_iso(slot[column])} is after now {_iso(now)}")
            if slot["state"] == Slot.State.EXPIRED and slot["freed_at"] < slot["expires_at"]:
                violations.append(
                    f"{name}: {slot['id']} was taken back at {_iso(slot['freed_at'])}, before its max hold "
                    f"ended at {_iso(slot['expires_at'])}"
                )
        for entry in self.entries:
            for column in ("enqueued_at", "finished_at"):
                if entry[column] is not None and entry[column] > now:
                    violations.append(
                        f"{name}: queue entry {entry['id']} {column} {_iso(entry[column])} is after now {_iso(now)}"
                    )
            if entry["state"] == QueueEntry.State.TIMED_OUT and entry["finished_at"] < entry["deadline"]:
                violations.append(
                    f"{name}: the wait of {entry['request']} timed out at {_iso(entry['finished_at'])}, before "
                    f"its deadline {_iso(entry['deadline'])}"
                )
        return violations

    # --- h. whole runs -----------------------------------------------------------------------

    def steps_before_start(self) -> list[str]:
        """No step of a run before the slot it holds for the whole run was confirmed."""
        from limits.runs.bounds import START_REQUEST_SUFFIX
        from stackbone.runs.models import Step

        confirmed = {
            slot["run_id"]: slot["confirmed_at"]
            for slot in self.slots
            if slot["request"].endswith(START_REQUEST_SUFFIX) and slot["confirmed_at"] is not None
        }
        if not confirmed:
            return []
        first_steps = Step.objects.filter(run_id__in=confirmed).values("run_id").annotate(first=Min("started_at"))
        return [
            f"{self.limit.name}: run {row['run_id']} took a step at {_iso(row['first'])}, before its slot was "
            f"confirmed at {_iso(confirmed[row['run_id']])}"
            for row in first_steps
            if row["first"] < confirmed[row["run_id"]]
        ]

    # --- k. the box ---------------------------------------------------------------------------

    def steps_outside_the_box(self) -> list[str]:
        """Every step of a run that held slots of the box began while one of them was busy for
        it (confirmed, not yet freed): a run executes only in a box slot (SPEC 12.2). Steps of
        kind 'step' (the work); a hook step is recorded as the run begins to wait."""
        from stackbone.runs.models import Step

        if not self.limit.is_box:
            return []
        held: dict[str, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
        for slot in self.slots:
            if slot["confirmed_at"] is not None:
                held[slot["run_id"]].append((slot["confirmed_at"], slot["freed_at"] or FOREVER))
        steps = Step.objects.filter(run_id__in=list(held), kind=Step.Kind.STEP, started_at__isnull=False)
        return [
            f"{self.limit.name}: run {run_id} began step {name!r} at {_iso(started)} without a box slot"
            for run_id, name, started in steps.values_list("run_id", "name", "started_at").iterator()
            if not any(start <= started <= end for start, end in held[run_id])
        ]

    def whole_runs_over_the_base(self) -> list[str]:
        """SPEC 12.3: no grant brought the limit's live whole-run slots (requests '<run>:start')
        above the box's base (the base in force now; skipped once the box's base changed, by an
        operator or a deploy, or for the box itself, whose pools hold its runs)."""
        if self.limit.is_box:
            return []
        base = _steady_box_base()
        if base is None:
            return []
        level, violations = 0, []
        moments = []
        for slot in self.slots:
            if slot["request"].endswith(WHOLE_RUN_SUFFIX):
                moments.append((slot["granted_at"], 1))
                if slot["freed_at"] is not None:
                    moments.append((slot["freed_at"], -1))
        for at, change in sorted(moments):  # frees first at one instant
            level += change
            if level > base:
                violations.append(
                    f"{self.limit.name}: {level} whole runs held slots at {_iso(at)}, the box's base {base}"
                )
                break
        return violations

    # --- g. groups ----------------------------------------------------------------------------

    def partial_groups(self, cutoff: dt.datetime) -> list[str]:
        """Each grant of a group gave one slot of every limit of the acquisition in one instant.
        At one instant a group may be granted, sent back (an operator's release of its
        reservation) and granted again: then every limit of it has the same number of slots."""
        grants = {(slot["request"], slot["granted_at"]) for slot in self.slots if slot["group_size"] > 1}
        if not grants:
            return []
        sizes = {(slot["request"], slot["granted_at"]): slot["group_size"] for slot in self.slots}
        found: dict[tuple[str, dt.datetime], Counter[int]] = defaultdict(Counter)
        for request, granted_at, limit_id in Slot.objects.filter(request__in={r for r, _ in grants}).values_list(
            "request", "granted_at", "limit_id"
        ):
            found[(request, granted_at)][limit_id] += 1
        violations = []
        for request, at in sorted(grants):
            per_limit = found[(request, at)]
            whole = len(per_limit) == sizes[(request, at)] and len(set(per_limit.values())) == 1
            if not whole and at >= cutoff:
                violations.append(
                    f"{self.limit.name}: group {request} was granted {sum(per_limit.values())} slots on "
                    f"{len(per_limit)} of its {sizes[(request, at)]} limits at {_iso(at)}"
                )
        return violations

    # --- e. slots tied to their run ----------------------------------------------------------

    def tied_slots_of_ended_runs(self) -> list[str]:
        """A with_limit slot is freed in the transaction that ends its run (services.end_run):
        one still live while its run has ended was left behind."""
        from stackbone.runs.models import Run

        tied = [slot for slot in self.slots if slot["ends_with_run"] and slot["state"] in LIVE]
        if not tied:
            return []
        ended = dict(
            Run.objects.filter(id__in={slot["run_id"] for slot in tied}, finished_at__isnull=False).values_list(
                "id", "status"
            )
        )
        return [
            f"{self.limit.name}: {slot['id']} is still {slot['state']} for with_limit "
            f"although its run {slot['run_id']} is {ended[slot['run_id']]}"
            for slot in tied
            if slot["run_id"] in ended
        ]

    # --- l. fair shares -----------------------------------------------------------------------

    def fair_since(self, cutoff: dt.datetime) -> dt.datetime:
        """From when the fair check judges: the retention cutoff, or the last audited change of
        what the order of 13.2 reads (the share, a key's weight, min or pool size, per_key, the
        declared values), whichever is later. Past weights, mins and sizes are not kept, so only
        the period in which those in force now held is judged; a switch from fifo to fair starts
        it too, so no grant made while the limit was first come, first served is judged."""
        last = AuditEvent.objects.filter(limit=self.limit, action__in=FAIR_SETTINGS).aggregate(last=Max("at"))["last"]
        return cutoff if last is None else max(cutoff, last)

    def unfair_grants(self, cutoff: dt.datetime) -> list[str]:
        """SPEC 13.6 on a limit whose share is fair, from one pass over its rows in time order
        (`_FairReplay`: the rows already read, sorted once; the keys in 13.2's order kept in a
        heap, so O(rows x log keys), bounded by the retention like every check here). At each
        instant t after `fair_since`:

        1. The waits that end at t (granted, timed out, cancelled, or their deadline come) stop
           being candidates. A candidate is a waiting single acquisition: one the rows of this
           limit alone show could be served (its key's pool with room; the total with room).
        2. (a) Each single run granted from the queue at t, of key K, is judged against every
           other key J with a candidate that waited across t (queued before t, still waiting
           after it) and room in its pool: J stood before K when (J under its min, J's busy +
           reserved / weight, its pass, its oldest candidate's position) sorts before K's. K's
           pass is the one its slot was ranked at; J's is its turns replayed (`Turns`): the pass
           its latest entry joined with or its latest grant was ranked at plus its stride.
           (c) Each grant of K was ranked at the pass K's turns add up to, and a key that had
           nothing held or waiting joined at the smallest pass of the keys active then. Grants, frees
           and joins that share an instant cannot be ordered, so J is counted with all its
           grants at t and none of its frees, K with all its frees at t and none of its grants,
           and K's tie with its oldest entry waiting at t: a grant is reported only when no
           order of the instant's events explains it.
        3. The grants, frees, joins and leaves of t are applied.
        4. (b) After the last change at t: capacity free (the capacity in force, from the audit,
           above busy + reserved), the limit not paused, and a candidate whose pool has room.
           Every transaction that frees capacity or queues a run settles the limit before it
           commits, so no instant may end so; reported once per stretch.

        Left out, where the rows cannot tell (silent, never a false violation):
        - groups (10.2): a group's grant (another limit's stream may grant it here before this
          limit's own order comes to it) and a group waiting (another of its limits may be full);
        - a run's start while the box is declared (12.3: the base of whole runs may hold it);
        - any instant at which an owed run may have waited (10.4, 13.4: passed over, waiting
          over 2 minutes, not yet gone): it holds free capacity and bars younger runs;
        - the order of two grants at one instant (one settle granting K then J at t);
        - the paused spans (grants in them are j's; capacity is free by design);
        - grants at once (b of the queue order: no run may wait then);
        - within one key, arrival order (f);
        - a key's pass where its turns are unknown (no grant or join of it replayed since
          `fair_since`): the tie on the pass is let be, and (c) is not judged for it;
        - everything before `fair_since`: a share switched from fifo, or weights, mins, pool
          sizes changed during the history, leave only the period since the last change."""
        if not self.limit.is_fair:
            return []
        return _FairReplay(self, self.fair_since(cutoff)).violations()


# The audited changes after which the fair check starts again (History.fair_since).
FAIR_SETTINGS = (
    AuditEvent.Action.SHARE,
    AuditEvent.Action.WEIGHT,
    AuditEvent.Action.MINIMUM,
    AuditEvent.Action.PER_KEY,
    AuditEvent.Action.SYNC,
    AuditEvent.Action.BOX,
)
ENDS, GRANTS, FREES, JOINS, LEAVES, MARKS = range(6)  # the kinds of a replay's events
type Rank = tuple[bool, float, int, int]  # a key's place in SPEC 13.2's order (_FairReplay.rank)
UNKNOWN_PASS = 2**63  # a pass the rows cannot tell: after every known one, and never judged


def stands_before(rival: Rank, mine: Rank) -> bool:
    """Whether `rival` comes first in 13.2's order, where the rows can tell: a tie in (under
    min, share) with a pass unknown on either side is let be."""
    if rival[:2] != mine[:2]:
        return rival[:2] < mine[:2]
    if UNKNOWN_PASS in (rival[2], mine[2]):
        return False
    return rival[2:] < mine[2:]


class _FairReplay:
    """One pass over a fair limit's rows in time order (History.unfair_grants lists its steps).

    State between instants: each key's busy + reserved (`level`), its waiting entries (all of
    them, for its oldest at an instant) and its candidates (waiting single acquisitions, for its
    head), and a heap of the keys with a candidate and room in their pool in 13.2's order,
    entries made stale by a later change of their key skipped as they surface."""

    def __init__(self, history: History, since: dt.datetime) -> None:
        limit = history.limit
        self.name, self.since, self.per_key = limit.name, since, limit.per_key
        self.weights: dict[str, int] = {}
        self.minimums: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        for key, weight, minimum, pool in LimitKey.objects.filter(limit=limit).values_list(
            "key", "weight", "minimum", "pool_override"
        ):
            self.weights[key], self.minimums[key] = weight, minimum
            if pool is not None:
                self.sizes[key] = pool
        starts_wait_for_the_base = Limit.objects.filter(kind=Limit.Kind.BOX).exists()  # 12.3
        self.slots, self.entries = history.slots, history.entries
        self.candidate = [
            entry["group_size"] == 1 and not (starts_wait_for_the_base and entry["request"].endswith(WHOLE_RUN_SUFFIX))
            for entry in self.entries
        ]
        self.entry_index = {entry["id"]: i for i, entry in enumerate(self.entries)}
        self.history = history
        self.level: Counter[str] = Counter()
        self.total = 0
        self.waiting: dict[str, list[tuple[int, int]]] = defaultdict(list)  # (position, entry)
        self.left: set[int] = set()
        self.candidates: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.ended: set[int] = set()
        self.passes: dict[str, int | None] = {}  # each key's pass replayed (absent: `unset`; None: unknown)
        self.at_since: set[str] = set()  # keys granted or joining at the instant of `since`
        self.unset: int | None = None  # the pass of a key not replayed yet: unknown, or 0 after a switch
        self.version: Counter[str] = Counter()
        self.servable: set[str] = set()  # keys with a candidate and room in their pool
        self.order: list[tuple[Rank, int, str]] = []  # (13.2 order, version, key)

    # 13.2's terms for one key; the no-key runs ('') are one key of weight 1 and min 0

    def weight(self, key: str) -> int:
        return self.weights.get(key, 1) if key else 1

    def rank(self, key: str, level: int, position: int, fair_pass: int | None = None) -> Rank:
        """(holding its min, busy + reserved / weight, its pass, its head's position): smallest
        first. The share as a float, as limits_grant has it: two different shares of at most
        100,000 slots over weights of at most 100 differ far beyond a double's rounding. The pass
        its turns replayed unless given (UNKNOWN_PASS where the rows cannot tell)."""
        minimum = self.minimums.get(key, 0) if key else 0
        if fair_pass is None:
            known = self.known_pass(key)
            fair_pass = UNKNOWN_PASS if known is None else known
        return level >= minimum, level / self.weight(key), fair_pass, position

    def has_room(self, key: str, level: int) -> bool:
        size = self.sizes.get(key, self.per_key) if key else self.per_key
        return size is None or level < size

    def head(self, key: str) -> tuple[int, int] | None:
        """The key's oldest candidate (position, entry)."""
        heap = self.candidates.get(key)
        while heap and heap[0][1] in self.ended:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def oldest_waiting(self, key: str) -> int | None:
        heap = self.waiting.get(key)
        while heap and heap[0][1] in self.left:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def refresh(self, key: str) -> None:
        head = self.head(key)
        self.version[key] += 1
        if head is not None and self.has_room(key, self.level[key]):
            self.servable.add(key)
            heapq.heappush(self.order, (self.rank(key, self.level[key], head[0]), self.version[key], key))
        else:
            self.servable.discard(key)

    def first(self, leaving_out: set[str]) -> tuple[Rank, str] | None:
        """The servable key that comes first in 13.2's order, of those not left out."""
        aside, found = [], None
        while self.order:
            rank, version, key = self.order[0]
            if version != self.version[key]:
                heapq.heappop(self.order)
            elif key in leaving_out:
                aside.append(heapq.heappop(self.order))
            else:
                found = (rank, key)
                break
        for item in aside:
            heapq.heappush(self.order, item)
        return found

    # the pass

    def events(self) -> list[tuple[dt.datetime, int, int]]:
        events: list[tuple[dt.datetime, int, int]] = []
        for i, slot in enumerate(self.slots):
            freed = slot["freed_at"]
            if freed is not None and freed < slot["granted_at"]:
                continue  # a violation of a (capacity) that would make the levels meaningless
            events.append((slot["granted_at"], GRANTS, i))
            if freed is not None:
                events.append((freed, FREES, i))
        for i, entry in enumerate(self.entries):
            events.append((entry["enqueued_at"], JOINS, i))
            if entry["finished_at"] is not None:
                events.append((entry["finished_at"], LEAVES, i))
            if self.candidate[i]:
                events.append((min(entry["finished_at"] or FOREVER, entry["deadline"]), ENDS, i))
        # Instants that may settle the limit without a slot or entry of their own: a capacity
        # change, a resume.
        _, changes = self.history.capacity_timeline()
        events.extend((at, MARKS, -1) for at, _ in changes)
        events.extend((resumed, MARKS, -1) for _, resumed in self.history.paused_spans() if resumed != FOREVER)
        events.sort(key=lambda event: (event[0], event[1]))
        return events

    def owed_spans(self) -> list[tuple[dt.datetime, dt.datetime]]:
        """When an owed run may have waited (10.4): from the later of its passed-over mark and
        2 minutes of waiting until it left, both ends included (the benefit of the doubt)."""
        spans = []
        for entry in self.entries:
            if entry["passed_over_at"] is not None:
                start = max(entry["passed_over_at"], entry["enqueued_at"] + OWED_AFTER)
                end = entry["finished_at"] or FOREVER
                if start <= end:
                    spans.append((start, end))
        return sorted(spans)

    def violations(self) -> list[str]:
        found: list[str] = []
        initial, changes = self.history.capacity_timeline()
        capacity, next_change = initial, 0
        pauses, next_pause = self.history.paused_spans(), 0
        owed, next_owed = self.owed_spans(), 0
        owed_until: list[dt.datetime] = []  # a heap of the ends of the owed spans begun
        left_free = False
        started = False
        for at, instant in groupby(self.events(), key=itemgetter(0)):
            ends: list[int] = []
            grants: list[int] = []
            frees: list[int] = []
            joins: list[int] = []
            leaves: list[int] = []
            by_kind = (ends, grants, frees, joins, leaves)
            for _, kind, i in instant:
                if kind != MARKS:
                    by_kind[kind].append(i)
            while next_change < len(changes) and changes[next_change][0] <= at:
                capacity = changes[next_change][1]
                next_change += 1
            while next_pause < len(pauses) and pauses[next_pause][1] < at:
                next_pause += 1
            paused = next_pause < len(pauses) and pauses[next_pause][0] <= at
            while next_owed < len(owed) and owed[next_owed][0] <= at:
                heapq.heappush(owed_until, owed[next_owed][1])
                next_owed += 1
            while owed_until and owed_until[0] < at:
                heapq.heappop(owed_until)
            if at > self.since and not started:
                self.start_judging()
                started = True
            judged = at > self.since and not owed_until
            # 1. waits that end at t
            if ends:
                self.ended.update(ends)
                for key in {self.entries[i]["key"] for i in ends}:
                    self.refresh(key)
            # 2. (a) the single runs granted from the queue at t, (c) the passes they were ranked at
            if judged and grants:
                found.extend(self.judge_grants(at, by_kind))
            if judged and (grants or joins):
                found.extend(self.judge_turns(at, grants, joins, frees, leaves))
            # 3. the instant's changes
            self.take_turns(grants, joins, counted=at > self.since)
            if at == self.since:
                self.at_since |= {self.slots[i]["key"] for i in grants} | {self.entries[i]["key"] for i in joins}
            touched: set[str] = set()
            for i in grants:
                key = self.slots[i]["key"]
                self.level[key] += 1
                touched.add(key)
            for i in frees:
                key = self.slots[i]["key"]
                self.level[key] -= 1
                touched.add(key)
            self.total += len(grants) - len(frees)
            for i in joins:
                entry = self.entries[i]
                heapq.heappush(self.waiting[entry["key"]], (entry["position"], i))
                if self.candidate[i] and i not in self.ended:
                    heapq.heappush(self.candidates[entry["key"]], (entry["position"], i))
                touched.add(entry["key"])
            self.left.update(leaves)
            for key in touched:
                self.refresh(key)
            # 4. (b) capacity left free after t
            free = capacity - self.total
            if judged and not paused and free > 0 and self.servable:
                if not left_free:
                    found.append(self.left_free_text(at, free, capacity))
                left_free = True
            else:
                left_free = False
        return found

    def judge_grants(self, at: dt.datetime, by_kind: Sequence[list[int]]) -> list[str]:
        grants = [self.slots[i] for i in by_kind[GRANTS]]
        judged = [
            (slot, self.entry_index[slot["queue_entry_id"]])
            for slot in grants
            if slot["group_size"] == 1 and slot["queue_entry_id"] in self.entry_index
        ]
        if not judged:
            return []
        frees = [self.slots[i] for i in by_kind[FREES]]
        granted_at_t = Counter(slot["key"] for slot in grants)
        freed_at_t = Counter(slot["key"] for slot in frees if slot["granted_at"] < at)
        joined_at_t: dict[str, int] = {}
        for i in by_kind[JOINS]:
            entry = self.entries[i]
            joined_at_t[entry["key"]] = min(entry["position"], joined_at_t.get(entry["key"], entry["position"]))
        touched = {slot["key"] for slot in grants} | {slot["key"] for slot in frees}
        touched |= {self.entries[i]["key"] for kind in (JOINS, LEAVES) for i in by_kind[kind]}
        # Who could stand first: an untouched key as the heap has it; a touched one at its fullest.
        rivals: list[tuple[Rank, str, int]] = []
        untouched = self.first(touched)
        if untouched is not None:
            rivals.append((*untouched, self.level[untouched[1]]))
        latest = self.turns_after(by_kind[GRANTS], by_kind[JOINS])
        for key in touched:
            head = self.head(key)
            fullest = self.level[key] + granted_at_t[key]
            if head is not None and self.has_room(key, fullest):
                known = self.known_pass(key)
                furthest = max(UNKNOWN_PASS if known is None else known, latest.get(key, -1))
                rivals.append((self.rank(key, fullest, head[0], furthest), key, fullest))
        rivals.sort()
        found = []
        for slot, i in judged:
            key, entry = slot["key"], self.entries[i]
            oldest = [entry["position"], self.oldest_waiting(key), joined_at_t.get(key)]
            emptiest = max(self.level[key] - freed_at_t[key], 0)
            ranked = UNKNOWN_PASS if slot["fair_pass"] is None else slot["fair_pass"]
            mine = self.rank(key, emptiest, min(p for p in oldest if p is not None), ranked)
            rival = next((other for other in rivals if other[1] != key and stands_before(other[0], mine)), None)
            if rival is not None:
                found.append(self.unfair_text(at, entry, key, emptiest, *rival))
        return found

    # the turns (13.2's pass), replayed from the pass each slot and entry keeps

    def turns_after(self, grants: Sequence[int], joins: Sequence[int]) -> dict[str, int]:
        """Each key's pass after these grants and joins of one instant, as far as they tell: the
        largest of its grants' ranked pass + its stride and its entries' joining pass (the events
        of one instant cannot be ordered; a pass only grows within one transaction)."""
        found: dict[str, int] = {}
        for i in grants:
            slot = self.slots[i]
            if slot["fair_pass"] is not None:
                after = slot["fair_pass"] + stride(self.weight(slot["key"]))
                found[slot["key"]] = max(found.get(slot["key"], after), after)
        for i in joins:
            entry = self.entries[i]
            if entry["fair_pass"] is not None:
                found[entry["key"]] = max(found.get(entry["key"], entry["fair_pass"]), entry["fair_pass"])
        return found

    def take_turns(self, grants: Sequence[int], joins: Sequence[int], *, counted: bool) -> None:
        """Apply an instant's grants and joins to the keys' passes. Before `fair_since` a grant's
        stride may be another weight's: the key's pass is unknown after it, until it joins again
        or a later grant tells."""
        after = self.turns_after(grants, joins)
        for i in grants:
            key = self.slots[i]["key"]
            if not counted or self.slots[i]["fair_pass"] is None:
                self.passes.pop(key, None)
        for key, value in after.items():
            if counted or key in {self.entries[i]["key"] for i in joins}:
                self.passes[key] = value

    def known_pass(self, key: str) -> int | None:
        return self.passes.get(key, self.unset)

    def start_judging(self) -> None:
        """At `fair_since`: the passes replayed before it may be another period's. A switch to
        fair starts every key's turns at 0 (keys.restart_turns); any other change leaves them
        unknown until each key's next grant or join tells."""
        last = (
            AuditEvent.objects.filter(limit__name=self.name, action__in=FAIR_SETTINGS, at=self.since)
            .order_by("-id")
            .values_list("action", flat=True)
            .first()
        )
        self.passes.clear()
        self.unset = 0 if last == AuditEvent.Action.SHARE else None
        # A grant or join at the very instant of the change may have come before it or after it
        # (one transaction's rows share their time): that key's pass is unknown until it tells.
        for key in self.at_since:
            self.passes[key] = None

    def lowest_active_pass(self, key: str) -> int | None:
        """The smallest pass of the keys other than `key` holding or waiting now (0 if none),
        None where one of them has a pass the rows cannot tell."""
        others = {k for k, level in self.level.items() if level > 0 and k != key}
        others |= {k for k in self.waiting if k != key and self.oldest_waiting(k) is not None}
        passes = [self.known_pass(k) for k in others]
        if None in passes:
            return None
        return min((p for p in passes if p is not None), default=0)

    def judge_turns(
        self, at: dt.datetime, grants: Sequence[int], joins: Sequence[int], frees: Sequence[int], leaves: Sequence[int]
    ) -> list[str]:
        """(c): a key's grants at t were ranked at the pass its turns add up to (several at one
        instant: its stride apart, from there), where nothing else of that key happens at t; a
        key that had nothing held or waiting first entered the turns (a grant at once does too)
        at the smallest pass of the keys active then (0 if none), judged where nothing else
        happens at t and all their passes are known; a lone join at t likewise."""
        found: list[str] = []
        joined = {self.entries[i]["key"] for i in joins}
        by_key: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for i in grants:
            if self.slots[i]["fair_pass"] is not None:
                by_key[self.slots[i]["key"]].append(self.slots[i])
        for key, slots in by_key.items():
            expected = self.known_pass(key)
            if self.level[key] == 0 and self.oldest_waiting(key) is None:  # it enters the turns
                alone = len(by_key) == 1 and not (joins or frees or leaves)
                expected = self.lowest_active_pass(key) if alone else None
            if expected is None or key in joined:
                continue
            for slot in sorted(slots, key=itemgetter("fair_pass")):
                if slot["fair_pass"] != expected:
                    found.append(
                        f"{self.name}: fair share: {slot['id']} ({slot['run_id']}) of key {_shown(key)} granted at "
                        f"{_iso(at)} at pass {_turns(slot['fair_pass'])} where its turns add up to {_turns(expected)}"
                    )
                    break
                expected += stride(self.weight(key))
        if len(joins) == 1 and not (grants or frees or leaves):
            entry = self.entries[joins[0]]
            key = entry["key"]
            idle = self.level[key] == 0 and self.oldest_waiting(key) is None
            lowest = self.lowest_active_pass(key)
            if idle and entry["fair_pass"] is not None and lowest is not None and entry["fair_pass"] != lowest:
                found.append(
                    f"{self.name}: fair share: #{entry['position']} ({entry['run_id']}) of key {_shown(key)} "
                    f"joined at {_iso(at)} at pass {_turns(entry['fair_pass'])}, not at the smallest pass of "
                    f"the keys active then ({_turns(lowest)})"
                )
        return found

    def unfair_text(
        self,
        at: dt.datetime,
        entry: Mapping[str, Any],
        key: str,
        level: int,
        rank: Rank,
        other: str,
        other_level: int,
    ) -> str:
        head = self.head(other)
        waiting = self.entries[head[1]] if head is not None else None
        who = f"#{waiting['position']} ({waiting['run_id']})" if waiting is not None else f"#{rank[2]}"
        return (
            f"{self.name}: fair share: #{entry['position']} ({entry['run_id']}) of key {_shown(key)} granted at "
            f"{_iso(at)} while key {_shown(other)} stood before it ({who} waited; in use / weight "
            f"{other_level}/{self.weight(other)} against {level}/{self.weight(key)})"
            + ("" if rank[2] == UNKNOWN_PASS else f", its pass {_turns(rank[2])} turns")
        )

    def left_free_text(self, at: dt.datetime, free: int, capacity: int) -> str:
        first = self.first(set())
        assert first is not None  # a servable key is in the heap
        head = self.head(first[1])
        assert head is not None
        entry = self.entries[head[1]]
        return (
            f"{self.name}: fair share: {free} slot(s) left free at {_iso(at)} ({self.total} of capacity "
            f"{capacity} in use) while #{entry['position']} ({entry['run_id']}) of key {_shown(first[1])} "
            "could have been granted"
        )


def _steady_box_base() -> int | None:
    """The box's base in force, if it never changed since the box was declared (an operator's
    base or a deploy's audited), else None: the checks of 12.3 need the base of every instant."""
    box = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).first()
    if (
        box is None
        or AuditEvent.objects.filter(limit=box, action__in=[AuditEvent.Action.BOX, AuditEvent.Action.SYNC]).exists()
    ):
        return None
    return box.per_key


def _capacity_before(event: Mapping[str, Any]) -> int:
    """The capacity in force before the first recorded change. A capacity change records the old
    capacity; a sync records the old declared values, and before any capacity change there was
    no override (a limit is created without one)."""
    pattern = _LEADING_INT if event["action"] == AuditEvent.Action.CAPACITY else _DECLARED_CAPACITY
    if "ceiling" in event["old_value"]:
        pattern = _BOX_CEILING
    found = pattern.match(event["old_value"]) if pattern is _LEADING_INT else pattern.search(event["old_value"])
    if found:
        return int(found.group(1))
    return event["capacity_after"] if event["capacity_after"] is not None else 0


def _capacity_after_from_text(event: Mapping[str, Any], current: int, overridden: bool) -> int:
    """For audit rows written before `capacity_after` existed."""
    if event["action"] == AuditEvent.Action.CAPACITY:
        found = _LEADING_INT.match(event["new_value"])
        return int(found.group(1)) if found else current
    found = (_BOX_CEILING if "ceiling" in event["new_value"] else _DECLARED_CAPACITY).search(event["new_value"])
    return int(found.group(1)) if found and not overridden else current


def _unmarked_before(group_entry: Mapping[str, Any], granted: Mapping[str, Any], at: dt.datetime) -> bool:
    """An older group entry still waiting at `at`, not yet marked passed over (10.4)."""
    still_waiting = min(group_entry["finished_at"] or FOREVER, group_entry["deadline"]) > at
    unmarked = group_entry["passed_over_at"] is None or group_entry["passed_over_at"] > at
    return bool(group_entry["position"] < granted["position"] and still_waiting and unmarked)


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat()


def _turns(fair_pass: int) -> str:
    """A pass as turns (13.2: one grant of weight 1 is one turn)."""
    return "unknown" if fair_pass == UNKNOWN_PASS else f"{fair_pass / PASS_STRIDE:.4g}"


def _shown(key: str) -> str:
    return repr(key) if key else "(no key)"


def all_violations(limit: Limit, *, retention_ms: int | None = None) -> list[str]:
    """Every violation of one limit (the stress tests' one call)."""
    return verify([limit.name], retention_ms=retention_ms).violations


def capacity_overruns(limit: Limit) -> list[str]:
    return History.load(limit).capacity_overruns()


def queue_jumps(limit: Limit) -> list[str]:
    return History.load(limit).queue_jumps(cutoff=dt.datetime.min.replace(tzinfo=dt.UTC))
