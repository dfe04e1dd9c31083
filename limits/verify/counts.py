"""Checks a, d and f of `limits verify` (limits/verify/__init__.py): what a limit and its key
pools hold. No grant brought reserved + busy above the capacity in force (a) or a key pool above
its size (f), and the counters on the limit and pool rows equal the live rows (d)."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from typing import Any

from django.db.models import Q

from limits.models import AuditEvent, LimitKey, QueueEntry, Slot
from limits.verify.history import LIVE, HistoryRows, _iso

CAPACITY, FREE, GRANT = 0, 1, 2


class CountChecks(HistoryRows):
    __slots__ = ()

    # --- a. capacity ------------------------------------------------------------------------

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
