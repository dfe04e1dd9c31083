"""Scenarios 1, 5, 7 and 8: OS processes looping acquire -> hold ~0 ms -> release for a fixed
time, through the engine (a plain limit; a keyed one, a random key per cycle; a group of two
limits), the bare two-statement semaphore on one hot row (the physical ceiling) and the
hand-written durable FIFO semaphore of tests/bench/fifo.sql (the reference of issue 17).

Each function here is the body of one child process (multiprocessing, spawn): it sets Django up
against the bench database, waits at the barrier, loops until the shared deadline, and puts
its counts on the result queue.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tests.bench.common import cpu_seconds, log, median, percentile, psycopg_dsn

SEMAPHORE_TABLE = "bench_semaphore"
RAW_TIMEOUT_MS = 24 * 60 * 60 * 1000  # engine_raw: services.acquire's default timeout
RAW_RESERVATION_MS = 2 * 60 * 1000  # engine_raw: services.release's reservation (SPEC 3.5)
# The tables the hot loads write, vacuumed before every timed run: the shared server this bench
# was measured on runs with autovacuum off (its conf.d/90-ci.conf), and without a vacuum the hot
# limit's row bloats from load to load (measured: 12 limits in 3.4 MB after scenarios 1-9, a
# lookup by name walking 48 buffers, 3 ms) and every later load, the engine's first (it writes
# the most row versions), ran slower than the one before. With autovacuum on, as in production,
# the vacuum comes on its own.
VACUUMED = (
    "limits_limit",
    "limits_limitkey",
    "limits_slot",
    "limits_queueentry",
    SEMAPHORE_TABLE,
    "bench_fifo_limit",
    "bench_fifo_waiter",
)
# s: a lost notification costs at most this much before the process looks again. Runs are never
# polled (they are woken, or recovered within 15 s); a short timeout here would make every waiting
# process call acquire 20 times a second for nothing (at 32 processes that was most of the CPU).
WAKE_TIMEOUT = 1.0
SAMPLE_EVERY = 0.1  # s between two looks at pg_stat_activity during a timed run (lock waits)
# An engine process counts an OperationalError (a deadlock, say) and calls again with the same
# request (acquire and release are safe to repeat); past this many in one run it gives up.
MAX_ERRORS = 100


@dataclass(frozen=True)
class Load:
    """kind: "engine" (services.acquire on a limit), "keyed" (the same with key=a random one of
    `keys`), "group" (services.acquire_group over all of `limits`, half the processes in the
    reverse order), "reference" (the bare semaphore) or "fifo" (the durable FIFO semaphore; "fifo_mx"
    and "fifo_sx": its variants of tests/bench/fifo.sql, the limit's row locked in a subtransaction
    and written after it, as the engine did before migration 0015, or inside the block, as it does
    now; "fifo_rc": with the SPEC's reservation, confirmed by the woken waiter).
    profile: a path; process 0 runs its last timed run under cProfile and dumps the stats there."""

    kind: str
    limits: tuple[str, ...]  # processes are spread evenly over these (or over semaphore rows 1..n)
    processes: int  # per limit; for "group", in all
    seconds: float
    capacity: int = 4
    keys: int = 0
    hold_ms: float = 0.0  # between holding the slot(s) and releasing them (--hold)
    profile: str = ""

    @property
    def total(self) -> int:
        return self.processes if self.kind == "group" else self.processes * len(self.limits)


def repeat(load: Load, runs: int) -> dict[str, Any]:
    """`runs` timed runs of a load with the same processes (started once, connected and warm):
    median, min and max cycles/s; acquire -> busy latencies (ms, all runs pooled: from the first
    acquire call of a cycle to holding the slot, wait and confirm included); how many backends
    waited on a lock, on average (pg_stat_activity, sampled); deadlocks the server detected, and
    the errors the processes retried. Each run opens the barrier, then sums the processes' cycles."""
    if load.kind == "reference":
        reset_semaphore(len(load.limits))
    if load.kind.startswith("fifo"):
        reset_fifo(len(load.limits), load.capacity)
    ctx = multiprocessing.get_context("spawn")
    # Run ids, and so requests, of this load only: a request is answered once, so a process that
    # reused another load's request names would be handed that request's old outcome (a released
    # slot, no write, no lock) instead of acquiring.
    tag = uuid.uuid4().hex[:6]
    barrier = ctx.Barrier(load.total + 1)
    results = ctx.Queue()
    target = _fifo_child if load.kind.startswith("fifo") else _engine_child
    target = {"reference": _reference_child, "engine_raw": _engine_raw_child}.get(load.kind, target)
    children = [
        ctx.Process(
            target=target,
            args=(
                f"bench-{tag}-p{index}",
                index,
                load.limits[index % len(load.limits)],
                index % len(load.limits) + 1,
                load,
                runs,
                barrier,
                results,
            ),
        )
        for index in range(load.total)
    ]
    deadlocks_before = _deadlocks()
    for child in children:
        child.start()
    figures: list[float] = []
    latencies: list[float] = []
    lock_waits: list[float] = []
    errors: dict[str, int] = {}
    queued = begun = cycles_done = 0
    cpu = {"client": 0.0, "server": 0.0}
    spent: dict[str, list[float]] = {}  # operation -> [seconds, calls], every process, every run
    try:
        for number in range(runs):
            vacuum()
            barrier.wait(timeout=180)  # every child is connected and warm, and done with the last run
            with _LockSampler() as sampler:
                outcomes = [results.get(timeout=load.seconds + 180) for _ in children]
            failed = [o["error"] for o in outcomes if "error" in o]
            if failed:
                raise RuntimeError(f"a {load.kind} process failed: {failed[0]}")
            cycles = sum(o["cycles"] for o in outcomes)
            figures.append(cycles / load.seconds)
            cycles_done += cycles
            queued += sum(o.get("queued", 0) for o in outcomes)
            begun += sum(o.get("begun", 0) for o in outcomes)
            for outcome in outcomes:
                latencies += outcome["latencies"]
                for name, count in outcome.get("errors", {}).items():
                    errors[name] = errors.get(name, 0) + count
            lock_waits.append(sampler.mean)
            for outcome in outcomes:
                for side in cpu:
                    cpu[side] += outcome.get(f"cpu_{side}", 0.0)
                for name, (secs, calls) in outcome.get("spent", {}).items():
                    total = spent.setdefault(name, [0.0, 0])
                    total[0] += secs
                    total[1] += calls
            log(
                f"  {load.kind} {'+'.join(load.limits)}, {load.total} proc, run {number + 1}: "
                f"{figures[-1]:.0f} cycles/s (queued {sum(o.get('queued', 0) for o in outcomes)}, "
                f"waited {sum(o.get('wait_s', 0.0) for o in outcomes):.1f} process-s, "
                f"retries {sum(o.get('retries', 0) for o in outcomes)}, "
                f"backends waiting on a lock {sampler.mean:.1f} on average, errors {errors or 'none'})"
            )
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
    return {
        "median": median(figures),
        "min": min(figures),
        "max": max(figures),
        "runs": figures,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "max_ms": max(latencies, default=float("nan")),
        "queued": queued,
        "begun": begun,
        "cycles": cycles_done,
        "lock_waits": median(lock_waits),
        "deadlocks": _deadlocks() - deadlocks_before,
        "errors": errors,
        # CPU seconds per cycle (ms), from /proc/<pid>/stat (utime + stime) of every load process
        # ("client") and of the PostgreSQL backends serving it ("server"), summed over the runs.
        "cpu_client_ms": 1000 * cpu["client"] / cycles_done if cycles_done else float("nan"),
        "cpu_server_ms": 1000 * cpu["server"] / cycles_done if cycles_done else float("nan"),
        "spent": {name: (secs, int(calls)) for name, (secs, calls) in spent.items()},
        "processes": load.total,
        "kind": load.kind,
    }


class _Cpu:
    """CPU of this process and of the given PostgreSQL backends (same host) over one timed run."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.start()

    def start(self) -> None:
        self.client = cpu_seconds()
        self.server = sum(cpu_seconds(pid) for pid in self.backends)

    def figures(self) -> dict[str, float]:
        return {
            "cpu_client": cpu_seconds() - self.client,
            "cpu_server": sum(cpu_seconds(pid) for pid in self.backends) - self.server,
        }


class _Spent:
    """Wall time per operation in one process: {name: [seconds, calls]}."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}

    def add(self, name: str, since: float) -> float:
        now = time.perf_counter()
        total = self.totals.setdefault(name, [0.0, 0])
        total[0] += now - since
        total[1] += 1
        return now


class _Profile:
    """cProfile around the last timed run of process 0 when load.profile names a file."""

    def __init__(self, load: Load, index: int, runs: int) -> None:
        self.path = load.profile if index == 0 else ""
        self.runs = runs
        self.profiler: Any = None

    def begin(self, number: int) -> None:
        if self.path and number == self.runs - 1:
            import cProfile

            self.profiler = cProfile.Profile(time.process_time)  # CPU, not waits
            self.profiler.enable()

    def end(self) -> None:
        if self.profiler is not None:
            self.profiler.disable()
            self.profiler.dump_stats(self.path)
            self.profiler = None


class _LockSampler:
    """While a timed run lasts, a thread counts the bench database's backends waiting on a
    heavyweight lock (a limit's row lock shows as Lock/transactionid or tuple)."""

    QUERY = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
    )

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else 0.0

    def __enter__(self) -> _LockSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
            while not self.stop.wait(SAMPLE_EVERY):
                row = conn.execute(self.QUERY).fetchone()
                self.samples.append(int(row[0]) if row else 0)


def vacuum() -> None:
    """VACUUM the tables the hot loads write (those that exist), outside any transaction."""
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        present = {
            name
            for (name,) in conn.execute(
                "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relname = ANY(%s)", [list(VACUUMED)]
            )
        }
        if present:
            conn.execute("VACUUM " + ", ".join(sorted(present)))


def _deadlocks() -> int:
    """Deadlocks PostgreSQL detected in the bench database so far (pg_stat_database)."""
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        row = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


# --- the reference -------------------------------------------------------------------------------


def create_semaphore() -> None:
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {SEMAPHORE_TABLE} (id int PRIMARY KEY, busy int NOT NULL)")


def reset_semaphore(rows: int) -> None:
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute(f"DELETE FROM {SEMAPHORE_TABLE}")
        for row in range(1, rows + 1):
            conn.execute(f"INSERT INTO {SEMAPHORE_TABLE} (id, busy) VALUES (%s, 0)", [row])


def _reference_child(
    run_id: str, index: int, limit: str, row: int, load: Load, runs: int, barrier: Any, results: Any
) -> None:
    """The bare semaphore: two autocommit UPDATEs on one hot row per cycle, each a durable commit;
    a process that finds the row full retries at once."""
    import psycopg

    try:
        conn = psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True)
        take = f"UPDATE {SEMAPHORE_TABLE} SET busy = busy + 1 WHERE id = %s AND busy < %s"
        give = f"UPDATE {SEMAPHORE_TABLE} SET busy = busy - 1 WHERE id = %s"
        cpu = _Cpu([conn.info.backend_pid])
        for _ in range(runs):
            cycles = retries = 0
            latencies: list[float] = []
            started: float | None = None
            barrier.wait(timeout=180)
            cpu.start()
            deadline = time.monotonic() + load.seconds
            with conn.cursor() as cur:
                while time.monotonic() < deadline:
                    started = started or time.perf_counter()
                    cur.execute(take, [row, load.capacity], prepare=True)
                    if cur.rowcount == 0:
                        retries += 1
                        continue
                    latencies.append((time.perf_counter() - started) * 1000)
                    started = None
                    if load.hold_ms:
                        time.sleep(load.hold_ms / 1000)
                    cur.execute(give, [row], prepare=True)
                    cycles += 1
            results.put({"cycles": cycles, "retries": retries, "latencies": latencies} | cpu.figures())
        conn.close()
    except Exception as error:  # noqa: BLE001 - reported to the parent
        results.put({"error": repr(error)})


# --- the durable FIFO reference --------------------------------------------------------------------


def install_fifo() -> None:
    import psycopg

    from tests.bench import fifo

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        fifo.install(conn)


def reset_fifo(limits: int, capacity: int) -> None:
    import psycopg

    from tests.bench import fifo

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        fifo.install(conn)
        fifo.reset(conn, limits, capacity)


def _fifo_child(
    run_id: str, index: int, limit: str, row: int, load: Load, runs: int, barrier: Any, results: Any
) -> None:
    """The durable FIFO semaphore (tests/bench/fifo.sql): acquire (taken at once, or queued and
    woken by the notification the granting release sends), hold, release; one autocommit
    connection per process, which also LISTENs. A queued cycle is two commits."""
    import psycopg

    from tests.bench import fifo

    try:
        conn = psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True)
        client = fifo.Client(conn, _channel(run_id), wake_timeout=WAKE_TIMEOUT, variant=load.kind[len("fifo") :])
        cpu = _Cpu([conn.info.backend_pid])
        profile = _Profile(load, index, runs)
        for number in range(runs):
            cycles = queued = begun = 0
            latencies: list[float] = []
            spent = _Spent()
            barrier.wait(timeout=180)
            cpu.start()
            profile.begin(number)
            deadline = time.monotonic() + load.seconds
            while time.monotonic() < deadline:
                begun += 1
                started = time.perf_counter()
                ticket, was_queued = client.acquire(row)
                now = spent.add("fifo acquire (join or take, and the wait)", started)
                queued += was_queued
                latencies.append((now - started) * 1000)
                if load.hold_ms:
                    time.sleep(load.hold_ms / 1000)
                now = time.perf_counter()
                client.release(row, ticket)
                spent.add("fifo release", now)
                if time.monotonic() < deadline:
                    cycles += 1
            profile.end()
            results.put(
                {
                    "cycles": cycles,
                    "begun": begun,
                    "queued": queued,
                    "wakes": client.wakes,
                    "latencies": latencies,
                    "spent": spent.totals,
                }
                | cpu.figures()
            )
        conn.close()
    except Exception as error:  # noqa: BLE001 - reported to the parent
        import traceback

        results.put({"error": traceback.format_exc() or repr(error)})


# --- the engine ----------------------------------------------------------------------------------


def _engine_child(
    run_id: str, index: int, limit: str, row: int, load: Load, runs: int, barrier: Any, results: Any
) -> None:
    """The engine, the way runs use it: acquire (busy slots at once, or join the queue); a queued
    request waits to be woken and calls acquire again with the same request (and key), which
    confirms the reservation; then release (each slot of a group: a busy slot of a group is
    released on its own). Waking is LISTEN/NOTIFY: every process listens on its own channel and
    announces the runs the engine woke (the `runs_woken` signal, after commit) with pg_notify on
    a side connection whose commits are not flushed (a wake is not durable state), in place of
    the run layer's wake (a Celery task per run).

    What a cycle acquires, by load.kind: "engine" the limit; "keyed" the limit with a key drawn
    at random (seeded by the process's index) from load.keys; "group" all of load.limits, in
    reverse order in every other process, so that crossing orders meet.
    """
    try:
        import django

        django.setup()
        import psycopg
        from django.db import OperationalError, connection

        from limits import services
        from limits.services import Acquisition
        from limits.signals import runs_woken

        side = psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True)
        side.execute("SET synchronous_commit = off")
        side.execute(f"LISTEN {_channel(run_id)}")

        def announce(sender: object, run_ids: list[str], **kwargs: object) -> None:
            side.execute("SELECT pg_notify(c, '') FROM unnest(%s::text[]) AS c", [[_channel(r) for r in run_ids]])

        # These processes are not workflow runs: the run layer's receiver would look their ids up
        # in studio_run and find nothing (one UPDATE per hand-off, ~30 % of this figure). Its
        # wake is measured where it belongs, in scenario 2 (hand-off through a real worker).
        runs_woken.disconnect(dispatch_uid="limits-wake-runs")
        runs_woken.connect(announce, weak=False, dispatch_uid="bench-announce")
        connection.ensure_connection()
        backend = connection.connection.info.backend_pid
        cpu = _Cpu([backend, side.info.backend_pid])
        profile = _Profile(load, index, runs)
        draw = random.Random(index)
        group = list(load.limits) if index % 2 == 0 else list(reversed(load.limits))
        errors: dict[str, int] = {}

        def retried(call: Any) -> Any:
            """The call, again with the same arguments after an OperationalError (counted)."""
            while True:
                try:
                    return call()
                except OperationalError as error:
                    name = type(error.__cause__ or error).__name__
                    errors[name] = errors.get(name, 0) + 1
                    if sum(errors.values()) > MAX_ERRORS:
                        raise

        def acquire(request: str, key: str | None) -> Acquisition:
            if load.kind == "group":
                return retried(lambda: services.acquire_group(group, run_id=run_id, request=request))
            return retried(lambda: services.acquire(limit, run_id=run_id, request=request, key=key))

        number = 0
        for run_number in range(runs):
            cycles = queued = wakes = begun = 0
            wait_s = 0.0
            latencies: list[float] = []
            errors.clear()
            spent = _Spent()
            barrier.wait(timeout=180)
            cpu.start()
            profile.begin(run_number)
            deadline = time.monotonic() + load.seconds
            while time.monotonic() < deadline:
                number += 1
                begun += 1
                request = f"{run_id}:{number}"
                key = f"key-{draw.randrange(load.keys)}" if load.kind == "keyed" else None
                started = time.perf_counter()
                got = acquire(request, key)
                now = spent.add(
                    "engine acquire, taken at once" if got.state != "waiting" else "engine acquire, queued (join)",
                    started,
                )
                if got.state == "waiting":
                    queued += 1
                    waited = time.monotonic()
                    while got.state == "waiting":
                        # Collect the notifications first, then query (psycopg: no query inside
                        # the notifies() loop). A stale one only costs one extra acquire call.
                        list(side.notifies(timeout=WAKE_TIMEOUT, stop_after=1))
                        now = spent.add("engine wait for the notification", now)
                        wakes += 1
                        got = acquire(request, key)
                        now = spent.add("engine acquire again (confirm)", now)
                    wait_s += time.monotonic() - waited
                if got.state != "busy":
                    raise RuntimeError(f"acquire ended {got.state}")
                if load.kind == "group" and len(got.slots) != len(group):
                    raise RuntimeError(f"a group was granted {got.slots}, not a slot of each of {group}")
                latencies.append((time.perf_counter() - started) * 1000)
                if load.hold_ms:
                    time.sleep(load.hold_ms / 1000)
                now = time.perf_counter()
                for slot_id in [slot for _, slot in got.slots] or [got.slot_id]:
                    retried(lambda slot_id=slot_id: services.release(slot_id))
                spent.add("engine release", now)
                if time.monotonic() < deadline:
                    cycles += 1
            profile.end()
            results.put(
                {
                    "cycles": cycles,
                    "begun": begun,
                    "queued": queued,
                    "wakes": wakes,
                    "wait_s": wait_s,
                    "latencies": latencies,
                    "errors": dict(errors),
                    "spent": spent.totals,
                }
                | cpu.figures()
            )
        side.close()
    except Exception as error:  # noqa: BLE001 - reported to the parent
        import traceback

        results.put({"error": traceback.format_exc() or repr(error)})


def _channel(run_id: str) -> str:
    return run_id.replace("-", "_")


# --- the engine's functions without the client (an experiment: where the engine's cost lies) ----


def _engine_raw_child(
    run_id: str, index: int, limit: str, row: int, load: Load, runs: int, barrier: Any, results: Any
) -> None:
    """The engine's own SQL functions, as services.acquire/release call them on the plain path
    (limits_acquire; a woken request's acquire again confirms its reservation; limits_release),
    but sent straight on psycopg as prepared statements with server-side binding, the way the
    FIFO's client sends its calls, with no Django and no Python rules: the same server work as
    "engine", about the FIFO's client cost. Woken runs are announced as in "engine"."""
    import datetime as dt

    import psycopg

    try:
        dsn = psycopg_dsn(os.environ["DATABASE_URL"])
        conn = psycopg.connect(dsn, autocommit=True)
        side = psycopg.connect(dsn, autocommit=True)
        side.execute("SET synchronous_commit = off")
        side.execute(f"LISTEN {_channel(run_id)}")
        cpu = _Cpu([conn.info.backend_pid, side.info.backend_pid])
        profile = _Profile(load, index, runs)
        acquire_sql = "SELECT outcome, slot_id FROM limits_acquire(%s, %s, %s, %s, %s, %s, 120000, 120000)"
        release_sql = "SELECT outcome, woken FROM limits_release(%s, %s, %s, %s, NULL)"

        def call(sql: str, params: list[Any]) -> tuple[Any, ...]:
            with conn.cursor() as cur:
                cur.execute(sql, params, prepare=True)
                found: tuple[Any, ...] = cur.fetchone()
                return found

        def now() -> dt.datetime:
            return dt.datetime.now(dt.UTC)

        number = 0
        for run_number in range(runs):
            cycles = queued = begun = 0
            latencies: list[float] = []
            spent = _Spent()
            barrier.wait(timeout=180)
            cpu.start()
            profile.begin(run_number)
            deadline = time.monotonic() + load.seconds
            while time.monotonic() < deadline:
                number += 1
                begun += 1
                request = f"{run_id}:{number}"
                started = time.perf_counter()
                params = [limit, run_id, request, "", RAW_TIMEOUT_MS, now()]
                outcome, slot_id = call(acquire_sql, params)
                mark = spent.add("raw acquire (taken at once or join)", started)
                if outcome == "waiting":
                    queued += 1
                    outcome = "slow"
                    # A request still waiting is answered 'slow' (the Python rules would say
                    # 'waiting'): with the reservation's 2 minutes, it cannot be a late confirm here.
                    while outcome == "slow":
                        list(side.notifies(timeout=WAKE_TIMEOUT, stop_after=1))
                        mark = spent.add("raw wait for the notification", mark)
                        params[-1] = now()
                        outcome, slot_id = call(acquire_sql, params)
                        mark = spent.add("raw acquire again (confirm)", mark)
                if outcome != "busy":
                    raise RuntimeError(f"limits_acquire answered {outcome}")
                latencies.append((time.perf_counter() - started) * 1000)
                if load.hold_ms:
                    time.sleep(load.hold_ms / 1000)
                mark = time.perf_counter()
                outcome, woken = call(release_sql, [slot_id, now(), RAW_RESERVATION_MS, RAW_RESERVATION_MS])
                if outcome != "released":
                    raise RuntimeError(f"limits_release answered {outcome}")
                if woken:
                    side.execute("SELECT pg_notify(c, '') FROM unnest(%s::text[]) AS c", [[_channel(r) for r in woken]])
                spent.add("raw release (and the notification)", mark)
                if time.monotonic() < deadline:
                    cycles += 1
            profile.end()
            results.put(
                {"cycles": cycles, "begun": begun, "queued": queued, "latencies": latencies, "spent": spent.totals}
                | cpu.figures()
            )
        conn.close()
        side.close()
    except Exception as error:  # noqa: BLE001 - reported to the parent
        import traceback

        results.put({"error": traceback.format_exc() or repr(error)})
