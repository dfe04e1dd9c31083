"""Checks from the rows for the keys-and-groups stress test (tests/concurrency/test_stress.py),
beside limits.verify: what the juggling clients were told against the rows, key pools against the
pool sizes in force at each grant (verify's check f stands aside once per_key changed: it keeps
no past sizes, but the audit rows do), and no younger run granted while an owed run waited."""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_left, bisect_right, insort
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import itemgetter
from typing import Any

from django.db.models import Max

from limits.engine.keys import OWED_AFTER_MS, PASS_STRIDE, stride
from limits.models import AuditEvent, Limit, LimitKey, QueueEntry, Slot

FOREVER = dt.datetime.max.replace(tzinfo=dt.UTC)
_SIZE = re.compile(r"\s*(\d+|none)")
SIZE, FREE, GRANT = 0, 1, 2  # at one instant: size changes, then frees, then grants


def outcome_violations(clients: Iterable[dict[str, Any]], *, ignore: str = "") -> list[str]:
    """What each acquire call was told holds against the rows.

    - 'busy': its confirmed slots are exactly the handles it was given, each of the limit it was
      answered for (the juggler holds the answer's order to the order asked), with the call's key
      and group size;
    - anything else: it never had a confirmed slot; 'timed_out': its latest round of entries (one
      per limit) timed out; 'cancelled': its run ended, and its latest round was cancelled or its
      reservations were freed by the end;
    - every request in the rows was made by a client (but those starting with `ignore`, made by
      the test itself).
    """
    slots: dict[str, list[Slot]] = defaultdict(list)
    for slot in Slot.objects.select_related("limit").order_by("granted_at", "id"):
        slots[slot.request].append(slot)
    entries: dict[str, list[QueueEntry]] = defaultdict(list)
    for entry in QueueEntry.objects.order_by("id"):
        entries[entry.request].append(entry)
    violations, seen = [], set()
    for client in clients:
        for outcome in client["outcomes"]:
            request, names, state = outcome["request"], outcome["limits"], outcome["state"]
            seen.add(request)
            confirmed = [slot for slot in slots[request] if slot.confirmed_at is not None]
            latest = entries[request][-len(names) :]
            states = {entry.state for entry in latest}
            if state == "busy":
                told = dict(zip(outcome["slot_ids"], outcome["handle_limits"], strict=True))
                rows = {slot.id: slot.limit.name for slot in confirmed}
                if rows != told:
                    violations.append(f"{request}: told busy with {told}, confirmed rows {rows}")
                wrong = [s.id for s in confirmed if s.key != (outcome["key"] or "") or s.group_size != len(names)]
                if wrong:
                    violations.append(f"{request}: slots {wrong} have another key or group size")
            elif confirmed:
                violations.append(f"{request}: told {state} but {confirmed[0].id} was confirmed")
            elif state == "timed_out":
                if "timed_out" not in states:
                    violations.append(f"{request}: told timed_out, latest entries {sorted(states)}")
            elif state == "cancelled":
                freed = bool(slots[request]) and slots[request][-1].state == "run_ended"
                if not outcome["ended_run"] or not ("cancelled" in states or (states == {"granted"} and freed)):
                    violations.append(
                        f"{request}: told cancelled, entries {sorted(states)}, slots {slots[request][-1:]}"
                    )
            else:
                violations.append(f"{request}: ended {state}")
    made = {request for request in set(slots) | set(entries) if not (ignore and request.startswith(ignore))}
    if made - seen:
        violations.append(f"requests nobody made: {sorted(made - seen)[:5]}")
    return violations


def _size(text: str) -> int | None:
    found = _SIZE.match(text)
    assert found is not None, text
    return None if found.group(1) == "none" else int(found.group(1))


def pool_overruns(name: str) -> list[str]:
    """No grant brought a key pool (or the no-key pool) above its size in force at that instant.

    The sizes come from the limit's per-key audit rows (services.set_per_key writes the size in
    force after each change): the limit's per_key over time, and each key's own size over time
    (a reset key follows per_key again). At one instant size changes come first, then frees, then
    grants, and a grant is judged against the largest size in force just before or at that
    instant (limits.verify's benefit of the doubt: the order within one instant is unknown).
    Lowering takes nothing back: only a grant can break the rule. Assumes the keys started
    without sizes of their own (the test creates them fresh)."""
    limit = Limit.objects.get(name=name)
    events = list(
        AuditEvent.objects.filter(limit=limit, action=AuditEvent.Action.PER_KEY)
        .order_by("at", "id")
        .values_list("at", "key", "old_value", "new_value")
    )
    first_wide = next(((old, new) for _, key, old, new in events if not key), None)
    initial = _size(first_wide[0]) if first_wide else limit.per_key
    lives: dict[str, list[tuple[dt.datetime, int, Any]]] = defaultdict(list)
    for slot in Slot.objects.filter(limit=limit).values("id", "key", "granted_at", "freed_at"):
        lives[slot["key"]].append((slot["granted_at"], GRANT, slot["id"]))
        if slot["freed_at"] is not None:
            lives[slot["key"]].append((slot["freed_at"], FREE, None))
    violations = []
    for key, moments in lives.items():
        # The pool's size in force after each change that touches it: a per_key change while the
        # key has no size of its own, or a change of the key's own size.
        per_key, own, sizes = initial, None, []
        for at, changed, _, new in events:
            if not changed:
                per_key = _size(new)
            elif changed == key:
                own = None if new.endswith("(per_key)") else _size(new)
            else:
                continue
            sizes.append((at, SIZE, own if own is not None else per_key))
        level, size, instant, widest = 0, initial, None, _Widest(initial)
        for at, kind, value in sorted(sizes + moments, key=lambda event: (event[0], event[1])):
            if at != instant:
                instant, widest = at, _Widest(size)
            if kind == SIZE:
                size = value
                widest.add(size)
            elif kind == FREE:
                level -= 1
            else:
                level += 1
                if widest.size is not None and level > widest.size:
                    shown = repr(key) if key else "(no key)"
                    violations.append(f"{name}: grant of {value} brought key {shown} to {level} > pool {widest.size}")
    return violations


class _Widest:
    """The largest pool size in force at one instant (None: no size, only the total applies)."""

    def __init__(self, size: int | None) -> None:
        self.size = size

    def add(self, size: int | None) -> None:
        self.size = None if size is None or self.size is None else max(self.size, size)


def owed_jumps(name: str, owed_after_ms: int) -> list[str]:
    """SPEC 10.4: no slot of the limit was granted to a younger run (a later position, or at once)
    while an owed run of the limit waited: one passed over, waiting for longer than the owed
    delay, with its deadline to come. The owed run granted at that very instant, or made owed at
    it, gets the benefit of the doubt (a grant of a younger run in the same settle may follow it)."""
    limit = Limit.objects.get(name=name)
    owed_after = dt.timedelta(milliseconds=owed_after_ms)
    events: list[tuple[dt.datetime, int, float, Any]] = []
    for entry in QueueEntry.objects.filter(limit=limit, passed_over_at__isnull=False).values(
        "position", "run_id", "enqueued_at", "passed_over_at", "finished_at", "deadline"
    ):
        begins = max(entry["passed_over_at"], entry["enqueued_at"] + owed_after)
        ends = min(entry["finished_at"] or FOREVER, entry["deadline"])
        if begins < ends:
            events.append((begins, 2, entry["position"], entry["run_id"]))
            events.append((ends, 0, entry["position"], entry["run_id"]))
    if not events:
        return []
    for slot in Slot.objects.filter(limit=limit).values("id", "run_id", "granted_at", "queue_entry__position"):
        queued = slot["queue_entry__position"]
        events.append((slot["granted_at"], 1, float("inf") if queued is None else queued, slot["run_id"]))
    owed: list[float] = []  # positions of the runs owed now, sorted
    violations = []
    for at, kind, position, run_id in sorted(events, key=lambda event: (event[0], event[1])):
        if kind == 2:
            insort(owed, position)
        elif kind == 0:
            owed.remove(position)
        elif owed and owed[0] < position:
            violations.append(f"{name}: {run_id} granted at {at.isoformat()} while owed #{owed[0]} waited")
    return violations


def figures(results: dict[str, Any], owed_after_ms: int, crossing: tuple[str, str]) -> dict[str, Any]:
    """What the load did, for the test's report and its coverage assertions."""
    outcomes = [outcome for client in results["clients"] for outcome in client["outcomes"]]
    shapes: Counter[str] = Counter()
    orders: Counter[tuple[str, ...]] = Counter()
    for outcome in outcomes:
        names = outcome["limits"]
        shape = f"group{len(names)}" if len(names) > 1 else ("keyed" if outcome["key"] is not None else "single")
        shapes[f"{shape}:{outcome['state']}"] += 1
        if outcome["state"] == "busy" and len(names) > 1:
            orders[tuple(names)] += 1
    group_waits = [o["waited"] for o in outcomes if o["state"] == "busy" and len(o["limits"]) > 1]
    passed = QueueEntry.objects.filter(passed_over_at__isnull=False)
    owed = [
        e
        for e in passed.values("enqueued_at", "finished_at", "deadline")
        if min(e["finished_at"] or FOREVER, e["deadline"]) - e["enqueued_at"] > dt.timedelta(milliseconds=owed_after_ms)
    ]
    stats: Counter[str] = Counter()
    for client in results["clients"]:
        stats.update({k: v for k, v in client["stats"].items() if k != "seconds"})
    keys_used = {o["key"] for o in outcomes if o["state"] == "busy" and o["key"] is not None}
    longest = sorted((o for o in outcomes if o["state"] == "busy"), key=lambda o: -o["waited"])[:3]
    return {
        "seed": results["seed"],
        "operations": stats["operations"],
        "acquire_calls": stats["started"],
        "polls": stats["polls"],
        "outcomes": dict(sorted(shapes.items())),
        "crossing_pair_granted": {"+".join(pair): orders[pair] for pair in (crossing, crossing[::-1])},
        "pairs_granted_in_both_orders": sum(
            1 for names in orders if len(names) == 2 and names < names[::-1] and names[::-1] in orders
        ),
        "crossing_at_once": crossing_at_once(results["clients"]),
        "orders_of_three_granted": sum(1 for names in orders if len(names) == 3),
        "keys_used": len(keys_used),
        "passed_over": passed.count(),
        "owed": len(owed),
        "max_group_wait_s": max(group_waits, default=0),
        "longest_waits": [(o["limits"], o["key"], o["timeout"], o["waited"], o["polls"]) for o in longest],
        "most_waiting_groups": results["monitor"]["most_waiting_groups"],
        "groups_timed_out_in_part": results["monitor"]["groups_timed_out_in_part"],
        "timed_out_in_part_example": next(iter(results["monitor"]["split_examples"].items()), None),
        "operator_actions": stats["operator_actions"],
        "pauses": stats["pauses"],
        "foreign_releases": stats["foreign_releases"],
        "partial_holds": stats["partial_holds"],
        "ended_runs": stats["ended_runs"],
        "sweeps": sum(s["passes"] for s in results["sweepers"]),
        "monitor_samples": results["monitor"]["samples"],
        "monitor_violations": results["monitor"]["violation_count"],
        "peak": results["monitor"]["peak"],
        "pool_peak": results["monitor"]["pool_peak"],
        "deadlocks": sum(len(w["deadlocks"]) for w in results["clients"] + results["sweepers"]),
        "load_seconds": max(c["stats"]["load_seconds"] for c in results["clients"]),
        "client_seconds": max(c["stats"]["seconds"] for c in results["clients"]),
        "call_ms": _timings(results["clients"]),
    }


def _timings(clients: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Per service call: how many, mean and longest milliseconds, over all clients."""
    total: dict[str, list[float]] = {}
    for client in clients:
        for what, (count, seconds, longest) in client["timings"].items():
            mine = total.setdefault(what, [0, 0.0, 0.0])
            mine[0], mine[1], mine[2] = mine[0] + count, mine[1] + seconds, max(mine[2], longest)
    return {what: [int(n), round(1000 * s / n, 1), round(1000 * m, 1)] for what, (n, s, m) in sorted(total.items())}


def crossing_at_once(clients: list[dict[str, Any]]) -> dict[str, int]:
    """How many times two processes were inside acquisitions of the same limits in different
    orders at the same moment (A+B beside B+A; each from its first call to its end), by size."""
    calls = [
        (tuple(o["limits"]), o["began_at"], o["ended_at"], client["index"])
        for client in clients
        for o in client["outcomes"]
        if len(o["limits"]) > 1
    ]
    found: Counter[str] = Counter()
    for i, (names, began, ended, who) in enumerate(calls):
        for other, other_began, other_ended, other_who in calls[i + 1 :]:
            crossed = sorted(names) == sorted(other) and names != other and who != other_who
            if crossed and began < other_ended and other_began < ended:
                found[f"{len(names)} limits"] += 1
    return dict(found)


# --- fair shares (SPEC 13) ------------------------------------------------------------------------


ENQUEUE, FINISH = 3, 4  # beside SIZE, FREE, GRANT: a fair limit's replay
# The audited changes after which a fair limit's past grants cannot be judged by today's values
# (a release, a sweep's expiry, a max hold, a pause or a resume changes no rule of 13.2's order).
RULE_CHANGES = [
    action
    for action in AuditEvent.Action.values
    if action
    not in (
        AuditEvent.Action.RELEASE,
        AuditEvent.Action.EXPIRE,
        AuditEvent.Action.MAX_HOLD,
        AuditEvent.Action.PAUSE,
        AuditEvent.Action.RESUME,
    )
]
OWED_AFTER = dt.timedelta(milliseconds=OWED_AFTER_MS)
type Order = tuple[bool, Fraction]  # a key's place in 13.2's order before the pass (_Fair.order)


@dataclass
class Instant:
    """One instant of a fair limit's replay (_Fair.instants)."""

    at: dt.datetime
    level: Counter[str]
    grants: list[dict[str, Any]]
    frees: Counter[str]
    waiting: dict[int, dict[str, Any]]
    arrivals: list[dict[str, Any]]
    leaves: set[int]  # the entries that stop waiting at this instant (granted, timed out, ...)

    def after(self) -> Counter[str]:
        """The levels once every change of this instant is made."""
        level = self.level.copy()
        level.subtract(self.frees)
        level.update(slot["key"] for slot in self.grants)
        return level

    def waiting_after(self) -> set[str]:
        """The keys with a run waiting once every change of this instant is made."""
        entries = [*self.waiting.values(), *self.arrivals]
        return {entry["key"] for entry in entries if entry["id"] not in self.leaves}

    def active_before(self) -> set[str]:
        """The keys holding or waiting just before this instant (SPEC 13.2's active keys)."""
        return {key for key, held in self.level.items() if held > 0} | {e["key"] for e in self.waiting.values()}

    def active_after(self) -> set[str]:
        return {key for key, held in self.after().items() if held > 0} | self.waiting_after()


@dataclass
class _Fair:
    """A fair limit's history replayed instant by instant from its rows, with the weights, mins
    and pool sizes in force now (the checks judge only after the last audited change of a rule
    of the limit, `since`: no past values are kept)."""

    name: str
    is_fair: bool
    capacity: int
    per_key: int | None
    nokey_pass: int  # the no-key runs' pass stored on the limit
    rows: dict[str, Any]  # key -> its LimitKey row (weight, minimum, pool_override, fair_pass)
    since: dt.datetime | None
    paused: list[tuple[dt.datetime, dt.datetime]]  # [pause, resume) spans from the audit
    slots: list[Any]  # the slot rows, as dicts
    entries: list[Any]  # the queue entry rows, as dicts

    @classmethod
    def load(cls, name: str) -> _Fair:
        limit = Limit.objects.get(name=name)
        rows = {row.key: row for row in LimitKey.objects.filter(limit=limit)}
        audit = AuditEvent.objects.filter(limit=limit)
        since = audit.filter(action__in=RULE_CHANGES).aggregate(last=Max("at"))["last"]
        paused: list[tuple[dt.datetime, dt.datetime]] = []
        began: dt.datetime | None = None
        for action, at in audit.filter(action__in=["pause", "resume"]).order_by("at", "id").values_list("action", "at"):
            if action == "pause":
                began = began or at
            elif began is not None:
                paused.append((began, at))
                began = None
        if began is not None:
            paused.append((began, FOREVER))
        slots = list(
            Slot.objects.filter(limit=limit).values(
                "id", "run_id", "key", "granted_at", "freed_at", "queue_entry_id", "fair_pass"
            )
        )
        entries = list(
            QueueEntry.objects.filter(limit=limit).values(
                "id",
                "run_id",
                "key",
                "position",
                "enqueued_at",
                "finished_at",
                "deadline",
                "state",
                "passed_over_at",
                "fair_pass",
            )
        )
        return cls(
            name,
            limit.is_fair,
            limit.capacity,
            limit.per_key,
            limit.nokey_fair_pass,
            rows,
            since,
            paused,
            slots,
            entries,
        )

    def judged(self, at: dt.datetime) -> bool:
        """After the last audited change of the limit's rules (the values in force now held)."""
        return self.since is None or at > self.since

    def is_paused(self, at: dt.datetime) -> bool:
        return any(paused <= at < resumed for paused, resumed in self.paused)

    def size(self, key: str) -> int | None:
        row = self.rows.get(key) if key else None
        return row.pool_override if row is not None and row.pool_override is not None else self.per_key

    def weight(self, key: str) -> int:
        row = self.rows.get(key) if key else None
        return 1 if row is None else int(row.weight)

    def stride(self, key: str) -> int:
        """What one grant adds to the key's pass (SPEC 13.2: 1 / weight of a turn)."""
        return stride(self.weight(key))

    def stored_pass(self, key: str) -> int:
        row = self.rows.get(key) if key else None
        return self.nokey_pass if not key else (0 if row is None else int(row.fair_pass))

    def order(self, key: str, level: int) -> Order:
        """SPEC 13.2's place of a key holding `level` slots, before the pass: below its min first,
        then the smallest level / weight (the no-key pool: weight 1, min 0)."""
        row = self.rows.get(key) if key else None
        weight, minimum = (row.weight, row.minimum) if row is not None else (1, 0)
        return (level >= minimum, Fraction(level, weight))

    def owed_waiting(self, at: dt.datetime) -> bool:
        """Whether an owed run (10.4, 13.4: passed over and waiting longer than the owed delay)
        may have waited at `at`: it comes first on every limit it needs, whatever 13.2 says."""
        if "_owed" not in self.__dict__:
            self.__dict__["_owed"] = [
                (max(entry["passed_over_at"], entry["enqueued_at"] + OWED_AFTER), entry["finished_at"] or FOREVER)
                for entry in self.entries
                if entry["passed_over_at"] is not None
            ]
        return any(began <= at <= ended for began, ended in self.__dict__["_owed"])

    def instants(self) -> Iterator[Instant]:
        """Per instant, in order: the levels (busy + reserved) per key just before it, the grants
        and frees at it, the entries waiting just before it, those enqueued at it and those that
        stop waiting at it. The levels and the waiting entries are the replay's own, changed
        after each yield."""
        moments: dict[dt.datetime, list[tuple[int, Any]]] = defaultdict(list)
        for slot in self.slots:
            moments[slot["granted_at"]].append((GRANT, slot))
            if slot["freed_at"] is not None:
                moments[slot["freed_at"]].append((FREE, slot))
        for entry in self.entries:
            moments[entry["enqueued_at"]].append((ENQUEUE, entry))
            if entry["finished_at"] is not None:
                moments[entry["finished_at"]].append((FINISH, entry))
        level: Counter[str] = Counter()
        waiting: dict[int, Any] = {}
        for at in sorted(moments):
            happened = moments[at]
            grants = [item for kind, item in happened if kind == GRANT]
            frees = Counter(item["key"] for kind, item in happened if kind == FREE)
            arrivals = [item for kind, item in happened if kind == ENQUEUE]
            leaves = {item["id"] for kind, item in happened if kind == FINISH}
            yield Instant(at, level, grants, frees, waiting, arrivals, leaves)
            level.subtract(frees)
            level.update(slot["key"] for slot in grants)
            waiting.update((entry["id"], entry) for entry in arrivals)
            for entry_id in leaves:
                waiting.pop(entry_id, None)


class _Turns:
    """Each key's pass (SPEC 13.2) over time, as the rows after `since` tell it: a slot keeps the
    pass its grant was ranked at (so the key's pass after it is that plus its stride), an entry
    the pass its key had when it joined. Before `since` (a weight changed, the share switched) a
    pass is unknown, and so it stays until a later row of the key tells it."""

    def __init__(self, fair: _Fair) -> None:
        self.fair = fair
        events: dict[str, list[tuple[dt.datetime, int]]] = defaultdict(list)
        # per key and instant: the passes its grants were ranked at, and those its entries joined with
        self.moves: dict[str, dict[dt.datetime, tuple[list[int], list[int]]]] = defaultdict(
            lambda: defaultdict(lambda: ([], []))
        )
        for slot in fair.slots:
            if slot["fair_pass"] is not None and fair.judged(slot["granted_at"]):
                events[slot["key"]].append((slot["granted_at"], slot["fair_pass"] + fair.stride(slot["key"])))
                self.moves[slot["key"]][slot["granted_at"]][0].append(slot["fair_pass"])
        for entry in fair.entries:
            if entry["fair_pass"] is not None and fair.judged(entry["enqueued_at"]):
                events[entry["key"]].append((entry["enqueued_at"], entry["fair_pass"]))
                self.moves[entry["key"]][entry["enqueued_at"]][1].append(entry["fair_pass"])
        self.times: dict[str, list[dt.datetime]] = {}
        self.values: dict[str, list[int]] = {}
        for key, mine in events.items():
            mine.sort()
            self.times[key] = [at for at, _ in mine]
            self.values[key] = [value for _, value in mine]

    def after(self, key: str, at: dt.datetime) -> int | None:
        """The key's pass once every change of instant `at` and before it is made (of one
        instant's, the largest: within one transaction a pass only grows); None when no row of
        the key tells it."""
        found = bisect_right(self.times.get(key, []), at)
        return self.values[key][found - 1] if found else None

    def stayed(self, key: str, began: dt.datetime, ended: dt.datetime) -> bool:
        """Whether the key's pass moved by its own grants alone after instant `began` through
        `ended`: each grant ranked at the pass before it, each entry joining at the pass then
        (before or after one of the key's grants of the same instant). Not so when the key had
        nothing held or waiting in between and entered the turns again at the smallest pass of
        the keys active then (SPEC 13.2), which may be above its own (the rest of its turn is
        forfeit) or below it. Where the rows cannot tell the pass at `began`, from the first
        thing the key did after it."""
        step = self.fair.stride(key)
        running = self.after(key, began)
        for at in sorted(at for at in self.moves.get(key, {}) if began < at <= ended):
            ranked, joined = self.moves[key][at]
            ranked = sorted(ranked)
            if running is None:
                running = min([*ranked, *joined])
            if ranked != [running + i * step for i in range(len(ranked))]:
                return False
            if any(value not in {running + i * step for i in range(len(ranked) + 1)} for value in joined):
                return False
            running += len(ranked) * step
        return True


def _turns(fair_pass: int | None) -> str:
    """A pass in turns (13.2: one grant of weight 1 is one turn)."""
    return "unknown" if fair_pass is None else f"{fair_pass / PASS_STRIDE:.4g}"


def _still_waiting(entry: dict[str, Any], at: dt.datetime) -> bool:
    """Waiting through `at` with its deadline to come (leaving at `at` itself may have been a
    grant in the same settle: the benefit of the doubt)."""
    return (entry["finished_at"] is None or entry["finished_at"] > at) and entry["deadline"] > at


def _rivals(fair: _Fair, turns: _Turns, moment: Instant) -> dict[str, tuple[Order, int | None, dict[str, Any]]]:
    """The keys with a run that waited across this instant with room in its pool, each at its
    highest place the instant allows: all its grants of the instant made and none of its frees
    (its order, its pass after them, its oldest such run)."""
    gained = Counter(slot["key"] for slot in moment.grants)
    found: dict[str, tuple[Order, int | None, dict[str, Any]]] = {}
    for entry in sorted(moment.waiting.values(), key=itemgetter("position")):
        key = entry["key"]
        if key in found or not _still_waiting(entry, moment.at):
            continue
        most = moment.level[key] + gained[key]
        size = fair.size(key)
        if size is None or most < size:
            found[key] = (fair.order(key, most), turns.after(key, moment.at), entry)
    return found


def fair_rule_violations(name: str, *, idle: bool = True) -> list[str]:
    """SPEC 13.2 (as amended by issue 43: keys take turns) and 13.6 on a fair limit, from its rows
    (after its last audited change: the weights, mins and pool sizes in force now are the ones
    judged by):

    - order: no slot was granted to a key K while a run of another key J waited (through that
      instant, its deadline to come) whose pool had room and whose place in 13.2's order was
      strictly before K's: J below its min and K not; or both alike and J's (busy + reserved) /
      weight smaller; or those alike too and J's pass smaller than the pass K's grant was ranked
      at (Slot.fair_pass): J's turn came first. J's pass is replayed from the rows (_Turns: the
      pass its latest entry joined with, or its latest grant was ranked at plus its stride). At
      one instant the order of frees and grants is unknown: K is judged at its lowest level then
      (every free of K at that instant first, none of its grants), J at its highest (all its
      grants first, no free) and at its largest pass, so only a certain jump is reported; ties
      on the pass (decided by arrival), and passes the rows cannot tell (before the last rule
      change, or NULL), are let be;
    - no idle capacity (unless `idle` is False): once an instant's changes are all made, busy +
      reserved below the capacity, the limit not paused, while a run waited (enqueued by then,
      deadline to come) whose key's pool had room.

    No instant at which an owed run (10.4) may have waited is judged: it comes first (13.4).
    Every other wait counts as one that could be served: no groups in the fair stress test (one
    limit per acquisition). The chaos run judges the order alone (`idle=False`): its waits are
    groups with the box (SPEC 12.2), all of one workflow, so a grant to one of them shows the box
    had room for the others, but a full box may leave the limit's capacity free."""
    fair = _Fair.load(name)
    turns = _Turns(fair)
    violations: list[str] = []
    for moment in fair.instants():
        at, level, frees = moment.at, moment.level, moment.frees
        if not fair.judged(at) or fair.owed_waiting(at):
            continue
        rivals = _rivals(fair, turns, moment) if moment.grants else {}
        for slot in moment.grants:
            key, ranked = slot["key"], slot["fair_pass"]
            mine = fair.order(key, level[key] - frees[key])
            for other, (theirs, their_pass, entry) in rivals.items():
                if other == key:
                    continue
                if theirs < mine:
                    why = ""
                elif theirs == mine and None not in (their_pass, ranked) and their_pass < ranked:
                    why = f" in the turns (its pass {_turns(their_pass)} against {_turns(ranked)})"
                else:
                    continue
                violations.append(
                    f"{name}: slot {slot['id']} granted to key {key!r} at {at.isoformat()} while "
                    f"#{entry['position']} of key {other!r} waited ahead of it{why} (SPEC 13.2)"
                )
                break
        after = moment.after()
        if not idle or after.total() >= fair.capacity or fair.is_paused(at):
            continue
        for entry in [*moment.waiting.values(), *moment.arrivals]:
            size = fair.size(entry["key"])
            if _still_waiting(entry, at) and (size is None or after[entry["key"]] < size):
                violations.append(
                    f"{name}: {after.total()} of {fair.capacity} in use at {at.isoformat()} while "
                    f"#{entry['position']} of key {entry['key']!r} waited with room in its pool (SPEC 13.6)"
                )
                break
    return violations


def fair_pass_violations(name: str) -> list[str]:
    """SPEC 13.2's turns as the rows keep them, after the last audited change of the limit's rules
    (weights and the share in force now; earlier passes are unknown, and a key's is known again
    from its first grant or join after it):

    - a key's grants are ranked at the pass its turns add up to: the one before plus one stride
      (PASS_STRIDE // weight) per grant since, so while the key stays active (holding or
      waiting) the passes its slots keep step by exactly its stride;
    - an entry joins at its key's pass then (QueueEntry.fair_pass: the pass before or after one
      of the key's grants of the same instant);
    - a key that starts holding or waiting when it had nothing held or waiting enters at the
      smallest pass among the other keys holding or waiting (0 if none): between the smallest it
      could have been at that instant (any other key that was active before or after it, at its
      pass before or after it) and the smallest it certainly was (the keys active throughout and
      untouched by the instant);
    - the pass stored with each key (LimitKey.fair_pass; the no-key runs' on the limit) is the one
      its turns add up to at the end."""
    fair = _Fair.load(name)
    if not fair.is_fair:
        return []
    known: dict[str, int] = {}
    violations: list[str] = []
    for moment in fair.instants():
        at = moment.at
        grants_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        joins_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for slot in moment.grants:
            if slot["fair_pass"] is not None:
                grants_of[slot["key"]].append(slot)
        for entry in moment.arrivals:
            if entry["fair_pass"] is not None:
                joins_of[entry["key"]].append(entry)
        changed = set(grants_of) | set(joins_of)
        if not fair.judged(at):
            for key in changed:
                known.pop(key, None)
            continue
        before, entering = dict(known), {}
        active = moment.active_before()
        for key in changed:
            step = fair.stride(key)
            grants = sorted(grants_of[key], key=itemgetter("fair_pass"))
            values = [slot["fair_pass"] for slot in grants] + [entry["fair_pass"] for entry in joins_of[key]]
            base = before.get(key) if key in active else None
            if key not in active:
                entering[key] = min(values)
            if base is None:
                base = min(values)
            expected = base
            for slot in grants:
                if slot["fair_pass"] != expected:
                    violations.append(
                        f"{name}: slot {slot['id']} of key {key!r} granted at {at.isoformat()} ranked at pass "
                        f"{_turns(slot['fair_pass'])}, where its turns add up to {_turns(expected)} (SPEC 13.2)"
                    )
                expected = slot["fair_pass"] + step
            allowed = {base + i * step for i in range(len(grants) + 1)}
            for entry in joins_of[key]:
                if entry["fair_pass"] not in allowed:
                    violations.append(
                        f"{name}: #{entry['position']} of key {key!r} joined at {at.isoformat()} with pass "
                        f"{_turns(entry['fair_pass'])}, where its key's pass was {_turns(base)} (SPEC 13.2)"
                    )
            known[key] = expected
        if entering:
            violations.extend(_entering_violations(name, moment, entering, before, known))
    for key, value in sorted(known.items()):
        if fair.stored_pass(key) != value:
            violations.append(
                f"{name}: key {key!r} keeps pass {_turns(fair.stored_pass(key))}, where its turns add up "
                f"to {_turns(value)} (SPEC 13.2)"
            )
    return violations


def _entering_violations(
    name: str, moment: Instant, entering: dict[str, int], before: dict[str, int], after: dict[str, int]
) -> list[str]:
    """A key that had nothing held or waiting entered the turns at the smallest pass of the other
    keys active then (0 if none), as far as one instant's unordered events let the rows tell."""
    active_before, active_after = moment.active_before(), moment.active_after()
    touched = {slot["key"] for slot in moment.grants} | set(moment.frees)
    touched |= {entry["key"] for entry in moment.arrivals}
    touched |= {entry["key"] for entry in moment.waiting.values() if entry["id"] in moment.leaves}
    violations = []
    for key, value in entering.items():
        possibly = (active_before | active_after) - {key}
        certainly = (active_before & active_after) - touched - {key}
        passes = {other: {p for p in (before.get(other), after.get(other)) if p is not None} for other in possibly}
        known = [p for other in possibly for p in passes[other]]
        low = min(known) if known and all(passes.values()) else 0
        sure = [min(passes[other]) for other in certainly if passes[other]]
        high: int | None = None  # None: the rows cannot bound it from above
        if sure:
            high = min(sure)
        elif not certainly and all(passes.values()):
            high = max([0, *known])
        if not possibly:
            low = high = 0
        if value < low or (high is not None and value > high):
            violations.append(
                f"{name}: key {key!r} entered the turns at {moment.at.isoformat()} at pass {_turns(value)}, "
                f"not the smallest pass of the keys active then ({_turns(low)} to {_turns(high)}) (SPEC 13.2)"
            )
    return violations


def fair_interleaving(name: str, fewer_than: int = 2) -> list[str]:
    """Issue 43's interleaving, where the turns promise it: no key K served three turns (3 ×
    its weight grants in a row of its own, ranked at passes its stride apart) while another key
    J competed throughout, staying in the turns, and was served fewer than two turns (2 × its
    weight grants) from the first of them to the last. For weight 1 both: no tenant served three
    times while another competing tenant waits and is served fewer than two times.

    J competes at a grant of K when it waited across it with room in its pool and stood no later
    than K by (under its min, (busy + reserved) / weight), judged at J's highest place and K's
    lowest at that instant (J holding more of its share is rightly served after K); and, at the
    first of the window, J was not ahead of K in the turns (its pass at most the one K's grant
    was ranked at: a key served more turns before, or one that just caught up turns it missed
    while holding a slot long, waits its due). Passes the rows cannot tell count as not ahead.
    J stays in the turns when its pass moved by its own grants alone from the first of the
    window to the last (_Turns.stayed). The bound: K's last grant was ranked two turns (or more)
    after its first; J, competing at it on equal share, had a pass at least that (else that
    grant jumped 13.2's order), and at most K's first rank when the window began; a pass that
    moves by J's grants alone covers those two turns with 2 × J's weight grants in the window.
    So a window found here is a grant out of 13.2's order, or turns that do not add up, that the
    single-grant checks may not see at one instant's unordered events. A J that had nothing held
    or waiting in between is not judged: it entered the turns again at the smallest pass of the
    keys active then (13.2), which can be above its own (a weight-2 key with one run at a time,
    back after its first half turn while every other key was a turn on, forfeits the other
    half: served about once a round, as a weight-1 key), so the bound does not hold for it.
    After the last audited change of the limit's rules only; grants at an instant at which an
    owed run (10.4) may have waited are left out (it comes first, 13.4), and a window over them
    breaks where its passes no longer step by the stride. `fewer_than`: the turns J must have been
    served in the window (2)."""
    fair = _Fair.load(name)
    turns = _Turns(fair)
    grants: dict[str, list[tuple[dt.datetime, int | None, dict[str, int | None]]]] = defaultdict(list)
    for moment in fair.instants():
        if not moment.grants or not fair.judged(moment.at) or fair.owed_waiting(moment.at):
            continue
        rivals = _rivals(fair, turns, moment)
        for slot in moment.grants:
            key = slot["key"]
            mine = fair.order(key, moment.level[key] - moment.frees[key])
            competing = {other: found[1] for other, found in rivals.items() if other != key and found[0] <= mine}
            grants[key].append((moment.at, slot["fair_pass"], competing))
    served = {key: [at for at, _, _ in own] for key, own in grants.items()}
    violations = []
    for key, own in sorted(grants.items()):
        size, step = 3 * fair.weight(key), fair.stride(key)
        reported: set[str] = set()
        for first in range(len(own) - size + 1):
            window = own[first : first + size]
            passes = [ranked for _, ranked, _ in window]
            if None not in passes and any(b - a != step for a, b in zip(passes, passes[1:], strict=False)):
                continue  # not three turns: K entered the turns again in between at another pass
            began, ranked, at_first = window[0]
            ended = window[-1][0]
            common = set(at_first).intersection(*(other for _, _, other in window[1:])) - reported
            for other in sorted(common):
                their_pass = at_first[other]
                if their_pass is not None and ranked is not None and their_pass > ranked:
                    continue  # ahead in the turns when the window began: K's grants were due
                if not turns.stayed(other, began, ended):
                    continue  # left the turns and entered again at the smallest active pass
                theirs = served.get(other, [])
                count = bisect_right(theirs, ended) - bisect_left(theirs, began)
                if count < fewer_than * fair.weight(other):
                    reported.add(other)
                    violations.append(
                        f"{name}: key {key!r} served {size} times from {began.isoformat()} to {ended.isoformat()} "
                        f"while key {other!r} competed throughout and was served {count} time(s) (issue 43: "
                        "keys take turns)"
                    )
    return violations


def fair_contest(name: str, keys: Sequence[str], until: str) -> dict[str, Any]:
    """What happened while `keys` all competed on a fair limit (issue 43's fault run): from the
    first instant at which every one of them had a run waiting, until `until` (one of them) had
    none left waiting. The grants in that window by key ('' shown as '(no key)'), and the longest
    slot any of `keys` held that was live in it, with its key: the measures of the fault run
    (the flood's share, a weight-3 key's grants against a weight-1 key's) assume holds of about
    one length, as SPEC 13.2 counts grants, not time held: a hold stretched far beyond the
    others' (a worker killed in its step) makes that key catch up its turns afterwards. Empty
    when the keys never all competed."""
    fair = _Fair.load(name)
    wanted = set(keys)
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    grants: Counter[str] = Counter()
    for moment in fair.instants():
        if start is None:
            if not wanted <= {entry["key"] for entry in moment.waiting.values()}:
                continue
            start = moment.at
        grants.update(slot["key"] or "(no key)" for slot in moment.grants)
        if until not in moment.waiting_after():
            end = moment.at
            break
    if start is None or end is None:
        return {}
    longest, holder = 0.0, ""
    for slot in fair.slots:
        if slot["key"] in wanted and slot["granted_at"] <= end and (slot["freed_at"] or FOREVER) >= start:
            held = ((slot["freed_at"] or end) - slot["granted_at"]).total_seconds()
            if held > longest:
                longest, holder = held, slot["key"]
    return {
        "start": start,
        "end": end,
        "grants": grants,
        "total": sum(grants.values()),
        "longest_hold": (round(longest, 2), holder),
    }


def fair_figures(name: str, flood: str) -> dict[str, Any]:
    """What a load did on a fair limit, by key ('' shown as '(no key)'): slots granted; waits of
    the runs granted from the queue (p50 and longest, ms); slots held on average over the load
    (busy + reserved, weighted by time); and how the other keys fared against the flooding key's
    backlog: of their waits that began while runs of `flood` were already waiting, how many were
    granted before any further slot went to `flood` (SPEC 13.2 serves a key holding less per
    weight first, whatever the backlog's age), and the most slots `flood` got during one such
    wait; and how many grants the turns decided (`decided_by_turns`: another key waited across
    the grant with room in its pool at the same place by min and share, so the pass, or on a tie
    of the pass the arrival, chose between them)."""
    fair = _Fair.load(name)
    turns = _Turns(fair)

    def shown(key: str) -> str:
        return key or "(no key)"

    grants = Counter(shown(slot["key"]) for slot in fair.slots)
    granted_at = {slot["queue_entry_id"]: slot["granted_at"] for slot in fair.slots if slot["queue_entry_id"]}
    waits: dict[str, list[float]] = defaultdict(list)
    for entry in fair.entries:
        if entry["id"] in granted_at:
            waits[shown(entry["key"])].append((granted_at[entry["id"]] - entry["enqueued_at"]).total_seconds())
    held: dict[str, float] = defaultdict(float)
    first = previous = None
    by_turns = 0
    for moment in fair.instants():
        rivals = _rivals(fair, turns, moment) if moment.grants else {}
        for slot in moment.grants:
            mine = fair.order(slot["key"], moment.level[slot["key"]] - moment.frees[slot["key"]])
            by_turns += any(other != slot["key"] and found[0] == mine for other, found in rivals.items())
        if previous is not None:
            span = (moment.at - previous).total_seconds()
            for key, count in moment.level.items():
                held[shown(key)] += count * span
        first, previous = first or moment.at, moment.at
    seconds = (previous - first).total_seconds() if first and previous else 0.0
    flood_grants = sorted(slot["granted_at"] for slot in fair.slots if slot["key"] == flood)
    flood_waits = [(e["enqueued_at"], e["finished_at"] or FOREVER) for e in fair.entries if e["key"] == flood]
    behind = ahead = most = 0
    for entry in fair.entries:
        if entry["key"] == flood or entry["id"] not in granted_at:
            continue
        began, ended = entry["enqueued_at"], granted_at[entry["id"]]
        if not any(enqueued < began < finished for enqueued, finished in flood_waits):
            continue
        behind += 1
        jumped = bisect_left(flood_grants, ended) - bisect_right(flood_grants, began)
        ahead += jumped == 0
        most = max(most, jumped)
    return {
        "grants": dict(sorted(grants.items())),
        "wait_ms_p50_max": {
            key: [round(1000 * sorted(mine)[len(mine) // 2]), round(1000 * max(mine))]
            for key, mine in sorted(waits.items())
        },
        "mean_held": {key: round(total / seconds, 2) for key, total in sorted(held.items()) if seconds},
        "waits_behind_flood_backlog": behind,
        "served_before_flood_again": ahead,
        "most_flood_grants_in_one_wait": most,
        "decided_by_turns": by_turns,
    }
