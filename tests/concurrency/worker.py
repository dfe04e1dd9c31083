"""A child process for the concurrency tests: `python -m tests.concurrency.worker <role> <json>`.

It sets Django up against the database named in its environment (the test database of the
parent), waits for the parent's start signal (a file appearing), plays its role, and prints one
JSON document on stdout. Roles:

- ``client``: acquires and releases slots the way workflow runs do, and writes down what every
  acquire call finally amounted to, so the parent can hold it against the rows.
- ``juggler``: plays several runs at once on keyed limits and acquisitions of two and three
  limits in any order (SPEC 9, 10), and changes pool sizes now and then as an operator.
- ``tenant``: plays one tenant's runs on a fair limit (SPEC 13), flooding or small
  (tests/concurrency/tenants.py).
- ``sweeper``: runs ``services.sweep()`` in a loop (two of them = two beats).
- ``monitor``: samples every limit, key pool and group in one snapshot, in a loop.
- ``enqueuer``: queues runs one by one, announcing each commit, then parks inside an open
  transaction holding the limit's lock until it is killed.
- ``reader``: a fresh process that reports the queues as it finds them.
- ``starter``: starts runs of a workflow whose own bound skips and caps its queue, and advances
  them as a Celery worker would (SPEC 14.2, 14.5 for starts: tests/concurrency/starters.py).

`python -m tests.concurrency.worker zygote {}` sets Django up once and forks a worker per order
it reads on stdin (tests.concurrency.processes.Crew starts its workers so: nine interpreters that
each set Django up cost a loaded 2-core machine many seconds per test).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from tests.concurrency.juggler import deadlocked, juggler
from tests.concurrency.tenants import tenant


def main() -> None:
    role, params = sys.argv[1], json.loads(sys.argv[2])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio.settings")
    import django

    django.setup()
    if role == "zygote":
        zygote()
    else:
        play(role, params)


def play(role: str, params: dict[str, Any]) -> None:
    if "owed_after_ms" in params:
        # Compressed time: a passed-over run becomes owed after this instead of 2 minutes, so a
        # run of a few seconds goes through the owed rule (SPEC 10.4); the rule itself is unchanged.
        from limits.engine import keys

        keys.OWED_AFTER_MS = params["owed_after_ms"]
    start_file = params.get("start_file")
    if start_file:
        print(json.dumps({"ready": True}), flush=True)
        while not Path(start_file).exists():
            time.sleep(0.005)
    result = ROLES[role](params)
    print(json.dumps(result), flush=True)


def zygote() -> None:
    """Fork workers for the parent, one JSON order a line on stdin, each answered on stdout:

    - ``{"role", "params", "out", "err", "rc"}``: fork a worker that writes its stdout and stderr
      to the files `out` and `err`; answers ``{"pid": n}``. Once it exits, its exit code (as
      subprocess reports it: -9 when SIGKILLed) is written to the file `rc`.
    - ``{"kill": pid}``: SIGKILL that worker if it has not exited yet; answers ``{"killed": bool}``.
      Only this process kills its children: it knows which pids are still its own.

    Django is set up before the forks, but no database connection is opened here: each worker
    opens its own. When stdin closes, it waits for its workers and exits."""
    import select
    import signal

    from django.db import connections

    children: dict[int, str] = {}
    reading = True
    while reading or children:
        if reading and select.select([sys.stdin], [], [], 0.02)[0]:
            line = sys.stdin.readline()  # the parent sends one order and waits for its answer
            if not line:
                reading = False
            elif "kill" in (order := json.loads(line)):
                pid = order["kill"]
                if pid in children:
                    os.kill(pid, signal.SIGKILL)
                print(json.dumps({"killed": pid in children}), flush=True)
            else:
                assert all(c.connection is None for c in connections.all()), "a fork would share it"
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    _forked(order)
                children[pid] = order["rc"]
                print(json.dumps({"pid": pid}), flush=True)
        elif not reading:
            time.sleep(0.02)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            rc = Path(children.pop(pid))
            rc.with_suffix(".tmp").write_text(str(os.waitstatus_to_exitcode(status)))
            rc.with_suffix(".tmp").replace(rc)  # whole, or not there yet


def _forked(order: dict[str, Any]) -> None:
    """The forked worker: stdout and stderr to its files, play its role, exit without returning
    to the zygote's loop."""
    import traceback

    code = 1
    try:
        with open(order["out"], "w") as out, open(order["err"], "w") as err, open(os.devnull) as null:
            os.dup2(null.fileno(), 0)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
        play(order["role"], order["params"])
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# --- client -------------------------------------------------------------------------------------


FIRST_TIMEOUT_MS = 200  # shorter than a long hold (0.6 s)


class Client:
    """One process's share of the load. Runs are named p<index>-r<n>, requests <run>:<k>.

    Each operation is one of: take a slot and give it back (sometimes with a short timeout,
    sometimes holding it past a 300 ms max hold so the sweep takes it back), hold a slot of one
    limit while taking another, release someone else's live slot (as a workflow or an operator),
    or end the run while it waits or while a slot is reserved for it. A waiting acquire is
    re-called with the same request until it is no longer waiting, as a woken run does; the
    re-call confirms a reservation.
    """

    def __init__(self, params: dict[str, Any]) -> None:
        self.index: int = params["index"]
        self.limits: list[str] = params["limits"]
        self.ops: int = params["ops"]
        self.seconds: float = params["seconds"]
        self.min_ops: int = params["min_ops"]
        self.long_holds = 1  # every client holds its first slot past a 300 ms max hold
        self.on_full: list[str | None] = params.get("on_full", [None])  # SPEC 14: drawn per acquisition
        self.acquire_keys: list[str | None] = params.get("acquire_keys", [None])  # SPEC 9, 14.3: drawn likewise
        self.rng = random.Random(params["seed"])
        self.run_number = 0
        self.request_number = 0
        self.run_id = self._new_run()
        self.outcomes: list[dict[str, Any]] = []
        self.stats: dict[str, float] = {
            "released_true": 0,
            "released_false": 0,
            "foreign_releases": 0,
            "ended_runs": 0,
            "polls": 0,
            "operations": 0,
        }

    def _new_run(self) -> str:
        self.run_number += 1
        return f"p{self.index}-r{self.run_number}"

    def _new_request(self) -> str:
        self.request_number += 1
        return f"{self.run_id}:{self.request_number}"

    def play(self) -> dict[str, Any]:
        started = time.monotonic()
        for _ in range(self.ops):
            if time.monotonic() - started > self.seconds and self.stats["operations"] >= self.min_ops:
                break
            self.stats["operations"] += 1
            roll = self.rng.random()
            if self.stats["operations"] == 1:
                # All clients start together (the start file) and their first slots are held past
                # the max hold: with more clients than slots, the first calls that wait time out.
                self.cycle(self.limits[self.index % len(self.limits)], timeout=FIRST_TIMEOUT_MS)
            elif roll < 0.15 and len(self.limits) > 1:
                self.nested()
            elif roll < 0.25:
                self.release_someone_elses()
            elif roll < 0.45:
                self.cycle(self.rng.choice(self.limits), end_run_while_waiting=True)
            else:
                self.cycle(self.rng.choice(self.limits))
        self.stats["seconds"] = round(time.monotonic() - started, 2)
        return {"index": self.index, "outcomes": self.outcomes, "stats": self.stats}

    def obtain(self, limit: str, *, end_run_while_waiting: bool = False, timeout: int | None = None) -> dict[str, Any]:
        """Acquire, and while waiting call again with the same request as a woken run would.
        With end_run_while_waiting the run ends at a random moment of its wait, sometimes right
        when a slot is reserved for it and before it confirms (SPEC 3.4, 3.7)."""
        from limits import services
        from limits.models import Slot

        request = self._new_request()
        timeout = timeout or self.rng.choice([None, None, None, 5, 30, 200])
        on_full = self.rng.choice(self.on_full)
        key = self.rng.choice(self.acquire_keys)
        got = services.acquire(limit, run_id=self.run_id, request=request, timeout=timeout, on_full=on_full, key=key)
        ended = False
        while got.state == "waiting":
            self.stats["polls"] += 1
            if end_run_while_waiting:
                reserved = Slot.objects.filter(request=request, state="reserved").exists()
                # A client's first such wait always ends its run at its first look, so the load
                # ends runs while they wait under any machine load (the stress tests' floor of
                # cancelled entries); later ones end at random, often just after the grant.
                first = self.stats["ended_runs"] == 0
                if first or (reserved and self.rng.random() < 0.7) or self.rng.random() < 0.15:
                    services.end_run(self.run_id)
                    ended = True
                    self.stats["ended_runs"] += 1
                    got = services.acquire(limit, run_id=self.run_id, request=request)
                    break
            time.sleep(self.rng.uniform(0.002, 0.006))
            got = services.acquire(limit, run_id=self.run_id, request=request)
        outcome = {
            "request": request,
            "run_id": self.run_id,
            "limit": limit,
            "state": got.state,
            "slot_id": got.slot_id,
            "ended_run": ended,
            "timeout": timeout,
        }
        self.outcomes.append(outcome)
        if ended:
            self.run_id = self._new_run()
        return outcome

    def give_back(self, outcome: dict[str, Any]) -> None:
        from limits import services

        if outcome["state"] != "busy":
            return
        long = self.long_holds > 0 or self.rng.random() < 0.02
        self.long_holds -= 1
        hold = 0.6 if long else self.rng.uniform(0, 0.003)
        time.sleep(hold)
        released = services.release(outcome["slot_id"])
        outcome["released"] = released
        self.stats["released_true" if released else "released_false"] += 1
        if self.rng.random() < 0.1:
            assert services.release(outcome["slot_id"]) is False, "a second release must change nothing"

    def cycle(self, limit: str, *, end_run_while_waiting: bool = False, timeout: int | None = None) -> None:
        self.give_back(self.obtain(limit, end_run_while_waiting=end_run_while_waiting, timeout=timeout))
        if self.rng.random() < 0.1:
            # A run that completes: it leaves every queue (it waits in none here) and starts anew.
            from limits import services

            services.end_run(self.run_id)
            self.run_id = self._new_run()

    def nested(self) -> None:
        """Hold a slot of one limit while taking one of the other; sometimes the run ends while
        it waits for the second, and the first slot stays busy (SPEC 2.7) until released."""
        first, second = self.rng.sample(self.limits, 2)
        outer = self.obtain(first)
        inner = self.obtain(second, end_run_while_waiting=self.rng.random() < 0.3)
        self.give_back(inner)
        self.give_back(outer)

    def release_someone_elses(self) -> None:
        """SPEC 2.4 and 5.1: any workflow, or an operator, may release any slot by its id; a
        reserved one sends its run back to the end of the queue."""
        from limits import services
        from limits.models import Slot

        slot_id = (
            Slot.objects.filter(state__in=["busy", "reserved"])
            .exclude(run_id__startswith=f"p{self.index}-")
            .order_by("?")
            .values_list("id", flat=True)
            .first()
        )
        if slot_id is not None:
            services.release(slot_id, actor=self.rng.choice([None, "user:op"]))
            self.stats["foreign_releases"] += 1


def client(params: dict[str, Any]) -> dict[str, Any]:
    return Client(params).play()


# --- sweeper and monitor ------------------------------------------------------------------------


def sweeper(params: dict[str, Any]) -> dict[str, Any]:
    from django.db import DatabaseError

    from limits import services

    passes, totals = 0, {"expired": 0, "lapsed": 0, "timed_out": 0, "granted": 0}
    deadlocks: list[str] = []
    stop = Path(params["stop_file"])
    while not stop.exists():
        try:
            report = services.sweep()
        except DatabaseError as error:
            if not deadlocked(error):
                raise
            deadlocks.append(f"sweep: {error}".splitlines()[0][:300])
            continue
        passes += 1
        for key in totals:
            totals[key] += getattr(report, key)
        time.sleep(params.get("pause", 0.01))
    return {"passes": passes, **totals, "deadlocks": deadlocks}


# Every statement below runs in one REPEATABLE READ transaction: one snapshot of the database.
LIMITS_SQL = """
SELECT l.id, l.name, COALESCE(l.capacity_override, l.declared_capacity),
       COALESCE(l.per_key_override, l.declared_per_key),
       l.busy_count, l.reserved_count, l.waiting_count,
       l.keyed_busy_count, l.keyed_reserved_count, l.keyed_waiting_count, l.group_waiting_count,
       s.busy, s.reserved, q.waiting, s.keyed_busy, s.keyed_reserved, q.keyed_waiting, q.group_waiting,
       s.doubles, a.changes, COALESCE(l.max_waiting_override, l.declared_max_waiting)
FROM limits_limit l
CROSS JOIN LATERAL (
    SELECT COUNT(*) FILTER (WHERE state = 'busy') AS busy,
           COUNT(*) FILTER (WHERE state = 'reserved') AS reserved,
           COUNT(*) FILTER (WHERE state = 'busy' AND key <> '') AS keyed_busy,
           COUNT(*) FILTER (WHERE state = 'reserved' AND key <> '') AS keyed_reserved,
           COUNT(*) - COUNT(DISTINCT request) AS doubles
    FROM limits_slot WHERE limit_id = l.id AND state IN ('busy', 'reserved')) s
CROSS JOIN LATERAL (
    SELECT COUNT(*) AS waiting, COUNT(*) FILTER (WHERE key <> '') AS keyed_waiting,
           COUNT(*) FILTER (WHERE group_size > 1) AS group_waiting
    FROM limits_queueentry WHERE limit_id = l.id AND state = 'waiting') q
CROSS JOIN LATERAL (
    SELECT COUNT(*) AS changes FROM limits_auditevent
    WHERE limit_id = l.id AND action IN ('capacity', 'per_key', 'sync', 'max_waiting')) a
"""
# Key pools: the counters of every pool row that counts something or has its own size, and the
# live rows of every key.
POOL_ROWS_SQL = """
SELECT limit_id, key, busy_count, reserved_count, waiting_count, pool_override FROM limits_limitkey
WHERE busy_count + reserved_count + waiting_count > 0 OR pool_override IS NOT NULL
"""
POOL_LIVE_SQL = """
SELECT limit_id, key, COUNT(*) FILTER (WHERE kind = 'busy'), COUNT(*) FILTER (WHERE kind = 'reserved'),
       COUNT(*) FILTER (WHERE kind = 'waiting')
FROM (SELECT limit_id, key, state AS kind FROM limits_slot WHERE state IN ('busy', 'reserved') AND key <> ''
      UNION ALL
      SELECT limit_id, key, 'waiting' FROM limits_queueentry WHERE state = 'waiting' AND key <> '') x
GROUP BY limit_id, key
"""
# Groups: per acquisition of several limits, its live slots and waiting entries.
GROUPS_SQL = """
SELECT request, MAX(group_size), COUNT(*) FILTER (WHERE kind = 'reserved'), COUNT(*) FILTER (WHERE kind = 'busy'),
       COUNT(*) FILTER (WHERE kind = 'waiting'), COALESCE(BOOL_AND(deadline <= clock_timestamp()), false)
FROM (SELECT request, group_size, state AS kind, NULL::timestamptz AS deadline FROM limits_slot
      WHERE state IN ('busy', 'reserved') AND group_size > 1
      UNION ALL
      SELECT request, group_size, 'waiting', deadline FROM limits_queueentry
      WHERE state = 'waiting' AND group_size > 1) x
GROUP BY request
"""
# SPEC 14.3: the keys with two entries waiting for one limit alone that joined replacing (each
# replaces the key's others as it joins, so at most one such is ever waiting).
REPLACING_SQL = """
SELECT l.name, q.key, COUNT(*) FROM limits_queueentry q JOIN limits_limit l ON l.id = q.limit_id
WHERE q.state = 'waiting' AND q.replacing AND q.group_size = 1
GROUP BY l.name, q.key HAVING COUNT(*) > 1
"""
# The latest entries of a group found waiting in some of its queues only.
GROUP_ENTRIES_SQL = """
SELECT l.name, q.state, q.position, q.enqueued_at, q.deadline, q.finished_at FROM limits_queueentry q
JOIN limits_limit l ON l.id = q.limit_id WHERE q.request = %s ORDER BY q.id DESC LIMIT %s
"""


class Ceiling:
    """busy + reserved against a size (a limit's capacity, a key pool's size) across samples.
    Lowering a size takes nothing back (SPEC 5.3, 9.4), so a level above it is a violation only
    if it grew since the previous sample (some grant then brought it above the size) while no
    size of that limit changed in between (a level judged against a size set afterwards would
    blame a grant that was right when it happened)."""

    def __init__(self) -> None:
        self.levels: dict[Any, int] = {}

    def judge(self, what: Any, level: int, size: int | None, *, size_changed: bool) -> bool:
        before = self.levels.get(what, 0)
        self.levels[what] = level
        return size is not None and level > size and level > before and not size_changed


def monitor(params: dict[str, Any]) -> dict[str, Any]:
    """Sample every limit, key pool and group in one snapshot (a REPEATABLE READ transaction), in
    a loop. Never, in any sample:

    - counters (a limit's, its keyed and group ones, a key pool's) that differ from the rows;
    - busy + reserved above a limit's capacity, or above a key pool's size in force (the key's
      own size, else the limit's per_key; the no-key pool: per_key), unless a lowering left it
      there (`Ceiling`);
    - one request with two live slots of a limit;
    - a group (an acquisition of several limits) that holds a slot while it waits, holds some of
      its reservations but not all (its busy slots it may release one by one: SPEC 10.1), or
      waits in some of its queues but not all with its deadline to come.

    A group left waiting in some queues after its deadline passed is only counted (and one
    example kept): timed out in part, it can no longer be granted, and a sweep ends the rest."""
    from django.db import connection, transaction

    samples, violations = 0, []
    peak: dict[str, int] = {}
    pool_peak: dict[str, float] = {}
    most_waiting_groups = 0
    ceilings = Ceiling()
    changes_seen: dict[str, int] = {}
    splits_seen: dict[str, list[str]] = {}
    stop = Path(params["stop_file"])
    while not stop.exists():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursor.execute(LIMITS_SQL)
            limits = cursor.fetchall()
            cursor.execute(POOL_ROWS_SQL)
            pool_rows = {(limit_id, key): row for limit_id, key, *row in cursor.fetchall()}
            cursor.execute(POOL_LIVE_SQL)
            pool_live = {(limit_id, key): row for limit_id, key, *row in cursor.fetchall()}
            cursor.execute(GROUPS_SQL)
            groups = cursor.fetchall()
            cursor.execute(REPLACING_SQL)
            doubled = cursor.fetchall()
            split = {}
            for request, size, _, _, waiting, _ in groups:
                if waiting not in (0, size) and request not in splits_seen:
                    cursor.execute(GROUP_ENTRIES_SQL, [request, size])
                    split[request] = [
                        f"{name} #{pos} {state} enqueued {enq:%H:%M:%S.%f} deadline {dl:%H:%M:%S.%f} "
                        f"finished {fin and f'{fin:%H:%M:%S.%f}'}"
                        for name, state, pos, enq, dl, fin in cursor.fetchall()
                    ]
        samples += 1
        for name, key, count in doubled:
            violations.append(f"{name}: key {key!r} has {count} entries waiting that joined replacing")  # SPEC 14.3
        changed: dict[int, bool] = {}
        per_keys: dict[int, tuple[str, int | None]] = {}
        for row in limits:
            limit_id, name, capacity, per_key, *counters = row
            (busy, reserved, waiting, k_busy, k_reserved, k_waiting, g_waiting) = counters[:7]
            (busy_rows, reserved_rows, waiting_rows, kb_rows, kr_rows, kw_rows, gw_rows) = counters[7:14]
            doubles, audit_changes, max_waiting = counters[14:]
            changed[limit_id] = changes_seen.get(name, 0) != audit_changes
            changes_seen[name] = audit_changes
            per_keys[limit_id] = (name, per_key)
            level = busy_rows + reserved_rows
            peak[name] = max(peak.get(name, 0), level)
            if (busy, reserved, waiting) != (busy_rows, reserved_rows, waiting_rows):
                rows_seen = (busy_rows, reserved_rows, waiting_rows)
                violations.append(f"{name}: counters {busy, reserved, waiting} != rows {rows_seen}")
            if (k_busy, k_reserved, k_waiting, g_waiting) != (kb_rows, kr_rows, kw_rows, gw_rows):
                seen = (kb_rows, kr_rows, kw_rows, gw_rows)
                violations.append(
                    f"{name}: keyed/group counters {k_busy, k_reserved, k_waiting, g_waiting} != rows {seen}"
                )
            if ceilings.judge(("queue", name), waiting_rows, max_waiting, size_changed=changed[limit_id]):
                violations.append(f"{name}: {waiting_rows} runs waiting > max_waiting {max_waiting}")  # SPEC 14.5
            if ceilings.judge(name, level, capacity, size_changed=changed[limit_id]):
                violations.append(f"{name}: {busy_rows} busy + {reserved_rows} reserved > capacity {capacity}")
            no_key = level - kb_rows - kr_rows
            if ceilings.judge((name, ""), no_key, per_key, size_changed=changed[limit_id]):
                violations.append(f"{name}: the no-key pool holds {no_key} > per_key {per_key}")
            if per_key:
                pool_peak[name] = max(pool_peak.get(name, 0), no_key / per_key)
            if doubles:
                violations.append(f"{name}: {doubles} request(s) with two live slots")
        for pool in sorted(set(pool_rows) | set(pool_live)):
            limit_id, key = pool
            name, per_key = per_keys[limit_id]
            b, r, w, override = pool_rows.get(pool, (0, 0, 0, None))
            live = tuple(pool_live.get(pool, (0, 0, 0)))
            if (b, r, w) != live:
                violations.append(f"{name}: key {key!r} counters {b, r, w} != rows {live}")
            size = override if override is not None else per_key
            if ceilings.judge(pool, live[0] + live[1], size, size_changed=changed[limit_id]):
                violations.append(f"{name}: key {key!r} holds {live[0]} busy + {live[1]} reserved > pool {size}")
            if size:
                pool_peak[name] = max(pool_peak.get(name, 0), (live[0] + live[1]) / size)
        for request, size, reserved, busy, waiting, past_deadline in groups:
            if reserved not in (0, size):
                violations.append(f"group {request}: {reserved} of its {size} slots reserved")
            if waiting not in (0, size) and not past_deadline:
                violations.append(f"group {request}: waiting in {waiting} of its {size} queues: {split.get(request)}")
            elif waiting not in (0, size) and request not in splits_seen:
                # Its deadline has passed: timed out in some queues, not yet in the others (a
                # settle that had only some of its limits locked). Never granted like this (a
                # group is granted only with all its entries waiting); the sweep ends the rest.
                splits_seen[request] = split.get(request, [])
            if waiting and reserved + busy:
                violations.append(f"group {request}: holds {reserved + busy} slot(s) while it waits")
        most_waiting_groups = max(most_waiting_groups, sum(1 for g in groups if g[4]))
        time.sleep(params.get("pause", 0.005))
    return {
        "samples": samples,
        "violations": violations[:20],
        "violation_count": len(violations),
        "peak": peak,
        "pool_peak": pool_peak,
        "most_waiting_groups": most_waiting_groups,
        "groups_timed_out_in_part": len(splits_seen),
        "split_examples": dict(list(splits_seen.items())[:3]),
    }


# --- durability (SPEC 3.1) ----------------------------------------------------------------------


def enqueuer(params: dict[str, Any]) -> dict[str, Any]:
    """Queue runs k0, k1, ... on a full limit, printing each one once committed; then open a
    transaction, queue one more under the limit's lock and park there until killed."""
    from django.db import transaction

    from limits import services

    for i in range(params["count"]):
        got = services.acquire(params["limit"], run_id=f"k{i}", request=f"k{i}:0", label=f"order-{i}")
        print(json.dumps({"committed": f"k{i}", "state": got.state}), flush=True)
    with transaction.atomic():
        services.acquire(params["limit"], run_id="uncommitted", request="uncommitted:0")
        print(json.dumps({"parked": True}), flush=True)
        time.sleep(600)
    return {"parked": False}


def reader(params: dict[str, Any]) -> dict[str, Any]:
    """A fresh process after the kill: the queue as it finds it, then one more run joins it and
    the holder's slot is released, which must reserve the head of the queue."""
    from limits import services
    from limits.models import Limit, QueueEntry, Slot

    limit = Limit.objects.get(name=params["limit"])
    entries = list(
        QueueEntry.objects.filter(limit=limit, state="waiting").order_by("position").values_list("run_id", "label")
    )
    counters = [limit.busy_count, limit.reserved_count, limit.waiting_count]
    joined = services.acquire(params["limit"], run_id="after", request="after:0").state
    holder = Slot.objects.get(limit=limit, state="busy")
    services.release(holder.id)
    reserved = list(Slot.objects.filter(limit=limit, state="reserved").values_list("run_id", flat=True))
    return {"queue": entries, "counters": counters, "joined": joined, "reserved": reserved}


def starter(params: dict[str, Any]) -> dict[str, Any]:
    from tests.concurrency.starters import starter as play  # declares its workflow: after django.setup()

    return play(params)


ROLES = {
    "client": client,
    "juggler": juggler,
    "tenant": tenant,
    "sweeper": sweeper,
    "monitor": monitor,
    "enqueuer": enqueuer,
    "reader": reader,
    "starter": starter,
}

if __name__ == "__main__":
    main()
