"""Checks from the rows for the keys-and-groups stress test (tests/concurrency/test_stress.py),
beside limits.verify: what the juggling clients were told against the rows, key pools against the
pool sizes in force at each grant (verify's check f stands aside once per_key changed: it keeps
no past sizes, but the audit rows do), and no younger run granted while an owed run waited."""

from __future__ import annotations

import datetime as dt
import re
from bisect import insort
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from limits.models import AuditEvent, Limit, QueueEntry, Slot

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
