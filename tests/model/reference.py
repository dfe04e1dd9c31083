"""A reference model of the limits engine: the spec (sections 1-5, 9 keys, 10 several limits) and
docs/engine.md, in plain Python lists, with no database and no locks.

It is written from the rules, one function per operation, and keeps the same rows the engine
keeps (slots and queue entries with their final states, key pools, audit events), so that after
every step a test can hold the engine's rows up against it. Counters are not stored here: the
model counts its rows, so comparing them to the engine's counters also proves the engine's
counters equal its rows.

The grant (SPEC 9.3, 10.2-10.4) is written as the spec says it, not as the engine computes it:
one pass over the waiting runs in arrival order; a run is granted when every limit it needs has
room in its total and in the run's key pool and no owed run older than it waits on any of them;
a younger run granted a slot of a limit passes over every older run waiting on it whose key pool
there had room; a run passed over that has waited more than 2 minutes is owed, on all its limits.
A fair limit (13.2) picks among its keys by (under min, in use / weight, pass, oldest head), and
the model keeps each key's pass (its turns) by the rules of 13.2 as the engine counts them.

Where the spec is silent the model follows the engine's documented choices, each marked
"Engine choice" below: which limits an operation settles (the limits it touches and the other
limits of the groups waiting in, or reserved from, them: limits.engine.keys.lock; a group whose
limits are not all settled waits), when waits past their deadline leave the queue, the order of
runs requeued together, and what a replayed request answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction

RESERVATION = timedelta(minutes=2)  # 3.5
OWED_AFTER = timedelta(minutes=2)  # 10.4: passed over and waiting more than this: owed
DEFAULT_TIMEOUT_MS = 24 * 60 * 60 * 1000  # 3.3
HISTORY_RETENTION = timedelta(days=7)  # docs/engine.md "History" (STACKBONE_HISTORY_RETENTION default)
LIVE = ("reserved", "busy")
# Engine choice (limits.engine.keys.PASS_STRIDE): 13.2's turn in whole pass units, lcm(1..20), so
# a grant adds PASS_STRIDE // weight and both engine tracks (and this model) add the same integers.
PASS_STRIDE = 232_792_560
UNCHANGED = object()  # an operator action that leaves a value as it is


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
    declared_per_key: int | None = None
    declared: bool = True
    capacity_override: int | None = None
    max_hold_override_ms: int | None = None
    per_key_override: int | None = None
    paused: bool = False
    next_position: int = 1
    kind: str = "limit"
    declared_share: str = "fifo"  # SPEC 13.1
    share_override: str = ""
    declared_burst: float | None = None  # the box bound (SPEC 12): its base is per_key
    burst_override: float | None = None
    declared_on_full: str = "wait"  # SPEC 14.1
    declared_max_waiting: int | None = None
    declared_max_waiting_per_key: int | None = None
    replaced_count: int = 0  # 14.3, 14.6: entries of its queue a replace took out

    @property
    def share(self) -> str:
        return self.share_override or self.declared_share

    @property
    def burst(self) -> float | None:
        return self.declared_burst if self.burst_override is None else self.burst_override

    def box_text(self) -> str:
        burst = repr(float(self.burst or 0)).removesuffix(".0")  # its shortest exact text
        return f"base {self.per_key}, burst {burst}, ceiling {self.capacity}"

    @property
    def capacity(self) -> int:
        return self.declared_capacity if self.capacity_override is None else self.capacity_override

    @property
    def max_hold_ms(self) -> int:
        return self.declared_max_hold_ms if self.max_hold_override_ms is None else self.max_hold_override_ms

    @property
    def per_key(self) -> int | None:
        """9.1, 9.4: every key's pool size (and the no-key pool's), or None: only the total."""
        return self.declared_per_key if self.per_key_override is None else self.per_key_override


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
    key: str = ""
    group_size: int = 1
    arrival: int = 0  # one order over every queue: "oldest" in 9.3 and 10.3-10.4
    state: str = "waiting"
    finished_at: datetime | None = None
    passed_over_at: datetime | None = None  # 10.4; the same on every entry of one waiting run
    fair_pass: int | None = None  # 13.2: its key's pass when it joined (requeued: when it came back); None: fifo
    replaced_by: str = ""  # 14.3: the request that replaced it (state 'replaced')
    replacing: bool = False  # 14.3: joined with on_full 'replace' in force


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
    key: str = ""
    group_size: int = 1
    ends_with_run: bool = False  # with_limit's slot (2.5): freed when its run ends
    engine_id: str | None = None  # the engine's id for the same slot, once matched
    fair_pass: int | None = None  # 13.2: its key's pass the grant was ranked at (before its stride); None: fifo

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def ident(self) -> tuple[str, str, int | None]:
        """What names this slot in both worlds: its request, limit and queue position."""
        return (self.request, self.limit, None if self.entry is None else self.entry.position)


@dataclass(frozen=True)
class MAcquisition:
    state: str
    limit: str
    request: str
    slot: MSlot | None = None
    timeout_ms: int | None = None
    deadline: datetime | None = None
    # An acquisition answered by the rules of keys and groups: its slots in the order given (10.1).
    slots: tuple[MSlot, ...] | None = None
    reason: str = ""  # 14.2, 14.5: why it was answered 'skipped' or 'refused'
    replaced_by: str = ""  # 14.3: the request, and its run, that replaced it ('replaced')
    replaced_by_run: str = ""


@dataclass
class MSweepReport:
    limits: int = 0
    expired: int = 0
    lapsed: int = 0
    timed_out: int = 0
    granted: int = 0


@dataclass
class Tally:
    lapsed: int = 0
    timed_out: int = 0
    granted: int = 0


# (action, actor, limit, slot, old value, new value, at, key)
AuditRow = tuple[str, str, str, MSlot | None, str, str, datetime, str]


@dataclass
class Model:
    limits: dict[str, MLimit] = field(default_factory=dict)  # in the engine's id order
    entries: list[MEntry] = field(default_factory=list)
    slots: list[MSlot] = field(default_factory=list)
    # Key pool rows (limit, key): created the first time a key is used on a limit or its pool
    # size is set; the value is the key's own pool size, if an operator set one (9.4).
    pools: dict[tuple[str, str], int | None] = field(default_factory=dict)
    audit: list[AuditRow] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)  # runs announced by the last operation
    asked: dict[str, tuple[str, ...]] = field(default_factory=dict)  # request: its limits, as given
    tally: Tally = field(default_factory=Tally)
    key_weights: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # 13.1: (weight, min)
    whole_runs_held_back: int = 0  # 12.3: times a whole run found its limit at the base (statistics)
    fair_reordered: int = 0  # 13.2: a fair limit chose another key's run than its oldest (statistics)
    # 13.2: each key's pass on a limit, (limit, '') the no-key runs'; absent: 0 (no turn taken yet,
    # or the turns restarted by a switch between fifo and fair).
    passes: dict[tuple[str, str], int] = field(default_factory=dict)
    turns_seen: Counter[str] = field(default_factory=Counter)  # 13.2: where the turns were in play (statistics)
    next_arrival: int = 1
    replaces: int = 0  # 14.3: acquisitions that replaced waiting runs (statistics)

    # --- what the engine's counters must say --------------------------------------------------

    def live(self, limit: str, state: str | None = None) -> list[MSlot]:
        return [s for s in self.slots if s.limit == limit and (s.state == state if state else s.live)]

    def waiting(self, limit: str) -> list[MEntry]:
        return sorted((e for e in self.entries if e.limit == limit and e.state == "waiting"), key=lambda e: e.position)

    def in_use(self, limit: str) -> int:
        return len(self.live(limit))

    def room(self, limit: str) -> int:
        """5.3, 5.6: the slots a grant may hand out now: none while the limit is paused, else its
        capacity less busy and reserved (never below 0)."""
        lim = self.limits[limit]
        return 0 if lim.paused else max(lim.capacity - self.in_use(limit), 0)

    def pool_size(self, limit: str, key: str) -> int | None:
        """9.1, 9.4: the key's own size if an operator set one, else the limit's per_key."""
        own = self.pools.get((limit, key)) if key else None
        return own if own is not None else self.limits[limit].per_key

    def pool_in_use(self, limit: str, key: str) -> int:
        return sum(1 for s in self.live(limit) if s.key == key)

    def pool_room(self, limit: str, key: str) -> bool:
        size = self.pool_size(limit, key)
        return size is None or self.pool_in_use(limit, key) < size

    def whole_run_room(self, limit: str, request: str) -> bool:
        """12.3: a limit serves at most the box's base of whole runs (acquisitions '<run>:start')
        at once, whatever its capacity; the box itself is capped by its pools."""
        box = self.limits.get(BOX)
        if box is None or not box.declared or self.limits[limit].kind == "box" or not request.endswith(":start"):
            return True
        assert box.per_key is not None
        room = sum(1 for s in self.live(limit) if s.request.endswith(":start")) < box.per_key
        self.whole_runs_held_back += not room
        return room

    def plain(self, name: str) -> bool:
        """Limit.is_plain: no per_key in force, not fair (its grants take turns, 13.2) and no keyed
        or group entry waiting: the case of one pool and no groups (its replays answer without
        `slots`)."""
        limit = self.limits.get(name)
        if limit is None:
            return True
        return (
            limit.per_key is None
            and limit.share != "fair"
            and all(e.key == "" and e.group_size == 1 for e in self.waiting(name))
        )

    def waiting_of(self, request: str) -> list[MEntry]:
        return sorted((e for e in self.entries if e.request == request and e.state == "waiting"), key=self._order)

    # --- the operations -----------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        *,
        run_id: str,
        request: str,
        label: str,
        timeout_ms: int | None,
        now: datetime,
        key: str | None = None,
        on_full: str | None = None,
    ) -> MAcquisition:
        """2.2, 2.3: a replay answers from what became of the request (confirming a slot reserved
        for it); a new request gets a busy slot if nobody waits and one is free, else queues. With
        a key, or on a limit with key pools or groups waiting, the rules of 9 and 10 apply; with
        on_full 'skip' or a cap on its queue, those of 14 (acquire_group's)."""
        if key is not None or not self.plain(name) or self._answers_at_once([name], on_full):
            # One slot's handle is its slot id (on PostgreSQL a replay holding a live slot is
            # answered without `slots`): the slots are not part of this answer.
            answer = self.acquire_group(
                [name], run_id=run_id, request=request, label=label, timeout_ms=timeout_ms, key=key, now=now,
                on_full=on_full,
            )  # fmt: skip
            return replace(answer, slots=None)
        previous = self._previous(request, now)
        if previous is not None:
            return previous
        limit = self.limits.get(name)
        if limit is None or not limit.declared:  # 1.5
            raise ModelError("limit")
        self.asked.setdefault(request, (name,))
        if not self.waiting(name) and self.room(name):
            slot = self._busy_slot(limit, run_id, request, label, "", 1, now)
            return MAcquisition("busy", name, request, slot)
        timeout_ms = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
        deadline = now + timedelta(milliseconds=timeout_ms)
        entry = self._enqueue(limit, run_id, request, label, "", 1, now, deadline, timeout_ms)
        woken_before = len(self.woken)
        self._settle_all([limit], now)
        mine = next((s for s in self.live(name, "reserved") if s.entry is entry), None)
        if mine is not None:
            # The caller is the one granted: it confirms at once and is not woken (it is awake).
            del self.woken[self.woken.index(run_id, woken_before)]
            self._confirm_together([mine], self._lock([name]), now)
            return MAcquisition("busy", name, request, mine)
        return MAcquisition("waiting", name, request, timeout_ms=timeout_ms, deadline=entry.deadline)

    def acquire_group(
        self,
        names: list[str],
        *,
        run_id: str,
        request: str,
        label: str,
        timeout_ms: int | None,
        now: datetime,
        key: str | None = None,
        box: str | None = None,
        on_full: str | None = None,
    ) -> MAcquisition:
        """10.1, 10.2 with 9.1-9.3: one slot of each limit, all or nothing. Busy at once when
        nobody waits on any of them and each has room in its total and the key's pool; otherwise
        the run joins every queue and may be granted (then confirms at once) or waits holding
        none of its slots.

        12.2, 12.3 with `box` (the key of the run's workflow in the box): the box bound is one
        more limit, last, from that key's pool. A busy box slot the run holds is kept when the
        other limits have room at once; otherwise it is given back and the run waits for every
        limit and a box slot together."""
        if key is not None:
            _check_key(key)
        names = [*names, BOX] if box is not None else list(names)
        previous = self._previous_group(request, now)
        if previous is not None:
            return previous
        if any(name not in self.limits or not self.limits[name].declared for name in names):
            raise ModelError("limit")
        key = key or ""
        keys = [key] * (len(names) - 1) + [box if box is not None else key]
        self.asked.setdefault(request, tuple(names))
        replaced: list[MEntry] = []
        replacing = False
        mine = [self.limits[name] for name in names]
        size = len(names)
        locked = self._lock(names)
        held = None
        if box is not None:
            held = next((s for s in self.live(BOX, "busy") if s.run_id == run_id), None)
        needed = list(zip(mine, keys, strict=True))[: -1 if held is not None else None]
        free = all(
            not self.waiting(lim.name)
            and self.room(lim.name)
            and self.pool_room(lim.name, k)
            and self.whole_run_room(lim.name, request)
            for lim, k in needed
        )
        if not free and self._answers_at_once(names, on_full):
            # 14.2, 14.5, 14.7 (a run's start '<run>:start' too): the runs waiting first; the room
            # left is this run's if it fits
            timeout_ms = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
            strategy = on_full or _strictest(lim.declared_on_full for lim in mine)
            replacing = strategy == "replace"
            self._settle_keys(locked, now)
            stopped = next(((lim, why) for lim, k in needed if (why := self._refusal(lim, k, request, now))), None)
            if stopped is not None and strategy == "replace":  # 14.3: the key's runs waiting for these limits
                replaced = self._replaceable(names, keys, request)
                if replaced:
                    stopped = None
            if stopped is not None:  # else: it joins, and the room left is granted to it at once
                if strategy != "skip":
                    stopped = next(
                        ((lim, why) for lim, k in zip(mine, keys, strict=True) if (why := self._queue_full(lim, k))),
                        None,
                    )
                if stopped is not None:
                    self.asked.pop(request, None)  # nothing of it is kept: asked again, it is new
                    state = "skipped" if strategy == "skip" else "refused"
                    return MAcquisition(state, stopped[0].name, request, timeout_ms=timeout_ms, reason=stopped[1])
        if free:
            slots = tuple(self._busy_slot(lim, run_id, request, label, k, len(needed), now) for lim, k in needed)
            slots += (held,) if held is not None else ()
            return MAcquisition("busy", names[0], request, slots[0], slots=slots)
        if held is not None:
            held.state, held.freed_at, held.freed_by = "released", now, "wait"
        timeout_ms = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
        deadline = now + timedelta(milliseconds=timeout_ms)
        replaced_runs = list(dict.fromkeys(e.run_id for e in sorted(replaced, key=self._order)))
        for lim, k in zip(mine, keys, strict=True):
            here = [e for e in replaced if e.limit == lim.name]
            if here:
                self._take_place(lim, here, run_id, request, label, now, deadline, timeout_ms)
            else:
                self._enqueue(lim, run_id, request, label, k, size, now, deadline, timeout_ms).replacing = replacing
        if replaced:  # 14.3: their runs wake, and their acquire answers 'replaced'
            self.replaces += 1
            self.woken += replaced_runs
        woken_before = len(self.woken)
        # Engine choice: the group path settles with the rules of keys and groups, whatever the
        # limits (limits.engine.grant.settle).
        self._settle_keys(locked, now)
        granted = [s for s in self.slots if s.request == request and s.state == "reserved"]
        if not granted and replacing and not replaced:
            # 14.3, engine choice: the room left fitted it before it joined, yet the grant did not
            # reach it (it gave back its box slot, 12.2, and an older run took it): it replaces now
            late = self._replaceable(names, keys, request)
            if late:
                self.replaces += 1
                self.woken += list(dict.fromkeys(e.run_id for e in sorted(late, key=self._order)))
                for lim in mine:
                    self._swap_place(lim, [e for e in late if e.limit == lim.name], request, now)
                self._settle_keys(locked, now)
                granted = [s for s in self.slots if s.request == request and s.state == "reserved"]
        if granted:
            del self.woken[self.woken.index(run_id, woken_before)]
            self._confirm_together(granted, locked, now)
            by_limit = {s.limit: s for s in granted}
            slots = tuple(by_limit[name] for name in names)
            return MAcquisition("busy", names[0], request, slots[0], slots=slots)
        return MAcquisition("waiting", names[0], request, timeout_ms=timeout_ms, deadline=deadline, slots=())

    def confirm(self, slot: MSlot | None, now: datetime) -> bool:
        """3.5, 3.6, 10.2: a reservation confirmed in time turns busy, with the rest of its group;
        a late confirm lapses them all (the run goes to the end of each queue) and the freed
        capacity goes to the next runs."""
        if slot is None or slot.state != "reserved":
            return False
        locked = self._lock([slot.limit])
        group = [s for s in self.slots if s.request == slot.request and s.live]
        return self._confirm_together(group, locked, now)

    def release(self, slot: MSlot | None, *, actor: str | None, now: datetime) -> bool:
        """2.4, 5.1, 10.1: frees a busy or reserved slot; anything else is False and changes
        nothing. A busy slot of a group is released on its own; a released reservation sends its
        run (its whole group) to the end of the queue with its deadline (docs/engine.md)."""
        if slot is None or not slot.live:
            return False
        limit, old = self.limits[slot.limit], slot.state
        locked = self._lock([slot.limit])
        if old == "reserved":
            together = [s for s in self.slots if s.request == slot.request and s.state == "reserved"]
            self._take_back(together, "released", now, freed_by=actor or "")
        else:
            slot.state, slot.freed_at, slot.freed_by = "released", now, actor or ""
        self._settle_all(locked, now)
        if actor is not None:
            self.audit.append(("release", actor, limit.name, slot, old, "released", now, ""))
        return True

    def tie_to_run(self, slot: MSlot | None, run_id: str) -> bool:
        """2.5: with_limit ties its busy slot to its run."""
        if slot is None or slot.state != "busy" or slot.run_id != run_id:
            return False
        slot.ends_with_run = True
        return True

    def end_run(self, run_id: str, now: datetime) -> int:
        """3.4, 3.7, 2.7, 2.5: waits are cancelled, reservations and with_limit's busy slots
        freed, other busy slots kept; the capacity goes to the next runs."""
        waits = [e for e in self.entries if e.run_id == run_id and e.state == "waiting"]
        ending = [
            s
            for s in self.slots
            if s.run_id == run_id and (s.state == "reserved" or (s.state == "busy" and s.ends_with_run))
        ]
        if not waits and not ending:
            return 0
        locked = self._lock({e.limit for e in waits} | {s.limit for s in ending})
        for entry in waits:
            entry.state, entry.finished_at = "cancelled", now
        for slot in ending:
            slot.state, slot.freed_at = "run_ended", now
        self._settle_all(locked, now)
        return len(waits) + len(ending)

    def set_capacity(self, name: str, value: int | None, *, actor: str, now: datetime) -> None:
        """5.2, 5.3: raising grants at once; lowering takes nothing back."""
        limit = self.limits[name]
        old = limit.capacity
        locked = self._lock([name])
        limit.capacity_override = value
        self._settle_all(locked, now)
        new = f"{limit.capacity} (declared)" if value is None else str(limit.capacity)
        self.audit.append(("capacity", actor, name, None, str(old), new, now, ""))

    def set_paused(self, name: str, paused: bool, *, actor: str, now: datetime) -> None:
        """5.6: a paused limit grants nothing (held slots stay, waits keep their places and
        deadlines, new acquisitions queue); resuming grants at once, as a capacity raise does.
        Audited; pausing a paused limit (or resuming a running one) changes nothing."""
        limit = self.limits.get(name)
        if limit is None:
            raise ModelError("limit")
        if limit.paused == paused:
            return
        locked = self._lock([name])
        limit.paused = paused
        self._settle_all(locked, now)
        old, new = ("running", "paused") if paused else ("paused", "running")
        self.audit.append(("pause" if paused else "resume", actor, name, None, old, new, now, ""))

    def set_max_hold(self, name: str, value_ms: int | None, *, actor: str, now: datetime) -> None:
        """5.4: only slots granted afterwards get the new max hold."""
        limit = self.limits[name]
        old = limit.max_hold_ms
        limit.max_hold_override_ms = value_ms
        new = f"{limit.max_hold_ms} (declared)" if value_ms is None else str(limit.max_hold_ms)
        self.audit.append(("max_hold", actor, name, None, str(old), new, now, ""))

    def set_per_key(self, name: str, value: int | None, *, key: str | None, actor: str, now: datetime) -> None:
        """9.4: per_key for the whole limit, or one key's pool size, from 1 to the capacity; None
        resets it. Audited; raising grants at once, lowering takes nothing back."""
        if key is not None:
            _check_key(key)
        limit = self.limits.get(name)
        if limit is None:
            raise ModelError("limit")
        if value is not None and not 1 <= value <= limit.capacity:
            raise ModelError("per_key")
        locked = self._lock([name])
        if key is None:
            old = _size_text(limit.per_key)
            limit.per_key_override = value
            new = f"{_size_text(limit.declared_per_key)} (declared)" if value is None else str(value)
        else:
            old = _size_text(self.pool_size(name, key))
            self.pools[(name, key)] = value
            new = _size_text(self.pool_size(name, key)) + (" (per_key)" if value is None else "")
        self._settle_all(locked, now)
        self.audit.append(("per_key", actor, name, None, old, new, now, key or ""))

    def set_share(self, name: str, value: str | None, *, actor: str, now: datetime) -> None:
        """13.5: switch a limit between fifo and fair, or back to its declared share (None)."""
        if value is not None and value not in ("fifo", "fair"):
            raise ModelError("share")
        limit = self.limits.get(name)
        if limit is None:
            raise ModelError("limit")
        locked = self._lock([name])
        old = limit.share
        limit.share_override = value or ""
        if limit.share != old:
            self._restart_turns(name)
        self._settle_all(locked, now)
        new = f"{limit.share} (declared)" if value is None else limit.share
        self.audit.append(("share", actor, name, None, old, new, now, ""))

    def set_key_weights(
        self, name: str, *, key: str, weight: object = UNCHANGED, minimum: object = UNCHANGED, actor: str, now: datetime
    ) -> None:
        """13.1, 13.5: one key's weight (1-100; None: back to 1) or min (0 to the capacity; None: 0).
        The key's pool row is made if it has none. Audited."""
        if weight is not UNCHANGED and weight is not None and not (isinstance(weight, int) and 1 <= weight <= 100):
            raise ModelError("weight")
        _check_key(key)
        limit = self.limits.get(name)
        if limit is None:
            raise ModelError("limit")
        if (
            minimum is not UNCHANGED
            and minimum is not None
            and not (isinstance(minimum, int) and 0 <= minimum <= limit.capacity)
        ):
            raise ModelError("min")
        locked = self._lock([name])
        self.pools.setdefault((name, key), None)
        old_weight, old_min = self.key_weights.get((name, key), (1, 0))
        if weight is not UNCHANGED:
            value = 1 if weight is None else weight
            self.key_weights[(name, key)] = (value, old_min)  # type: ignore[assignment]
            action, old, new = "weight", str(old_weight), f"{value} (default)" if weight is None else str(value)
        else:
            value = 0 if minimum is None else minimum
            self.key_weights[(name, key)] = (old_weight, value)  # type: ignore[assignment]
            action, old, new = "min", str(old_min), f"{value} (default)" if minimum is None else str(value)
        self._settle_all(locked, now)
        self.audit.append((action, actor, name, None, old, new, now, key))

    def sync(
        self,
        declared: dict[str, tuple[int, int, int | None]],
        now: datetime,
        box: tuple[int, float] | None = None,
        shares: dict[str, str] | None = None,
        caps: dict[str, tuple[str, int | None, int | None]] | None = None,
    ) -> None:
        """1.4, 1.5, 5.2, 9.4, 13.1, 14.1: declared values change, overrides survive, a limit that
        left the config is kept undeclared; a declared capacity or per_key that rose grants at
        once; a cap lowered takes nobody out of the queue (14.5)."""
        shares = shares or {}
        caps = caps or {}
        for name, (capacity, max_hold_ms, per_key) in sorted(declared.items()):
            share = shares.get(name, "fifo")
            on_full, max_waiting, max_waiting_per_key = caps.get(name, ("wait", None, None))
            limit = self.limits.get(name)
            if limit is None:
                self.limits[name] = MLimit(
                    name, capacity, max_hold_ms, per_key, declared_share=share, declared_on_full=on_full,
                    declared_max_waiting=max_waiting, declared_max_waiting_per_key=max_waiting_per_key,
                )  # fmt: skip
                continue
            before = (
                limit.declared,
                limit.declared_capacity,
                limit.declared_max_hold_ms,
                limit.declared_per_key,
                limit.declared_share,
                limit.declared_on_full,
                limit.declared_max_waiting,
                limit.declared_max_waiting_per_key,
            )
            after = (True, capacity, max_hold_ms, per_key, share, on_full, max_waiting, max_waiting_per_key)
            if before == after:
                continue
            if not limit.share_override and limit.declared_share != share:
                self._restart_turns(name)  # the share in force switches
            (
                limit.declared,
                limit.declared_capacity,
                limit.declared_max_hold_ms,
                limit.declared_per_key,
                limit.declared_share,
                limit.declared_on_full,
                limit.declared_max_waiting,
                limit.declared_max_waiting_per_key,
            ) = after
            self._settle_all(self._lock([name]), now)
            self.audit.append(("sync", "deploy", name, None, _declared_text(*before), _declared_text(*after), now, ""))
        self._sync_box(box, now)
        for name, limit in self.limits.items():
            if limit.kind == "limit" and name not in declared and limit.declared:
                limit.declared = False
                self.audit.append(("sync", "deploy", name, None, "declared", "undeclared", now, ""))

    def _sync_box(self, box: tuple[int, float] | None, now: datetime) -> None:
        """12.1, 12.5: the box bound is created, changed (overrides kept, its capacity floor(base x
        burst) of the values in force) or undeclared like a limit."""
        limit = self.limits.get(BOX)
        if box is None:
            if limit is not None and limit.declared:
                limit.declared = False
                self.audit.append(("sync", "deploy", BOX, None, "declared", "undeclared", now, ""))
            return
        base, burst = box
        if limit is None:
            self.limits[BOX] = MLimit(
                BOX, _ceiling(base, burst), MAX_DURATION_MS, base, kind="box", declared_burst=burst
            )
            return
        if (limit.declared, limit.declared_per_key, limit.declared_burst) == (True, base, burst):
            return
        old = limit.box_text() + ("" if limit.declared else ", undeclared")
        limit.declared, limit.declared_per_key, limit.declared_burst = True, base, burst
        limit.declared_capacity = _ceiling(base, burst)
        self._keep_box_capacity(limit)
        self._settle_all(self._lock([BOX]), now)
        self.audit.append(("sync", "deploy", BOX, None, old, limit.box_text(), now, ""))

    @staticmethod
    def _keep_box_capacity(limit: MLimit) -> None:
        overridden = limit.per_key_override is not None or limit.burst_override is not None
        assert limit.per_key is not None and limit.burst is not None
        limit.capacity_override = _ceiling(limit.per_key, limit.burst) if overridden else None

    def set_box(self, *, base: object, burst: object, actor: str, now: datetime) -> None:
        """12.5: an operator overrides or resets (None) the base or the burst; raising grants at
        once, lowering takes nothing back. Audited."""
        limit = self.limits.get(BOX)
        if limit is None or not limit.declared:
            raise ModelError("base" if base is not UNCHANGED else "burst")
        locked = self._lock([BOX])
        old = limit.box_text()
        if base is not UNCHANGED:
            limit.per_key_override = base  # type: ignore[assignment]
        if burst is not UNCHANGED:
            limit.burst_override = burst  # type: ignore[assignment]
        self._keep_box_capacity(limit)
        self._settle_all(locked, now)
        self.audit.append(("box", actor, BOX, None, old, limit.box_text(), now, ""))

    def sweep(self, now: datetime) -> MSweepReport:
        """4.1, 4.2, 3.6, 3.3: for each limit with work (found first, for all of them), expire
        busy slots past their max hold, lapse reservations past their 2 minutes (to the end of the
        queue; a group's all together), time out waits past their deadline, grant; then delete
        history older than the retention."""
        report = MSweepReport()
        work = [
            limit
            for limit in self.limits.values()
            if any(s.expires_at <= now for s in self.live(limit.name, "busy"))
            or any(s.reserved_until and s.reserved_until <= now for s in self.live(limit.name, "reserved"))
            or any(e.deadline <= now for e in self.waiting(limit.name))
            or (self.waiting(limit.name) and self.room(limit.name))
        ]
        for limit in work:
            name = limit.name
            self.tally = Tally()
            locked = self._lock([name])
            expired = [s for s in self.live(name, "busy") if s.expires_at <= now]
            for slot in expired:
                slot.state, slot.freed_at, slot.freed_by = "expired", now, "sweep"
            if expired:
                self.audit.append(("expire", "sweep", name, None, "", f"{len(expired)} slot(s)", now, ""))
            lapsed = sorted(
                (s for s in self.live(name, "reserved") if s.reserved_until and s.reserved_until <= now),
                key=lambda s: s.entry.position if s.entry else 0,
            )
            # Engine choice: single runs go back to the end of the queue first, then groups.
            self._take_back([s for s in lapsed if s.group_size == 1], "lapsed", now)
            for request in dict.fromkeys(s.request for s in lapsed if s.group_size > 1):
                self._take_back(
                    [s for s in self.slots if s.request == request and s.state == "reserved"], "lapsed", now
                )
            self._time_out(limit, now)
            self._settle_all(locked, now)
            report.limits += 1
            report.expired += len(expired)
            report.lapsed += self.tally.lapsed
            report.timed_out += self.tally.timed_out
            report.granted += self.tally.granted
        self._purge(now - HISTORY_RETENTION)
        return report

    # --- the rules every operation shares -------------------------------------------------------

    @staticmethod
    def _order(entry: MEntry) -> tuple[int, str]:
        return (entry.arrival, entry.limit)

    def _lock(self, names: Iterable[str]) -> list[MLimit]:
        """Engine choice (keys.lock): an operation settles the limits it touches, the other limits
        of every group reserved from them (a release frees them all), and the other limits of
        every group waiting in any of these; then, again and again, the other limits of every
        group waiting in a limit so added where a passed-over run waits (its grant here would
        hand the capacity held for it to the groups behind it, 10.4)."""
        touched = set(names)
        held = {s.request for s in self.slots if s.limit in touched and s.state == "reserved" and s.group_size > 1}
        touched |= {s.limit for s in self.slots if s.request in held and s.state == "reserved"}
        expand = set(touched)
        checked: set[str] = set()
        while expand:
            groups = {
                e.request for e in self.entries if e.limit in expand and e.state == "waiting" and e.group_size > 1
            }
            checked |= expand | touched
            touched |= {e.limit for e in self.entries if e.request in groups and e.state == "waiting"}
            expand = {
                e.limit
                for e in self.entries
                if e.limit in touched - checked and e.state == "waiting" and e.passed_over_at is not None
            }
        return [limit for limit in self.limits.values() if limit.name in touched]

    def _previous(self, request: str, now: datetime) -> MAcquisition | None:
        """What a replay of a one-limit request answers: its live slot (a reservation confirmed,
        or lapsed if late), else what became of its latest wait, else a slot once confirmed."""
        slots = [s for s in self.slots if s.request == request]
        live = next((s for s in slots if s.live), None)
        if live is not None and live.state == "reserved":
            if self.confirm(live, now):
                return MAcquisition("busy", live.limit, request, live)
            return self._previous(request, now)
        if live is not None:
            return MAcquisition("busy", live.limit, request, live)
        entries = sorted((e for e in self.entries if e.request == request), key=lambda e: e.position)
        if entries and entries[-1].state != "granted":
            last = entries[-1]
            by = last.replaced_by  # 14.3: a replaced wait names what replaced it
            return MAcquisition(
                last.state, last.limit, request, timeout_ms=last.timeout_ms, deadline=last.deadline, replaced_by=by,
                replaced_by_run=self._run_of(by),
            )  # fmt: skip
        confirmed = next((s for s in slots if s.confirmed_at is not None), None)
        if confirmed is not None:
            return MAcquisition("busy", confirmed.limit, request, confirmed)
        if slots:  # granted, then its run ended before confirming
            return MAcquisition("cancelled", slots[0].limit, request)
        return None

    def _run_of(self, request: str) -> str:
        """14.3: the run of the acquisition `request` (a replacer), from its entries or slots."""
        runs = [e.run_id for e in self.entries if request and e.request == request]
        runs += [s.run_id for s in self.slots if request and s.request == request]
        return runs[0] if runs else ""

    def _previous_group(self, request: str, now: datetime) -> MAcquisition | None:
        """A replay of an acquisition by the rules of keys and groups: its live slots in the
        order given (10.1; reservations confirmed together), else what became of its latest wait
        (all its entries joined together), else the slots of its latest confirmed grant."""
        names = self.asked.get(request, ())
        slots = [s for s in self.slots if s.request == request]
        live = [s for s in slots if s.live]
        if any(s.state == "reserved" for s in live):
            locked = self._lock({s.limit for s in live})
            self._confirm_together(live, locked, now)
            return self._previous_group(request, now)
        if live:
            return self._busy_answer(request, names, live)
        entries = sorted((e for e in self.entries if e.request == request), key=self._order)
        if entries:
            latest = entries[-entries[-1].group_size :]
            first = latest[0]
            states = {e.state for e in latest}
            if states == {"waiting"}:
                return MAcquisition(
                    "waiting", names[0], request, timeout_ms=first.timeout_ms, deadline=first.deadline, slots=()
                )
            if "replaced" in states:  # 14.3
                by = first.replaced_by
                return MAcquisition(
                    "replaced", names[0], request, timeout_ms=first.timeout_ms, deadline=first.deadline, slots=(),
                    replaced_by=by, replaced_by_run=self._run_of(by),
                )  # fmt: skip
            if "timed_out" in states:
                return MAcquisition(
                    "timed_out", names[0], request, timeout_ms=first.timeout_ms, deadline=first.deadline, slots=()
                )
            if "cancelled" in states or "waiting" in states:  # its wait's timeout and deadline, as for the others
                return MAcquisition(
                    "cancelled", names[0], request, timeout_ms=first.timeout_ms, deadline=first.deadline, slots=()
                )
        confirmed = [s for s in slots if s.confirmed_at is not None]
        if confirmed:
            newest = max(s.granted_at for s in confirmed)
            return self._busy_answer(request, names, [s for s in confirmed if s.granted_at == newest])
        if slots:
            return MAcquisition("cancelled", names[0] if names else slots[0].limit, request, slots=())
        return None

    @staticmethod
    def _busy_answer(request: str, names: tuple[str, ...], slots: list[MSlot]) -> MAcquisition:
        by_limit = {s.limit: s for s in slots}
        ordered = tuple(by_limit[name] for name in names if name in by_limit)
        return MAcquisition("busy", ordered[0].limit, request, ordered[0], slots=ordered)

    def _busy_slot(
        self, limit: MLimit, run_id: str, request: str, label: str, key: str, size: int, now: datetime
    ) -> MSlot:
        """2.2: a busy slot at once, no queue entry. On a fair limit its key enters the turns if it
        had nothing there, then takes a turn (13.2)."""
        self._enter_turns(limit, key)
        slot = MSlot(
            limit.name,
            run_id,
            request,
            label,
            "busy",
            None,
            now,
            self._expiry(limit, now),
            confirmed_at=now,
            key=key,
            group_size=size,
            fair_pass=self._take_turn(limit, key),
        )
        self.slots.append(slot)
        self._touch(limit.name, key)
        return slot

    def _confirm_together(self, slots: list[MSlot], locked: list[MLimit], now: datetime) -> bool:
        """3.5, 3.6, 10.2 and docs/engine.md: the reservations of one acquisition turn busy
        together within their 2 minutes; a confirm after them is refused even before the sweep:
        they all lapse, the run goes to the end of each queue, and the freed capacity is handed
        on."""
        reserved = [s for s in slots if s.state == "reserved"]
        if not reserved:
            return bool(slots)
        if all(s.reserved_until is not None and now <= s.reserved_until for s in reserved):
            for slot in reserved:
                slot.state, slot.confirmed_at = "busy", now
            return True
        self._take_back(reserved, "lapsed", now)
        self._settle_all(locked, now)
        return False

    def _take_back(self, reserved: list[MSlot], state: str, now: datetime, *, freed_by: str = "") -> None:
        """3.6, 10.2: reservations freed unconfirmed (lapsed, or released by an operator): their
        runs go to the end of each queue, keeping their deadline, key and group."""
        for slot in reserved:
            slot.state, slot.freed_at, slot.freed_by = state, now, freed_by
            original = slot.entry
            assert original is not None, "a reserved slot always comes from the queue"
            self._enqueue(
                self.limits[slot.limit],
                slot.run_id,
                slot.request,
                slot.label,
                slot.key,
                slot.group_size,
                now,
                original.deadline,
                original.timeout_ms,
                requeued=True,
            )
        if state == "lapsed":
            self.tally.lapsed += len(reserved)

    def _enqueue(
        self,
        limit: MLimit,
        run_id: str,
        request: str,
        label: str,
        key: str,
        size: int,
        now: datetime,
        deadline: datetime,
        timeout_ms: int,
        *,
        requeued: bool = False,
    ) -> MEntry:
        """A run joins the end of a limit's queue. On a fair limit its key enters the turns if it
        had nothing held or waiting there (13.2); engine choice: not a run `requeued` after its
        reservation was taken back (its key went straight from reserved to waiting), and a requeue
        takes no turn."""
        if not requeued:
            self._enter_turns(limit, key)
        entry = MEntry(
            limit.name,
            limit.next_position,
            run_id,
            request,
            label,
            now,
            deadline,
            timeout_ms,
            key,
            size,
            self.next_arrival,
            fair_pass=self.fair_pass(limit.name, key) if limit.share == "fair" else None,
        )
        limit.next_position += 1
        self.next_arrival += 1
        self.entries.append(entry)
        self._touch(limit.name, key)
        return entry

    def _touch(self, limit: str, key: str) -> None:
        if key:
            self.pools.setdefault((limit, key), None)

    def _time_out(self, limit: MLimit, now: datetime, settled: set[str] | None = None) -> None:
        """3.3: waits past their deadline leave the queue; their runs are woken. A group's entries
        share their deadline and leave every queue together. Engine choice: only in a settle of
        all of the group's limits (`settled`); until then they wait, never granted."""
        late = [e for e in self.waiting(limit.name) if e.deadline <= now]
        leaving = [e for e in late if e.group_size == 1]
        for request in dict.fromkeys(e.request for e in late if e.group_size > 1):
            together = self.waiting_of(request)
            if settled is not None and all(e.limit in settled for e in together):
                leaving += together
        for entry in leaving:
            entry.state, entry.finished_at = "timed_out", now
            self.woken.append(entry.run_id)
        self.tally.timed_out += len(leaving)

    def _settle_all(self, locked: list[MLimit], now: datetime) -> None:
        """Hand the free capacity of the settled limits to their queues, all together by the
        rules of 3.3-3.5, 9 and 10 (a plain limit is their case of one pool and no groups)."""
        self._settle_keys(locked, now)

    def _settle_keys(self, locked: list[MLimit], now: datetime) -> None:
        """9.3, 10.2-10.4: time out the waits past their deadline (engine choice: on every settled
        limit), then take the waiting runs oldest first, once each, and grant each that can be
        granted now: every limit it needs has room in its total and in the run's key pool, and no
        owed run older than it waits on any of them. A run that cannot does not stop younger
        runs. Engine choice: a group with a limit that is not being settled waits for the next
        settle of it."""
        names = {limit.name for limit in locked}
        for limit in locked:
            self._time_out(limit, now, names)
        if any(limit.share == "fair" for limit in locked):
            self._settle_with_fair_limits(locked, names, now)
            return
        candidates = sorted(
            {e.request: e for e in self.entries if e.state == "waiting" and e.limit in names}.values(), key=self._order
        )
        for first in candidates:
            entries = self.waiting_of(first.request)
            if len(entries) == entries[0].group_size and all(self._open_to(e, names, now) for e in entries):
                self._reserve(entries, now)

    def _settle_with_fair_limits(self, locked: list[MLimit], names: set[str], now: datetime) -> None:
        """13.2 with 10.2-10.4, as the engine walks it (grant._Grant; engine choices where the SPEC
        is silent): plain limits first, their heads in queue order; then one stream per limit, a
        fifo limit's waiting runs in queue order (read in one batch, as the engine's scan does), a
        fair limit's chosen again after each one is dealt with (the keys under their min first,
        then the smallest in use / weight, ties to the smallest pass, then to the oldest head;
        within a key arrival order; each grant moves its key's pass on, so the next choice reads it),
        merged by arrival. A group met in one stream is left, undecided, to another of its limits
        that is fair when an older run of its key waits there that this settle has not dealt
        with (within a key, arrival order), or when it was met on a fifo limit and is not owed
        (the fair order picks, 13.2; an owed run keeps its place, 13.4); the limit it was
        met on watches it, so a younger run granted there passes it over.
        A group stopped by another of its limits is passed over only where it
        was seen stopped (so fairness itself never makes a run owed, 13.4)."""
        for limit in locked:
            if self.plain(limit.name):
                for entry in self.waiting(limit.name)[: max(self.room(limit.name), 0)]:
                    self._reserve_marking([entry], {}, now)
        decided: set[str] = set()
        blocked: dict[str, list[MEntry]] = {}
        batches: dict[str, list[MEntry]] = {}
        after: dict[str, int] = {}
        dealt: dict[str, set[int]] = {}
        streams = [limit.name for limit in locked if self.waiting(limit.name)]
        heads: dict[str, MEntry] = {}

        def barrier(name: str) -> int | None:
            owed = [e.position for e in self.waiting(name) if self._owed(e, now)]
            return min(owed) if owed else None

        def next_head(name: str) -> MEntry | None:
            if self.limits[name].share == "fair":
                if self.room(name) <= 0:
                    return None
                bar = barrier(name)
                seen = dealt.setdefault(name, set())
                waiting = [
                    e
                    for e in self.waiting(name)
                    if e.arrival not in seen and self.pool_room(name, e.key) and (bar is None or e.position <= bar)
                ]
                if not waiting:
                    return None
                first: dict[str, MEntry] = {}
                for e in waiting:  # in position order
                    first.setdefault(e.key, e)
                ranks = {k: self.fair_rank(name, k) for k in first}
                entry = min(first.values(), key=lambda e: (*ranks[e.key], e.position))
                self.fair_reordered += entry.position != waiting[0].position  # a younger key's turn
                by_share = min(first.values(), key=lambda e: (*ranks[e.key][:2], e.position))
                if by_share is not entry:  # 13.2 as amended: the turns, not arrival, broke a tie
                    self.turns_seen["a tie went to the smaller pass"] += 1
                seen.add(entry.arrival)
                return entry
            if not batches.get(name):
                if self.room(name) <= 0:
                    return None
                bar = barrier(name)
                batches[name] = [
                    e
                    for e in self.waiting(name)
                    if e.position > after.get(name, 0)
                    and self.pool_room(name, e.key)
                    and (bar is None or e.position <= bar)
                ]
                if not batches[name]:
                    return None
            entry = batches[name].pop(0)
            after[name] = entry.position
            return entry

        while True:
            for name in [n for n in streams if n not in heads]:
                head = next_head(name)
                if head is None:
                    streams.remove(name)
                else:
                    heads[name] = head
            if not heads:
                return
            entry = heads.pop(min(heads, key=lambda n: heads[n].arrival))
            if entry.state != "waiting" or entry.request in decided or not self._open_to(entry, names, now):
                continue
            group = self.waiting_of(entry.request)
            fair_elsewhere = [
                e for e in group if e.limit != entry.limit and e.limit in names and self.limits[e.limit].share == "fair"
            ]
            if entry.group_size > 1 and (
                (fair_elsewhere and self.limits[entry.limit].share != "fair" and not self._owed(entry, now))
                or any(
                    o.key == e.key and o.position < e.position and o.arrival not in dealt.get(e.limit, set())
                    for e in fair_elsewhere
                    for o in self.waiting(e.limit)
                )
            ):
                blocked.setdefault(entry.limit, []).append(entry)  # a younger grant here passes it
                continue  # left to the fair limit's stream (13.2): its order picks the run
            complete = len(group) == entry.group_size and all(e.limit in names for e in group)
            if entry.group_size == 1 or (complete and all(self._open_to(e, names, now) for e in group)):
                self._reserve_marking(group, blocked, now)
                if entry.group_size > 1:
                    decided.add(entry.request)
                continue
            decided.add(entry.request)
            for e in group:
                if e.limit in names:
                    blocked.setdefault(e.limit, []).append(e)

    def fair_rank(self, limit: str, key: str) -> tuple[bool, Fraction, int]:
        """13.2: (holding at least its min, in use / weight, pass) of one key of a fair limit."""
        weight, minimum = self.key_weights.get((limit, key), (1, 0)) if key else (1, 0)
        in_use = self.pool_in_use(limit, key)
        return (in_use >= minimum, Fraction(in_use, weight), self.fair_pass(limit, key))

    # --- 13.2: a fair limit's turns (stride scheduling) -------------------------------------------

    def fair_pass(self, limit: str, key: str) -> int:
        """The key's pass on the limit ('' the no-key runs'): its place in the limit's turns."""
        return self.passes.get((limit, key), 0)

    def weight(self, limit: str, key: str) -> int:
        """13.1: the key's weight (the no-key runs are one key of weight 1)."""
        return self.key_weights.get((limit, key), (1, 0))[0] if key else 1

    def _active_keys(self, limit: str) -> set[str]:
        """The keys holding (busy or reserved) or waiting on the limit, '' for the no-key runs."""
        return {s.key for s in self.live(limit)} | {e.key for e in self.waiting(limit)}

    def _enter_turns(self, limit: MLimit, key: str) -> None:
        """13.2: a key of a fair limit that starts holding or waiting when it had nothing held or
        waiting there enters the turns at the smallest pass among the other keys holding or
        waiting (0 if none), so it neither jumps the whole line nor waits behind the backlog.
        Before its slot or entry is counted."""
        active = self._active_keys(limit.name)
        if limit.share != "fair" or key in active:
            return
        entering = min((self.fair_pass(limit.name, k) for k in active), default=0)
        if entering:
            self.turns_seen["a key entered the turns above pass 0"] += 1
        self.passes[(limit.name, key)] = entering

    def _take_turn(self, limit: MLimit, key: str) -> int | None:
        """13.2: a grant to the key of a fair limit (a reservation from the queue or a busy slot at
        once) adds 1 / weight of a turn to its pass. The pass it was ranked at (the slot keeps
        it); None on a fifo limit, whose passes stand still."""
        if limit.share != "fair":
            return None
        ranked = self.fair_pass(limit.name, key)
        weight = self.weight(limit.name, key)
        self.passes[(limit.name, key)] = ranked + PASS_STRIDE // weight
        if weight > 1:
            self.turns_seen["a key of weight > 1 took a turn"] += 1
        return ranked

    def _restart_turns(self, name: str) -> None:
        """Engine choice (docs/concurrency.md): a switch of the share in force between fifo and
        fair (an operator's, or a deploy's while no override) starts every key's turns afresh, the
        no-key runs' too: all at pass 0. A weight change keeps the pass."""
        if any(value for (limit, _), value in self.passes.items() if limit == name):
            self.turns_seen["a switch restarted the turns"] += 1
        self.passes = {at: value for at, value in self.passes.items() if at[0] != name}

    def _reserve_marking(self, entries: list[MEntry], blocked: dict[str, list[MEntry]], now: datetime) -> None:
        """_reserve, marking as passed over (10.4) only the groups seen stopped on these limits
        (grant._Grant._mark_passed_over): older, their key pool here with room before this grant."""
        self._mark_passed_over(
            {
                e.request
                for entry in entries
                for e in blocked.get(entry.limit, [])
                if e.position < entry.position
                and e.passed_over_at is None
                and self.pool_room(entry.limit, e.key)
                and self.whole_run_room(entry.limit, e.request)
            },
            now,
        )
        self._reserve_slots(entries, now)

    def _mark_passed_over(self, requests: set[str], now: datetime) -> None:
        """10.4: the mark is the run's, on all its waiting entries."""
        for request in requests:
            for waiting in self.waiting_of(request):
                if waiting.passed_over_at is None:
                    waiting.passed_over_at = now

    def _reserve_slots(self, entries: list[MEntry], now: datetime) -> None:
        """3.5, 10.2: a slot of each limit reserved for the run, together, for 2 minutes."""
        for entry in entries:
            limit = self.limits[entry.limit]
            entry.state, entry.finished_at = "granted", now
            self.slots.append(
                MSlot(
                    limit.name,
                    entry.run_id,
                    entry.request,
                    entry.label,
                    "reserved",
                    entry,
                    now,
                    self._expiry(limit, now),
                    reserved_until=now + RESERVATION,
                    key=entry.key,
                    group_size=entry.group_size,
                    fair_pass=self._take_turn(limit, entry.key),
                )
            )
        self.woken.append(entries[0].run_id)
        self.tally.granted += len(entries)

    def _open_to(self, entry: MEntry, settled: set[str], now: datetime) -> bool:
        """The entry's limit can give it a slot now: it is being settled, has room in its total
        and in the entry's key pool, and no owed run older than it waits on it (10.4)."""
        limit = self.limits[entry.limit]
        return (
            limit.name in settled
            and self.room(limit.name) > 0
            and self.pool_room(limit.name, entry.key)
            and self.whole_run_room(limit.name, entry.request)
            and not any(
                other.position < entry.position and self._owed(other, now) for other in self.waiting(limit.name)
            )
        )

    def _answers_at_once(self, names: list[str], on_full: str | None) -> bool:
        """14.1, 14.7: an acquisition that cannot be granted at once is answered at once (not
        queued) if it may skip (its own on_full, else the strictest of its limits') or a queue
        it would join has a cap."""
        limits = [self.limits[name] for name in names if name in self.limits]
        strategy = on_full or _strictest(lim.declared_on_full for lim in limits)
        capped = any(
            lim.declared_max_waiting is not None or lim.declared_max_waiting_per_key is not None for lim in limits
        )
        return strategy != "wait" or capped

    def _replaceable(self, names: list[str], keys: list[str], request: str) -> list[MEntry]:
        """14.3, 14.7: the waiting entries of every other request waiting for exactly these
        limits, each with the same key ('' the runs without one)."""
        wanted = set(zip(names, keys, strict=True))
        by_request: dict[str, list[MEntry]] = {}
        for e in self.entries:
            if e.state == "waiting" and e.request != request:
                by_request.setdefault(e.request, []).append(e)
        return [
            e
            for found in by_request.values()
            if len(found) == len(names) == found[0].group_size and {(e.limit, e.key) for e in found} == wanted
            for e in found
        ]

    def _swap_place(self, limit: MLimit, here: list[MEntry], request: str, now: datetime) -> None:
        """14.3 after the join (engine choice, as _take_place leaves it): the oldest entry `here`
        becomes the new entry of `request` (its position and arrival), the new entry keeps what
        the oldest was as history, the others leave."""
        if not here:
            return
        oldest = min(here, key=lambda e: e.position)
        new = next(e for e in self.entries if e.limit == limit.name and e.request == request and e.state == "waiting")
        mine = (new.run_id, new.request, new.label, new.enqueued_at, new.deadline, new.timeout_ms, new.fair_pass)
        new.run_id, new.request, new.label, new.key = oldest.run_id, oldest.request, oldest.label, oldest.key
        new.group_size, new.passed_over_at, new.fair_pass = oldest.group_size, oldest.passed_over_at, oldest.fair_pass
        new.enqueued_at, new.deadline, new.timeout_ms = oldest.enqueued_at, oldest.deadline, oldest.timeout_ms
        new.state, new.finished_at, new.replaced_by, new.replacing = "replaced", now, request, oldest.replacing
        oldest.run_id, oldest.request, oldest.label, oldest.enqueued_at = mine[:4]
        oldest.deadline, oldest.timeout_ms, oldest.fair_pass = mine[4:]
        oldest.passed_over_at, oldest.replacing = None, True
        for e in here:
            if e is not oldest:
                e.state, e.finished_at, e.replaced_by = "replaced", now, request
        limit.replaced_count += len(here)

    def _take_place(
        self,
        limit: MLimit,
        here: list[MEntry],
        run_id: str,
        request: str,
        label: str,
        now: datetime,
        deadline: datetime,
        timeout_ms: int,
    ) -> None:
        """14.3: the new acquisition takes the place of the oldest entry it replaces here (its
        position and its arrival: engine choice, the row itself becomes the new entry), which is
        kept as history at a new position (and arrival); the others leave. The key's turns stay
        (it still waits here)."""
        oldest = min(here, key=lambda e: e.position)
        copy = replace(
            oldest,
            position=limit.next_position,
            arrival=self.next_arrival,
            state="replaced",
            finished_at=now,
            replaced_by=request,
        )
        limit.next_position += 1
        self.next_arrival += 1
        self.entries.append(copy)
        oldest.run_id, oldest.request, oldest.label = run_id, request, label
        oldest.enqueued_at, oldest.deadline, oldest.timeout_ms = now, deadline, timeout_ms
        oldest.passed_over_at, oldest.replacing = None, True
        oldest.fair_pass = self.fair_pass(limit.name, oldest.key) if limit.share == "fair" else None
        for e in here:
            if e is not oldest:
                e.state, e.finished_at, e.replaced_by = "replaced", now, request
        limit.replaced_count += len(here)

    def _refusal(self, limit: MLimit, key: str, request: str, now: datetime) -> str | None:
        """14.2, 6.5: why this acquisition cannot take a slot of `limit` now the runs waiting
        were served; None when it can (capacity held for an owed run is not free for it)."""
        if limit.paused:
            return "limit_paused"
        if not self.room(limit.name):
            return "box_full" if limit.kind == "box" else "limit_full"
        if not self.pool_room(limit.name, key):
            return "workflow_at_base" if limit.kind == "box" else "key_pool_full"
        if not self.whole_run_room(limit.name, request):
            return "whole_runs_at_base"
        if any(self._owed(e, now) for e in self.waiting(limit.name)):
            return "held_for_owed"
        return None

    def _queue_full(self, limit: MLimit, key: str) -> str | None:
        """14.5: the limit's queue at max_waiting, or `key`'s runs at max_waiting_per_key of it."""
        waiting = self.waiting(limit.name)
        if limit.declared_max_waiting is not None and len(waiting) >= limit.declared_max_waiting:
            return "queue_full"
        cap = limit.declared_max_waiting_per_key
        if cap is not None and sum(1 for e in waiting if e.key == key) >= cap:
            return "key_queue_full"
        return None

    def _owed(self, entry: MEntry, now: datetime) -> bool:
        """10.4: the entry's run has been passed over (on any of its limits) and has waited more
        than 2 minutes."""
        passed = any(e.passed_over_at is not None for e in self.waiting_of(entry.request))
        return passed and now - entry.enqueued_at > OWED_AFTER

    def _reserve(self, entries: list[MEntry], now: datetime) -> None:
        """3.5, 10.2: a slot of each limit reserved for the run, together, for 2 minutes. Each
        older run waiting on one of these limits whose key pool there had room (before this
        grant) is passed over (10.4): the mark is the run's, on all its entries."""
        self._mark_passed_over(
            {
                e.request
                for entry in entries
                for e in self.waiting(entry.limit)
                if e.position < entry.position
                and self.pool_room(entry.limit, e.key)
                and self.whole_run_room(entry.limit, e.request)
            },
            now,
        )
        self._reserve_slots(entries, now)

    def _purge(self, cutoff: datetime) -> None:
        """docs/engine.md "History": freed slots and finished entries older than the retention go
        (an entry only once no slot refers to it)."""
        self.slots = [s for s in self.slots if s.freed_at is None or s.freed_at >= cutoff]
        referred = {id(s.entry) for s in self.slots if s.entry is not None}
        self.entries = [
            e
            for e in self.entries
            if e.state == "waiting" or e.finished_at is None or e.finished_at >= cutoff or id(e) in referred
        ]

    @staticmethod
    def _expiry(limit: MLimit, now: datetime) -> datetime:
        """4.3: grant time + the max hold in force at grant; never changes."""
        return now + timedelta(milliseconds=limit.max_hold_ms)


def _strictest(values: Iterable[str]) -> str:
    """14.7: skip before replace before wait."""
    return min(values, key=("skip", "replace", "wait").index, default="wait")


def _check_key(key: str) -> None:
    """9.2: a key is a string of 1 to 128 characters without control characters."""
    if not 1 <= len(key) <= 128 or any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in key):
        raise ModelError("key")


def _size_text(size: int | None) -> str:
    return "none" if size is None else str(size)


BOX = "box"
MAX_DURATION_MS = 30 * 24 * 60 * 60 * 1000  # limits.durations.MAX_DURATION_MS: the box's "no max hold"


def _ceiling(base: int, burst: float) -> int:
    return int(base * burst + 1e-9)


def _declared_text(
    declared: bool,
    capacity: int,
    max_hold_ms: int,
    per_key: int | None,
    share: str = "fifo",
    on_full: str = "wait",
    max_waiting: int | None = None,
    max_waiting_per_key: int | None = None,
) -> str:
    text = f"capacity {capacity}, max hold {max_hold_ms} ms"
    if per_key is not None:
        text += f", per_key {per_key}"
    if share != "fifo":
        text += f", share {share}"
    if on_full != "wait":
        text += f", on_full {on_full}"
    if max_waiting is not None:
        text += f", max_waiting {max_waiting}"
    if max_waiting_per_key is not None:
        text += f", max_waiting_per_key {max_waiting_per_key}"
    return text + ("" if declared else ", undeclared")
