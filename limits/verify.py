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
d. the counters on the limit row equal its live rows;
e. a slot tied to its run (with_limit, SPEC 2.5) is not busy or reserved once that run ended;
f. keys (SPEC 9): no grant brought a key pool above its size (checked while no per-key change
   was audited for the limit: the sizes of the past are not kept), the pool counters equal the
   rows, and within one key grants follow arrival order (across keys an older entry of another
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
   declared one it was created with).

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
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from django.db import connection, transaction
from django.db.models import Min, Q

from limits.config import BOX_NAME
from limits.engine.results import WHOLE_RUN_SUFFIX
from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, LimitKey, QueueEntry, Slot
from stackbone.plumbing import clock as box_clock

CAPACITY, FREE, GRANT = 0, 1, 2
LIVE = frozenset(LIVE_SLOT_STATES)
FOREVER = dt.datetime.max.replace(tzinfo=dt.UTC)
_LEADING_INT = re.compile(r"\s*(\d+)")
_DECLARED_CAPACITY = re.compile(r"capacity (\d+)")
_BOX_CEILING = re.compile(r"ceiling (\d+)")  # the box's audit text (operator_actions._box_text)


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
        per_key: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for slot in self.slots:
            if slot["key"] and slot["state"] in LIVE:
                per_key[slot["key"]][0 if slot["state"] == Slot.State.BUSY else 1] += 1
        for entry in self.entries:
            if entry["key"] and entry["state"] == QueueEntry.State.WAITING:
                per_key[entry["key"]][2] += 1
        for pool in LimitKey.objects.filter(limit=limit):
            counted = [pool.busy_count, pool.reserved_count, pool.waiting_count]
            if counted != per_key.pop(pool.key, [0, 0, 0]):
                found.append(f"{limit.name}: key {pool.key!r} counters {counted} do not match its rows")
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
        from limits.run_bounds import START_REQUEST_SUFFIX
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


def all_violations(limit: Limit, *, retention_ms: int | None = None) -> list[str]:
    """Every violation of one limit (the stress tests' one call)."""
    return verify([limit.name], retention_ms=retention_ms).violations


def capacity_overruns(limit: Limit) -> list[str]:
    return History.load(limit).capacity_overruns()


def queue_jumps(limit: Limit) -> list[str]:
    return History.load(limit).queue_jumps(cutoff=dt.datetime.min.replace(tzinfo=dt.UTC))
