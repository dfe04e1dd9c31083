"""Check l of `limits verify` (limits/verify/__init__.py): fair shares (SPEC 13.6), replayed
from the rows (`_FairReplay`; `FairChecks.unfair_grants` lists its steps and what it leaves out)."""

from __future__ import annotations

import datetime as dt
import heapq
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any

from django.db.models import Max

from limits.engine.keys import OWED_AFTER_MS, PASS_STRIDE, stride
from limits.engine.results import WHOLE_RUN_SUFFIX
from limits.models import AuditEvent, Limit, LimitKey
from limits.verify.history import FOREVER, HistoryRows, _iso

OWED_AFTER = dt.timedelta(milliseconds=OWED_AFTER_MS)  # SPEC 10.4


class FairChecks(HistoryRows):
    __slots__ = ()

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

    def __init__(self, history: HistoryRows, since: dt.datetime) -> None:
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


def _turns(fair_pass: int) -> str:
    """A pass as turns (13.2: one grant of weight 1 is one turn)."""
    return "unknown" if fair_pass == UNKNOWN_PASS else f"{fair_pass / PASS_STRIDE:.4g}"


def _shown(key: str) -> str:
    return repr(key) if key else "(no key)"
