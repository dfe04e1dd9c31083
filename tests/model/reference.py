"""A reference model of the limits engine: the spec and docs/engine.md,
in plain Python lists, with no database and no locks.

It is written from the rules, one function per operation, and keeps the same rows the engine
keeps (slots and queue entries with their final states, audit events), so that after every step a
test can hold the engine's rows up against it. Counters are not stored here: the model counts its
rows, so comparing them to the engine's counters also proves the engine's counters equal its rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

RESERVATION = timedelta(minutes=2)  # 3.5
DEFAULT_TIMEOUT_MS = 24 * 60 * 60 * 1000  # 3.3
LIVE = ("reserved", "busy")


class ModelError(Exception):
    """An expected refusal; `field` names what was wrong, as LimitsError.field does."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


@dataclass
class MLimit:
    name: str
    declared_capacity: int
    declared_max_hold_ms: int
    declared: bool = True
    capacity_override: int | None = None
    max_hold_override_ms: int | None = None
    next_position: int = 1

    @property
    def capacity(self) -> int:
        return self.declared_capacity if self.capacity_override is None else self.capacity_override

    @property
    def max_hold_ms(self) -> int:
        return self.declared_max_hold_ms if self.max_hold_override_ms is None else self.max_hold_override_ms


@dataclass
class MEntry:
    limit: str
    position: int
    run_id: str
    request: str
    label: str
    enqueued_at: datetime
    deadline: datetime
    timeout_ms: int
    state: str = "waiting"
    finished_at: datetime | None = None


@dataclass
class MSlot:
    limit: str
    run_id: str
    request: str
    label: str
    state: str
    entry: MEntry | None
    granted_at: datetime
    expires_at: datetime
    reserved_until: datetime | None = None
    confirmed_at: datetime | None = None
    freed_at: datetime | None = None
    freed_by: str = ""
    ends_with_run: bool = False  # with_limit's slot (2.5): freed when its run ends
    engine_id: str | None = None  # the engine's id for the same slot, once matched

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.request, None if self.entry is None else self.entry.position)


@dataclass(frozen=True)
class MAcquisition:
    state: str
    limit: str
    request: str
    slot: MSlot | None = None
    timeout_ms: int | None = None
    deadline: datetime | None = None


@dataclass
class MSweepReport:
    limits: int = 0
    expired: int = 0
    lapsed: int = 0
    timed_out: int = 0
    granted: int = 0


@dataclass
class Model:
    limits: dict[str, MLimit] = field(default_factory=dict)  # in the engine's id order
    entries: list[MEntry] = field(default_factory=list)
    slots: list[MSlot] = field(default_factory=list)
    audit: list[tuple[str, str, str, MSlot | None, str, str, datetime]] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)  # runs announced by the last operation

    # --- what the engine's counters must say --------------------------------------------------

    def live(self, limit: str, state: str | None = None) -> list[MSlot]:
        return [s for s in self.slots if s.limit == limit and (s.state == state if state else s.live)]

    def waiting(self, limit: str) -> list[MEntry]:
        return sorted((e for e in self.entries if e.limit == limit and e.state == "waiting"), key=lambda e: e.position)

    def in_use(self, limit: str) -> int:
        return len(self.live(limit))

    # --- the operations -----------------------------------------------------------------------

    def acquire(
        self, name: str, *, run_id: str, request: str, label: str, timeout_ms: int | None, now: datetime
    ) -> MAcquisition:
        """2.2, 2.3: a replay answers from what became of the request (confirming a slot reserved
        for it); a new request gets a busy slot if nobody waits and one is free, else queues."""
        previous = self._previous(request, now)
        if previous is not None:
            return previous
        limit = self.limits.get(name)
        if limit is None or not limit.declared:  # 1.5
            raise ModelError("limit")
        if not self.waiting(name) and self.in_use(name) < limit.capacity:
            slot = MSlot(name, run_id, request, label, "busy", None, now, self._expiry(limit, now), confirmed_at=now)
            self.slots.append(slot)
            return MAcquisition("busy", name, request, slot)
        timeout_ms = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
        entry = self._enqueue(limit, run_id, request, label, now, now + timedelta(milliseconds=timeout_ms), timeout_ms)
        woken_before = len(self.woken)
        self._settle(limit, now)
        mine = next((s for s in self.live(name, "reserved") if s.entry is entry), None)
        if mine is not None:
            # The caller is the one granted: it confirms at once and is not woken (it is awake).
            del self.woken[self.woken.index(run_id, woken_before)]
            self._confirm(limit, mine, now)
            return MAcquisition("busy", name, request, mine)
        return MAcquisition("waiting", name, request, timeout_ms=timeout_ms, deadline=entry.deadline)

    def confirm(self, slot: MSlot | None, now: datetime) -> bool:
        if slot is None or slot.state != "reserved":
            return False
        return self._confirm(self.limits[slot.limit], slot, now)

    def release(self, slot: MSlot | None, *, actor: str | None, now: datetime) -> bool:
        """2.4, 5.1: frees a busy or reserved slot; anything else is False and changes nothing. A
        released reservation sends its run to the end of the queue with its deadline (docs/engine.md)."""
        if slot is None or not slot.live:
            return False
        limit, old = self.limits[slot.limit], slot.state
        slot.state, slot.freed_at, slot.freed_by = "released", now, actor or ""
        if old == "reserved":
            self._requeue(limit, slot, now)
        self._settle(limit, now)
        if actor is not None:
            self.audit.append(("release", actor, limit.name, slot, old, "released", now))
        return True

    def tie_to_run(self, slot: MSlot | None, run_id: str) -> bool:
        """2.5: with_limit ties its busy slot to its run."""
        if slot is None or slot.state != "busy" or slot.run_id != run_id:
            return False
        slot.ends_with_run = True
        return True

    def end_run(self, run_id: str, now: datetime) -> int:
        """3.4, 3.7, 2.7, 2.5: waits are cancelled, reservations and with_limit's busy slots
        freed, other busy slots kept."""
        ended = 0
        for limit in self.limits.values():
            waits = [e for e in self.waiting(limit.name) if e.run_id == run_id]
            reserved = [s for s in self.live(limit.name, "reserved") if s.run_id == run_id]
            reserved += [s for s in self.live(limit.name, "busy") if s.run_id == run_id and s.ends_with_run]
            if not waits and not reserved:
                continue
            for entry in waits:
                entry.state, entry.finished_at = "cancelled", now
            for slot in reserved:
                slot.state, slot.freed_at = "run_ended", now
            self._settle(limit, now)
            ended += len(waits) + len(reserved)
        return ended

    def set_capacity(self, name: str, value: int | None, *, actor: str, now: datetime) -> None:
        """5.2, 5.3: raising grants at once; lowering takes nothing back."""
        limit = self.limits[name]
        old = limit.capacity
        limit.capacity_override = value
        self._settle(limit, now)
        new = f"{limit.capacity} (declared)" if value is None else str(limit.capacity)
        self.audit.append(("capacity", actor, name, None, str(old), new, now))

    def set_max_hold(self, name: str, value_ms: int | None, *, actor: str, now: datetime) -> None:
        """5.4: only slots granted afterwards get the new max hold."""
        limit = self.limits[name]
        old = limit.max_hold_ms
        limit.max_hold_override_ms = value_ms
        new = f"{limit.max_hold_ms} (declared)" if value_ms is None else str(limit.max_hold_ms)
        self.audit.append(("max_hold", actor, name, None, str(old), new, now))

    def sync(self, declared: dict[str, tuple[int, int]], now: datetime) -> None:
        """1.4, 1.5, 5.2: declared values change, overrides survive, a limit that left the config is
        kept undeclared; a declared capacity that rose grants at once."""
        for name, (capacity, max_hold_ms) in sorted(declared.items()):
            limit = self.limits.get(name)
            if limit is None:
                self.limits[name] = MLimit(name, capacity, max_hold_ms)
                continue
            before = (limit.declared, limit.declared_capacity, limit.declared_max_hold_ms)
            after = (True, capacity, max_hold_ms)
            if before == after:
                continue
            limit.declared, limit.declared_capacity, limit.declared_max_hold_ms = after
            self._settle(limit, now)
            self.audit.append(("sync", "deploy", name, None, _declared_text(*before), _declared_text(*after), now))
        for name, limit in self.limits.items():
            if name not in declared and limit.declared:
                limit.declared = False
                self.audit.append(("sync", "deploy", name, None, "declared", "undeclared", now))

    def sweep(self, now: datetime) -> MSweepReport:
        """4.1, 4.2, 3.6, 3.3: expire busy slots past their max hold, lapse reservations past their
        2 minutes (to the end of the queue), time out waits past their deadline, grant."""
        report = MSweepReport()
        for limit in self.limits.values():
            name = limit.name
            expired = [s for s in self.live(name, "busy") if s.expires_at <= now]
            lapsed = [s for s in self.live(name, "reserved") if s.reserved_until and s.reserved_until <= now]
            late = [e for e in self.waiting(name) if e.deadline <= now]
            free = self.waiting(name) and limit.capacity > self.in_use(name)
            if not (expired or lapsed or late or free):
                continue
            report.limits += 1
            for slot in expired:
                slot.state, slot.freed_at, slot.freed_by = "expired", now, "sweep"
            if expired:
                self.audit.append(("expire", "sweep", name, None, "", f"{len(expired)} slot(s)", now))
            for slot in sorted(lapsed, key=lambda s: s.entry.position if s.entry else 0):
                slot.state, slot.freed_at = "lapsed", now
                self._requeue(limit, slot, now)
            report.expired += len(expired)
            report.lapsed += len(lapsed)
            report.timed_out += self._time_out(limit, now)
            report.granted += self._settle(limit, now)
        return report

    # --- the rules every operation shares -------------------------------------------------------

    def _previous(self, request: str, now: datetime) -> MAcquisition | None:
        slots = [s for s in self.slots if s.request == request]
        live = next((s for s in slots if s.live), None)
        if live is not None and live.state == "reserved":
            if self._confirm(self.limits[live.limit], live, now):
                return MAcquisition("busy", live.limit, request, live)
            return self._previous(request, now)
        if live is not None:
            return MAcquisition("busy", live.limit, request, live)
        entries = sorted((e for e in self.entries if e.request == request), key=lambda e: e.position)
        if entries and entries[-1].state != "granted":
            last = entries[-1]
            return MAcquisition(last.state, last.limit, request, timeout_ms=last.timeout_ms, deadline=last.deadline)
        confirmed = next((s for s in slots if s.confirmed_at is not None), None)
        if confirmed is not None:
            return MAcquisition("busy", confirmed.limit, request, confirmed)
        if slots:  # granted, then its run ended before confirming
            return MAcquisition("cancelled", slots[0].limit, request)
        return None

    def _confirm(self, limit: MLimit, slot: MSlot, now: datetime) -> bool:
        """3.5, 3.6 and docs/engine.md: a confirm after the 2 minutes is refused even before the sweep."""
        assert slot.reserved_until is not None
        if now <= slot.reserved_until:
            slot.state, slot.confirmed_at = "busy", now
            return True
        slot.state, slot.freed_at = "lapsed", now
        self._requeue(limit, slot, now)
        self._settle(limit, now)
        return False

    def _enqueue(
        self, limit: MLimit, run_id: str, request: str, label: str, now: datetime, deadline: datetime, timeout_ms: int
    ) -> MEntry:
        entry = MEntry(limit.name, limit.next_position, run_id, request, label, now, deadline, timeout_ms)
        limit.next_position += 1
        self.entries.append(entry)
        return entry

    def _requeue(self, limit: MLimit, slot: MSlot, now: datetime) -> None:
        """3.6: the end of the queue, with the original deadline."""
        assert slot.entry is not None
        original = slot.entry
        self._enqueue(limit, slot.run_id, slot.request, slot.label, now, original.deadline, original.timeout_ms)

    def _time_out(self, limit: MLimit, now: datetime) -> int:
        late = [e for e in self.waiting(limit.name) if e.deadline <= now]
        for entry in late:
            entry.state, entry.finished_at = "timed_out", now
            self.woken.append(entry.run_id)
        return len(late)

    def _settle(self, limit: MLimit, now: datetime) -> int:
        """4.1, 5.3: hand free capacity to the head of the queue, one reservation per run, in
        queue order, skipping (timing out) waits past their deadline."""
        if not self.waiting(limit.name) or self.in_use(limit.name) >= limit.capacity:
            return 0
        self._time_out(limit, now)
        granted = 0
        while self.waiting(limit.name) and self.in_use(limit.name) < limit.capacity:
            head = self.waiting(limit.name)[0]
            head.state, head.finished_at = "granted", now
            self.slots.append(
                MSlot(
                    limit.name,
                    head.run_id,
                    head.request,
                    head.label,
                    "reserved",
                    head,
                    now,
                    self._expiry(limit, now),
                    reserved_until=now + RESERVATION,
                )
            )
            self.woken.append(head.run_id)
            granted += 1
        return granted

    @staticmethod
    def _expiry(limit: MLimit, now: datetime) -> datetime:
        """4.3: grant time + the max hold in force at grant; never changes."""
        return now + timedelta(milliseconds=limit.max_hold_ms)


def _declared_text(declared: bool, capacity: int, max_hold_ms: int) -> str:
    return f"capacity {capacity}, max hold {max_hold_ms} ms" + ("" if declared else ", undeclared")
