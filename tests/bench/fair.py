"""Scenario 14 (issue 28, SPEC 13): fair shares between keys, measured.

simulate(): the issue's simulation. One limit of capacity 10; tenant A floods 1,000 runs, tenants
B-E send 20 each a moment later (A's flood already queued), every run holds its slot 200 ms. The
same load on a fair limit, a fifo limit with per_key 2 and a fifo limit without per_key, in turn.

The runs are straight acquire → hold → release calls of the engine (services.acquire with the
tenant as the key, services.release), not workflows through Celery: a run holding a slot for
200 ms inside a with_limit step occupies a worker the whole time, so filling 10 slots would need
10+ worker processes on 2 cores, and the workers (scenario 11: ~80-115 runs/s at most, ~10-25 ms
of CPU a run) would bind near the 50 runs/s this load needs: the figure would measure Celery,
not the grant order. Here a waiting run costs no process (as a suspended run): a few processes
own the runs, each one loop that submits its runs, sleeps until the next release is due or a
wake arrives, confirms a woken run's reservation (acquire again with the same request, as the
run layer does) and releases held slots when their 200 ms are up. The wake is LISTEN/NOTIFY
(the engine's runs_woken signal → pg_notify to the owner's channel, after commit), in place of
the run layer's Celery wake task (measured in scenarios 2 and 11).

key_choice(): the grant's choice of the next key at scale: 10,000 keys with 1-3 runs each waiting
on one fair limit (and on a fifo limit with per_key 2, the same rows), the capacity full, then a
stream of releases each of which grants one waiting run (a release → the woken run confirms →
the oldest busy slot is released next): ms per release that grants, per confirm; and EXPLAIN
ANALYZE of the fair choice (limits_fair_next) and of its key scan.

turns(): the keys take turns (issue 43, SPEC 13.2 amended: stride scheduling). One limit of
capacity 4; six tenants with 20 runs each arrive oldest first (tenant 1's twenty, then tenant
2's, ...: one process per tenant, each sending its runs once the one before has sent all of
its), every run holds its slot 200 ms; the same load on a fair limit and on a fifo limit with
per_key 2, in turn. The figures come from the rows: a run's arrival is its queue entry's
enqueued_at (its slot's granted_at when it was granted at once), its grant the granted_at of the
slot it confirmed, a release that slot's freed_at (the database's clock, as the engine stamps them).
"""

from __future__ import annotations

import heapq
import multiprocessing
import os
import threading
import time
import uuid
from bisect import bisect_right
from typing import Any

from tests.bench.common import percentile, psycopg_dsn

HOLD_MS = 200.0
FLOOD = 1_000  # tenant A's runs
SMALL = 20  # each of tenants B-E
SMALL_TENANTS = ("B", "C", "D", "E")
SMALL_AFTER_S = 1.0  # the small tenants send their runs this long after A's flood began
A_PROCESSES = 4  # processes owning A's runs; one more per small tenant
SAMPLE_EVERY = 0.05  # s between two reads of the limit's counters
IDLE_REPOLL_S = 5.0  # a process with waiting runs and nothing heard for this long asks again (lost wakes)


def _channel(tag: str, owner: int) -> str:
    return f"fair_{tag}_{owner}"


def _owner(run_id: str) -> int:
    return int(run_id.split("-")[2][1:])


def plan(tag: str, flood: int = FLOOD, small: int = SMALL) -> list[list[tuple[str, str, float]]]:
    """The runs each process owns: (run id, key, seconds after the start it is sent). A's runs are
    dealt round robin over A_PROCESSES processes, in order; each small tenant has a process."""
    owners: list[list[tuple[str, str, float]]] = [[] for _ in range(A_PROCESSES + len(SMALL_TENANTS))]
    for i in range(flood):
        owner = i % A_PROCESSES
        owners[owner].append((f"fs-{tag}-p{owner}-A-{i}", "A", 0.0))
    for t, tenant in enumerate(SMALL_TENANTS):
        owner = A_PROCESSES + t
        owners[owner] += [(f"fs-{tag}-p{owner}-{tenant}-{i}", tenant, SMALL_AFTER_S) for i in range(small)]
    return owners


def _child(
    limit: str,
    tag: str,
    owner: int,
    runs: list[tuple[str, str, float]],
    hold_ms: float,
    barrier: Any,
    out: Any,
    after: Any = None,
    sent_all: Any = None,
) -> None:
    """One process's loop (see the module's docstring). Puts one dict on `out`: per run (key,
    sent, busy, released) in wall-clock seconds; and the counts of stale wakes and re-polls.
    `after`: an event the process waits for before it sends its first run (the process before
    it has sent all of its); `sent_all`: the event it sets once it has sent all of its runs."""
    try:
        import django

        django.setup()
        import psycopg

        from limits import services
        from limits.signals import runs_woken

        side = psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True)
        side.execute("SET synchronous_commit = off")
        side.execute(f"LISTEN {_channel(tag, owner)}")

        def announce(sender: object, run_ids: list[str], **kwargs: object) -> None:
            mine = [r for r in run_ids if r.startswith(f"fs-{tag}-")]
            if mine:
                side.execute(
                    "SELECT pg_notify(c, r) FROM unnest(%s::text[], %s::text[]) AS u(c, r)",
                    [[_channel(tag, _owner(r)) for r in mine], mine],
                )

        runs_woken.disconnect(dispatch_uid="limits-wake-runs")
        runs_woken.connect(announce, weak=False, dispatch_uid="bench-fair-announce")
        keys = {run_id: key for run_id, key, _ in runs}
        pending = sorted(runs, key=lambda r: r[2])
        pending.reverse()  # pop() from the end: the earliest first
        sent: dict[str, float] = {}
        busy: dict[str, float] = {}
        released: dict[str, float] = {}
        waiting: set[str] = set()
        holding: list[tuple[float, str, list[str]]] = []
        stale = repolls = 0
        barrier.wait(timeout=180)
        if after is not None:  # nothing of this process's is in the system before its turn
            after.wait(timeout=600)
        start = time.time()
        heard = time.monotonic()

        def take(run_id: str) -> None:
            got = services.acquire(limit, run_id=run_id, request=run_id, key=keys[run_id])
            if got.state == "busy":
                now = time.time()
                busy[run_id] = now
                waiting.discard(run_id)
                slots = [slot for _, slot in got.slots] or [str(got.slot_id)]
                heapq.heappush(holding, (now + hold_ms / 1000, run_id, slots))
            elif got.state == "waiting":
                waiting.add(run_id)
            else:
                raise RuntimeError(f"{run_id}: acquire ended {got.state}")

        while pending or waiting or holding:
            now = time.time()
            while holding and holding[0][0] <= now:
                _, run_id, slots = heapq.heappop(holding)
                for slot in slots:
                    services.release(slot)
                released[run_id] = time.time()
                now = time.time()
            submitting = bool(pending) and start + pending[-1][2] <= now
            if submitting:
                run_id, _, _ = pending.pop()
                sent[run_id] = now
                take(run_id)
                if not pending and sent_all is not None:
                    sent_all.set()
            # Between two submissions too: the wakes that came meanwhile (a woken run confirms
            # without waiting for its process to send all its runs), then the releases due.
            due = [holding[0][0] - now] if holding else []
            if pending:
                due.append(start + pending[-1][2] - now)
            timeout = 0.0005 if submitting else max(0.001, min(due + [1.0]))
            woken = [n.payload for n in side.notifies(timeout=timeout, stop_after=1)]
            if woken:
                woken += [n.payload for n in side.notifies(timeout=0.0005)]
                heard = time.monotonic()
            for run_id in woken:
                if run_id in waiting:
                    take(run_id)
                    stale += run_id in waiting
            if waiting and not holding and time.monotonic() - heard > IDLE_REPOLL_S:
                repolls += 1
                heard = time.monotonic()
                for run_id in list(waiting):
                    take(run_id)
        side.close()
        out.put(
            {
                "runs": {r: (keys[r], sent[r], busy[r], released[r]) for r in keys},
                "stale": stale,
                "repolls": repolls,
            }
        )
    except Exception as error:  # noqa: BLE001 - reported to the parent
        import traceback

        out.put({"error": traceback.format_exc() or repr(error)})
        if sent_all is not None:  # the processes chained after this one go on, and end
            sent_all.set()


class _Counters:
    """The limit's counters every SAMPLE_EVERY s while the load runs: (time, busy, reserved, waiting)."""

    def __init__(self, limit: str) -> None:
        self.limit = limit
        self.samples: list[tuple[float, int, int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> _Counters:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
            while not self.stop.wait(SAMPLE_EVERY):
                row = conn.execute(
                    "SELECT busy_count, reserved_count, waiting_count FROM limits_limit WHERE name = %s",
                    [self.limit],
                ).fetchone()
                if row:
                    self.samples.append((time.time(), int(row[0]), int(row[1]), int(row[2])))


def _drive(
    limit: str, tag: str, owners: list[list[tuple[str, str, float]]], hold_ms: float, *, chained: bool = False
) -> tuple[list[dict[str, Any]], float, list[tuple[float, int, int, int]]]:
    """One process per owner, started together (a barrier), each running `_child` over its runs;
    `chained`: each owner sends its first run once the one before has sent all of its. Returns
    the processes' outcomes, the wall-clock start and the limit's counters sampled meanwhile."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(owners) + 1)
    out = ctx.Queue()
    sent_all = [ctx.Event() for _ in owners]
    children = [
        ctx.Process(
            target=_child,
            args=(limit, tag, owner, runs, hold_ms, barrier, out),
            kwargs={"after": sent_all[owner - 1] if chained and owner else None, "sent_all": sent_all[owner]},
        )
        for owner, runs in enumerate(owners)
    ]
    for child in children:
        child.start()
    try:
        barrier.wait(timeout=180)
        start = time.time()
        with _Counters(limit) as counters:
            outcomes = [out.get(timeout=600) for _ in children]
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    failed = [o["error"] for o in outcomes if "error" in o]
    if failed:
        raise RuntimeError(f"a fair-share process failed: {failed[0]}")
    return outcomes, start, counters.samples


def simulate(limit: str, capacity: int = 10, hold_ms: float = HOLD_MS, flood: int = FLOOD) -> dict[str, Any]:
    """The load on `limit`; the figures of one sitting (see summarize)."""
    tag = uuid.uuid4().hex[:6]
    outcomes, start, samples = _drive(limit, tag, plan(tag, flood), hold_ms)
    runs: dict[str, tuple[str, float, float, float]] = {}
    for outcome in outcomes:
        runs.update(outcome["runs"])
    figures = summarize(runs, samples, start, capacity, hold_ms)
    figures["stale"] = sum(o["stale"] for o in outcomes)
    figures["repolls"] = sum(o["repolls"] for o in outcomes)
    return figures


def summarize(
    runs: dict[str, tuple[str, float, float, float]],
    samples: list[tuple[float, int, int, int]],
    start: float,
    capacity: int,
    hold_ms: float,
) -> dict[str, Any]:
    """runs: id → (key, sent, busy, released), wall-clock s. Capacity used while anyone waits: the
    mean of (busy + reserved) / capacity, and of busy / capacity, over the samples with a waiting
    run (reserved: handed to a woken run that has not confirmed yet, so not free). Time to grant:
    sent → busy (the wake and the confirm included). A's throughput: its runs ended per second
    over the whole load, and while the small tenants had runs in the system."""
    waiting = [(b, r) for _, b, r, w in samples if w > 0]
    small = [v for v in runs.values() if v[0] != "A"]
    flood = [v for v in runs.values() if v[0] == "A"]
    grant_ms = [1000 * (busy - sent) for _, sent, busy, _ in small]
    first_ms = [
        min(1000 * (busy - sent) for key, sent, busy, _ in small if key == tenant) for tenant in {v[0] for v in small}
    ]
    a_grant_ms = [1000 * (busy - sent) for _, sent, busy, _ in flood]
    end = max(v[3] for v in runs.values())
    small_from = min((v[1] for v in small), default=start)
    small_to = max((v[3] for v in small), default=start)
    a_during = sum(1 for v in flood if small_from <= v[3] <= small_to)
    busy_during = [b for t, b, _, _ in samples if small_from <= t <= small_to]
    return {
        "n": len(runs),
        "seconds": end - start,
        "cycles_per_s": len(runs) / (end - start),
        "ideal_s": len(runs) * hold_ms / 1000 / capacity,
        "used": sum(b + r for b, r in waiting) / len(waiting) / capacity if waiting else float("nan"),
        "busy": sum(b for b, _ in waiting) / len(waiting) / capacity if waiting else float("nan"),
        "samples_waiting": len(waiting),
        "small_p50": percentile(grant_ms, 50),
        "small_p95": percentile(grant_ms, 95),
        "small_max": max(grant_ms, default=float("nan")),
        "small_first_max": max(first_ms, default=float("nan")),
        # How long slots were really held (busy → released): an owner process is one loop, so a
        # slow acquire of its own delays its due releases past hold_ms (an artefact of the bench).
        "hold_p95": percentile([1000 * (rel - busy) for _, _, busy, rel in runs.values()], 95),
        "small_done_s": small_to - start,
        "a_p50": percentile(a_grant_ms, 50),
        "a_per_s": len(flood) / (max(v[3] for v in flood) - start) if flood else float("nan"),
        "a_per_s_during": a_during / (small_to - small_from) if small_to > small_from else float("nan"),
        "busy_during": sum(busy_during) / len(busy_during) if busy_during else float("nan"),
    }


# --- the keys take turns (issue 43) -----------------------------------------------------------------

TURN_CAPACITY = 4  # the capacity of the two limits of turns() (tests.bench.workspace)
TURN_TENANTS = 6
TURN_RUNS = 20  # each tenant's


def turns_plan(tag: str, tenants: int = TURN_TENANTS, runs: int = TURN_RUNS) -> list[list[tuple[str, str, float]]]:
    """The runs of turns(): tenant n (key "t<n>", 1 to `tenants`) owned by process n - 1; all sent
    from the start, each process after the one before (turns() chains them)."""
    return [[(f"fs-{tag}-p{t}-t{t + 1}-{i}", f"t{t + 1}", 0.0) for i in range(runs)] for t in range(tenants)]


def turns(
    limit: str,
    capacity: int = TURN_CAPACITY,
    hold_ms: float = HOLD_MS,
    tenants: int = TURN_TENANTS,
    runs: int = TURN_RUNS,
) -> dict[str, Any]:
    """The load of turns() on `limit` (see the module's docstring); the figures of
    summarize_turns, from the slot and queue rows, and the processes' own counts."""
    tag = uuid.uuid4().hex[:6]
    outcomes, start, _ = _drive(limit, tag, turns_plan(tag, tenants, runs), hold_ms, chained=True)
    grants, lapsed = turn_rows(f"fs-{tag}-")
    figures = summarize_turns(grants, capacity, hold_ms)
    figures["lapsed"] = lapsed
    figures["stale"] = sum(o["stale"] for o in outcomes)
    figures["repolls"] = sum(o["repolls"] for o in outcomes)
    held = [released - busy for o in outcomes for _, _, busy, released in o["runs"].values()]
    figures["hold_p95"] = 1000 * percentile(held, 95)
    return figures


def turn_rows(prefix: str) -> tuple[dict[str, tuple[str, float, float, float]], int]:
    """The runs whose id starts with `prefix`, from the rows: run id -> (key, arrived, granted,
    released) in seconds (the database's clock). Arrived: its first queue entry's enqueued_at,
    or the granted_at of its first slot if that came first (granted at once); granted: the
    granted_at of the slot it confirmed; released: that slot's freed_at. And how many slots were
    granted and never confirmed (a reservation that lapsed: its run was queued again)."""
    from django.db.models import Min

    from limits.models import QueueEntry, Slot

    queued = dict(
        QueueEntry.objects.filter(run_id__startswith=prefix)
        .values("run_id")
        .annotate(first=Min("enqueued_at"))
        .values_list("run_id", "first")
    )
    first_slot: dict[str, float] = {}
    held: dict[str, tuple[str, float, float]] = {}
    lapsed = 0
    slots = Slot.objects.filter(run_id__startswith=prefix).values_list(
        "run_id", "key", "granted_at", "confirmed_at", "freed_at"
    )
    for run_id, key, granted_at, confirmed_at, freed_at in slots:
        granted = granted_at.timestamp()
        first_slot[run_id] = min(granted, first_slot.get(run_id, granted))
        if confirmed_at is None:
            lapsed += 1
            continue
        if freed_at is None:
            raise RuntimeError(f"{run_id}: its slot was never released")
        held[run_id] = (key, granted, freed_at.timestamp())
    grants = {}
    for run_id, (key, granted, released) in held.items():
        arrived = min(first_slot[run_id], queued[run_id].timestamp() if run_id in queued else first_slot[run_id])
        grants[run_id] = (key, arrived, granted, released)
    return grants, lapsed


def summarize_turns(runs: dict[str, tuple[str, float, float, float]], capacity: int, hold_ms: float) -> dict[str, Any]:
    """runs: id -> (key, arrived, granted, released), s. Per tenant (key), in ms:
    - arrived: when its first run arrived, from the load's first arrival;
    - first: its first grant, from its arrival; first_release: the first release (of any run)
      after it arrived, from its arrival; after_release: its first grant from that release
      (negative: granted before any release, at once); ahead: the grants to other tenants
      between its arrival and its first grant (a count);
    - gap: the largest gap between two of its grants while it waited (its next run had arrived by
      the earlier grant); gap_grants: the most grants to other tenants within such a gap;
    - without: the longest it waited without a grant, its first wait (arrival to first grant) and
      the gaps; without_grants: the same in grants to others (ahead and gap_grants).
    The target, in holds: every after_release at most one hold; every without at most (competing
    keys / capacity + 1) holds, the competing keys being the tenants of the load. Judged three
    ways: in holds of `hold_ms` (first_met, gap_met); in holds as the slots were held (held_ms:
    the mean of granted -> released, from the rows; the owner loops' wake, confirm and own delays
    make it longer than hold_ms on a busy machine: first_met_held, gap_met_held); and in grants,
    whatever the machine's pace (capacity grants a hold: after the first release, the grants of
    the capacity next releases come within one hold, so at most `capacity` grants to others
    before a first grant; in (keys / capacity + 1) holds, keys + capacity releases, so at most
    keys + capacity - 1 grants to others while waiting: first_met_grants, gap_met_grants)."""
    releases = sorted(released for _, _, _, released in runs.values())
    granted_all = sorted((granted, key) for key, _, granted, _ in runs.values())
    start = min(arrived for _, arrived, _, _ in runs.values())
    keys = sorted({key for key, _, _, _ in runs.values()}, key=lambda k: (len(k), k))
    tenants: dict[str, dict[str, Any]] = {}
    for key in keys:
        arrivals = sorted(arrived for k, arrived, _, _ in runs.values() if k == key)
        grants = sorted(granted for k, _, granted, _ in runs.values() if k == key)
        arrived = arrivals[0]
        release = next((r for r in releases if r > arrived), float("inf"))
        waited = [
            (grants[i], grants[i + 1])
            for i in range(len(grants) - 1)
            if bisect_right(arrivals, grants[i]) > i + 1  # its next run waited at the earlier grant
        ]
        gaps = [later - earlier for earlier, later in waited]

        def others(after: float, before: float, key: str = key) -> int:
            return sum(1 for at, k in granted_all if after < at < before and k != key)

        ahead = others(arrived, grants[0])
        gap_grants = max((others(earlier, later) for earlier, later in waited), default=0)
        first = grants[0] - arrived
        tenants[key] = {
            "arrived": 1000 * (arrived - start),
            "first": 1000 * first,
            "first_release": 1000 * (release - arrived),
            "after_release": 1000 * (grants[0] - release),
            "ahead": ahead,
            "gap": 1000 * max(gaps, default=0.0),
            "gap_grants": gap_grants,
            "without": 1000 * max([first, *gaps]),
            "without_grants": max(ahead, gap_grants),
        }
    held_ms = 1000 * sum(released - granted for _, _, granted, released in runs.values()) / len(runs)
    per_bound = len(keys) / capacity + 1

    def met(hold: float) -> tuple[bool, bool]:
        return (
            all(t["after_release"] <= hold for t in tenants.values()),
            all(t["without"] <= per_bound * hold for t in tenants.values()),
        )

    first_met, gap_met = met(hold_ms)
    first_met_held, gap_met_held = met(held_ms)
    most_without = len(keys) + capacity - 1
    end = max(releases)
    return {
        "n": len(runs),
        "keys": len(keys),
        "tenants": tenants,
        "holds_bound": per_bound,
        "bound_ms": per_bound * hold_ms,
        "held_ms": held_ms,
        "first_met": first_met,
        "gap_met": gap_met,
        "first_met_held": first_met_held,
        "gap_met_held": gap_met_held,
        "most_without_grants": most_without,
        "first_met_grants": all(t["ahead"] <= capacity for t in tenants.values()),
        "gap_met_grants": all(t["without_grants"] <= most_without for t in tenants.values()),
        "first_max": max(t["first"] for t in tenants.values()),
        "after_release_max": max(t["after_release"] for t in tenants.values()),
        "gap_max": max(t["gap"] for t in tenants.values()),
        "without_max": max(t["without"] for t in tenants.values()),
        "seconds": end - start,
        "ideal_s": len(runs) * hold_ms / 1000 / capacity,
    }


# --- the key choice at 10,000 waiting keys -------------------------------------------------------


def fill_waiting(limit: str, keys: int, tag: str, holders: int = 10) -> int:
    """`holders` busy slots on `limit` (services.acquire, keys h-0..), then `keys` keys with 1-3
    waiting runs each (key k has 1 + k % 3), inserted in SQL in one statement per table, and the
    counters of the limit and its keys set from the rows, as the engine keeps them (limits.verify
    checks them after the stream). Returns how many runs wait."""
    from django.db import connection

    from limits import services
    from limits.models import Limit

    for h in range(holders):
        got = services.acquire(limit, run_id=f"kc-{tag}-h{h}", request=f"kc-{tag}-h{h}", key=f"h-{h}")
        if got.state != "busy":
            raise RuntimeError(f"holder {h} of {limit}: {got.state}")
    limit_id = Limit.objects.values_list("id", flat=True).get(name=limit)
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                enqueued_at, deadline, timeout_ms)
            SELECT %(limit)s, 'kc-' || %(tag)s || '-' || k || '-' || r, 'kc-' || %(tag)s || '-' || k || '-' || r,
                '', l.next_position + row_number() OVER (ORDER BY r, k) - 1, 'k-' || k, 1, 'waiting',
                now(), now() + interval '1 day', 86400000
            FROM generate_series(0, %(keys)s - 1) AS k
            CROSS JOIN generate_series(0, 2) AS r
            CROSS JOIN (SELECT next_position FROM limits_limit WHERE id = %(limit)s) AS l
            WHERE r <= k %% 3
            """,
            {"limit": limit_id, "tag": tag, "keys": keys},
        )
        cur.execute(
            """
            INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, weight, minimum,
                created_at, head)
            SELECT %(limit)s, key, 0, 0, count(*), 1, 0, now(), min(position) FROM limits_queueentry
            WHERE limit_id = %(limit)s AND state = 'waiting' GROUP BY key
            """,
            {"limit": limit_id},
        )
        cur.execute(
            """
            UPDATE limits_limit l SET
                waiting_count = q.n, keyed_waiting_count = q.n, next_position = q.last + 1
            FROM (SELECT count(*) AS n, max(position) AS last FROM limits_queueentry
                  WHERE limit_id = %(limit)s AND state = 'waiting') q
            WHERE l.id = %(limit)s
            """,
            {"limit": limit_id},
        )
        cur.execute("ANALYZE limits_queueentry, limits_limitkey, limits_limit")
        cur.execute("SELECT waiting_count FROM limits_limit WHERE id = %s", [limit_id])
        return int(cur.fetchone()[0])


def release_stream(limit: str, tag: str, releases: int) -> dict[str, Any]:
    """`releases` times: release the oldest busy slot of the limit (each grants one waiting run,
    its wake noted by the runs_woken signal), then the woken run confirms (acquire again with its
    request and key) and holds its slot until it is the oldest. One process, no contention: the
    figures are the engine's own cost per operation."""
    from collections import deque

    from limits import services
    from limits.signals import runs_woken

    woken: list[str] = []

    def note(sender: object, run_ids: list[str], **kwargs: object) -> None:
        woken.extend(run_ids)

    runs_woken.connect(note, weak=False, dispatch_uid="bench-key-choice")
    try:
        from limits.models import Slot

        held = deque(
            Slot.objects.filter(limit__name=limit, state="busy", run_id__startswith=f"kc-{tag}-")
            .order_by("granted_at")
            .values_list("id", flat=True)
        )
        release_ms: list[float] = []
        confirm_ms: list[float] = []
        granted_keys: list[str] = []
        for _ in range(releases):
            woken.clear()
            started = time.perf_counter()
            services.release(held.popleft())
            release_ms.append(1000 * (time.perf_counter() - started))
            if len(woken) != 1:
                raise RuntimeError(f"a release on {limit} woke {woken}")
            run_id = woken[0]
            key = "k-" + run_id.split("-")[2]
            granted_keys.append(key)
            started = time.perf_counter()
            got = services.acquire(limit, run_id=run_id, request=run_id, key=key)
            confirm_ms.append(1000 * (time.perf_counter() - started))
            if got.state != "busy":
                raise RuntimeError(f"{run_id} confirmed as {got.state}")
            held.append([slot for _, slot in got.slots][0] if got.slots else str(got.slot_id))
    finally:
        runs_woken.disconnect(dispatch_uid="bench-key-choice")
    return {
        "releases": releases,
        "release_p50": percentile(release_ms, 50),
        "release_p95": percentile(release_ms, 95),
        "confirm_p50": percentile(confirm_ms, 50),
        "confirm_p95": percentile(confirm_ms, 95),
        "distinct_keys": len(set(granted_keys)),
        "first_keys": granted_keys[:5],
    }


# limits_fair_next's key scan (limits/sql/engine.sql, limits/0033), read to its first key: it should
# be one descent of the index limitkey_fair_order, whatever the number of keys waiting.
FAIR_KEY_SCAN = """
SELECT lk.key, lk.head
FROM limits_limitkey lk
WHERE lk.limit_id = (SELECT id FROM limits_limit WHERE name = %s) AND lk.head IS NOT NULL
ORDER BY lk.limit_id, lk.busy_count + lk.reserved_count >= lk.minimum,
         (lk.busy_count + lk.reserved_count)::numeric / lk.weight, lk.head
LIMIT 1
"""

# The whole choice as limits_grant makes it: nothing dealt with yet, no owed run, the box's base.
FAIR_NEXT = """
SELECT f.id, f.key FROM limits_limit lim
CROSS JOIN LATERAL limits_fair_next(lim, 9223372036854775807, '{}'::bigint[], limits_box_base(), 0) f
WHERE lim.name = %s
"""


def explain_candidate(limit: str, query: str = FAIR_KEY_SCAN) -> tuple[float, list[str]]:
    """EXPLAIN (ANALYZE, BUFFERS) of `query` (FAIR_KEY_SCAN: the fair choice's key scan; FAIR_NEXT:
    the whole choice, one function call) on `limit`, with the planner settings the engine's
    functions run under (no sequential or bitmap scans). Returns the execution time in ms and the
    plan's lines."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("SET LOCAL enable_bitmapscan = off")
        cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + query, [limit])
        lines = [row[0] for row in cur.fetchall()]
    total = next((float(x.split()[2]) for x in lines if x.startswith("Execution Time")), float("nan"))
    return total, lines
