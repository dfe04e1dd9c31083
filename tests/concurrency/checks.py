"""Checks from the rows for the keys-and-groups stress test (tests/concurrency/test_stress.py),
beside limits.verify: what the juggling clients were told against the rows, key pools against the
pool sizes in force at each grant (verify's check f stands aside once per_key changed: it keeps
no past sizes, but the audit rows do), and no younger run granted while an owed run waited."""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_left, bisect_right, insort
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from django.db.models import Max

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
# (a release or a sweep's expiry changes no rule).
RULE_CHANGES = [
    action
    for action in AuditEvent.Action.values
    if action not in (AuditEvent.Action.RELEASE, AuditEvent.Action.EXPIRE, AuditEvent.Action.MAX_HOLD)
]


@dataclass
class Instant:
    """One instant of a fair limit's replay (_Fair.instants)."""

    at: dt.datetime
    level: Counter[str]
    grants: list[dict[str, Any]]
    frees: Counter[str]
    waiting: dict[int, dict[str, Any]]
    arrivals: list[dict[str, Any]]

    def after(self) -> Counter[str]:
        """The levels once every change of this instant is made."""
        level = self.level.copy()
        level.subtract(self.frees)
        level.update(slot["key"] for slot in self.grants)
        return level


@dataclass
class _Fair:
    """A fair limit's history replayed instant by instant from its rows, with the weights, mins
    and pool sizes in force now (the checks judge only after the last audited change of a rule
    of the limit, `since`: no past values are kept)."""

    name: str
    capacity: int
    per_key: int | None
    rows: dict[str, Any]  # key -> its LimitKey row (weight, minimum, pool_override)
    since: dt.datetime | None
    slots: list[Any]  # the slot rows, as dicts
    entries: list[Any]  # the queue entry rows, as dicts

    @classmethod
    def load(cls, name: str) -> _Fair:
        limit = Limit.objects.get(name=name)
        rows = {row.key: row for row in LimitKey.objects.filter(limit=limit)}
        since = AuditEvent.objects.filter(limit=limit, action__in=RULE_CHANGES).aggregate(last=Max("at"))["last"]
        slots = list(Slot.objects.filter(limit=limit).values("id", "key", "granted_at", "freed_at", "queue_entry_id"))
        entries = list(
            QueueEntry.objects.filter(limit=limit).values(
                "id", "run_id", "key", "position", "enqueued_at", "finished_at", "deadline", "state"
            )
        )
        return cls(name, limit.capacity, limit.per_key, rows, since, slots, entries)

    def size(self, key: str) -> int | None:
        row = self.rows.get(key) if key else None
        return row.pool_override if row is not None and row.pool_override is not None else self.per_key

    def order(self, key: str, level: int) -> tuple[bool, Fraction]:
        """SPEC 13.2's place of a key holding `level` slots: below its min first, then the
        smallest level / weight (the no-key pool: weight 1, min 0)."""
        row = self.rows.get(key) if key else None
        weight, minimum = (row.weight, row.minimum) if row is not None else (1, 0)
        return (level >= minimum, Fraction(level, weight))

    def instants(self) -> Iterator[Instant]:
        """Per instant, in order: the levels (busy + reserved) per key just before it, the grants
        and frees at it, the entries waiting just before it and those enqueued at it. The levels
        and the waiting entries are the replay's own, changed after each yield."""
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
            yield Instant(at, level, grants, frees, waiting, arrivals)
            level.subtract(frees)
            level.update(slot["key"] for slot in grants)
            waiting.update((entry["id"], entry) for entry in arrivals)
            for kind, item in happened:
                if kind == FINISH:
                    waiting.pop(item["id"], None)


def _still_waiting(entry: dict[str, Any], at: dt.datetime) -> bool:
    """Waiting through `at` with its deadline to come (leaving at `at` itself may have been a
    grant in the same settle: the benefit of the doubt)."""
    return (entry["finished_at"] is None or entry["finished_at"] > at) and entry["deadline"] > at


def fair_rule_violations(name: str, *, idle: bool = True) -> list[str]:
    """SPEC 13.2 and 13.6 on a fair limit, from its rows (after its last audited change: the
    weights, mins and pool sizes in force now are the ones judged by):

    - order: no slot was granted to a key K while a run of another key J waited (through that
      instant, its deadline to come) whose pool had room and whose place in 13.2's order was
      strictly before K's: J below its min and K not, or both alike and J's (busy + reserved) /
      weight smaller. At one instant the order of frees and grants is unknown: K is judged at
      its lowest level then (every free of K at that instant first, none of its grants), J at
      its highest (all its grants first, no free), so only a certain jump is reported; ties
      (decided by arrival) are let be;
    - no idle capacity (unless `idle` is False): once an instant's changes are all made, busy +
      reserved below the capacity while a run waited (enqueued by then, deadline to come) whose
      key's pool had room.

    Every wait counts as one that could be served: no groups and no owed runs in the fair stress
    test (one limit per acquisition, so 10.4 never applies). The chaos run judges the order alone
    (`idle=False`): its waits are groups with the box (SPEC 12.2), all of one workflow, so a grant
    to one of them shows the box had room for the others, but a full box may leave the limit's
    capacity free."""
    fair = _Fair.load(name)
    violations: list[str] = []
    for moment in fair.instants():
        at, level, frees = moment.at, moment.level, moment.frees
        if fair.since is not None and at <= fair.since:
            continue
        gained = Counter(slot["key"] for slot in moment.grants)
        for slot in moment.grants:
            key = slot["key"]
            mine = fair.order(key, level[key] - frees[key])
            for entry in moment.waiting.values():
                other = entry["key"]
                if other == key or not _still_waiting(entry, at):
                    continue
                most = level[other] + gained[other]
                size = fair.size(other)
                if (size is None or most < size) and fair.order(other, most) < mine:
                    violations.append(
                        f"{name}: slot {slot['id']} granted to key {key!r} at {at.isoformat()} while "
                        f"#{entry['position']} of key {other!r} waited ahead of it (SPEC 13.2)"
                    )
                    break
        after = moment.after()
        if not idle or after.total() >= fair.capacity:
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


def fair_figures(name: str, flood: str) -> dict[str, Any]:
    """What a load did on a fair limit, by key ('' shown as '(no key)'): slots granted; waits of
    the runs granted from the queue (p50 and longest, ms); slots held on average over the load
    (busy + reserved, weighted by time); and how the other keys fared against the flooding key's
    backlog: of their waits that began while runs of `flood` were already waiting, how many were
    granted before any further slot went to `flood` (SPEC 13.2 serves a key holding less per
    weight first, whatever the backlog's age), and the most slots `flood` got during one such
    wait."""
    fair = _Fair.load(name)

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
    for moment in fair.instants():
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
    }
