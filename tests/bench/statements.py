"""The statements one engine operation sends, and how many of them run while the limit's row is
locked (from its SELECT ... FOR UPDATE, or the call of an engine function that takes it in the
server, to COMMIT): round trips do not depend on the machine's load, so they explain the
hot-limit figure when the timings are noisy."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

# Statements that take a limit's row lock: the ORM's, and the database functions of
# limits/sql/engine.sql (which lock inside the server; outside a transaction they are their own,
# so the lock ends with the statement's commit).
LOCKING = (
    "FOR UPDATE",
    "limits_acquire(",
    "limits_acquire_group(",
    "limits_release(",
    "limits_confirm(",
    "limits_confirm_or_lapse(",
    "limits_end_run(",
    "limits_sweep_limit(",
    "limits_sweep(",
    "limits_settle(",
    "limits_operate(",
    "limits_sync_workspace(",
    "limits_sync_bounds(",
)


def _takes_lock(sql: str) -> bool:
    return any(marker in sql for marker in LOCKING)


def _count(operation: Callable[[], Any]) -> tuple[Any, int, int, float]:
    """The operation's result, its statements, how many ran under the lock, and its ms."""
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        result = operation()
        ms = (time.perf_counter() - started) * 1000
    sqls = [q["sql"] for q in captured.captured_queries]
    in_transaction, locked, under = False, False, 0
    for sql in sqls:
        in_transaction = in_transaction or sql.startswith("BEGIN")
        if _takes_lock(sql):
            locked = in_transaction
            under += not locked  # autocommit: the statement and its commit, one round trip
        if locked:
            under += 1
        if sql.startswith("COMMIT"):
            in_transaction = locked = False
    return result, len(sqls), under, ms


def per_operation(
    limit: str,
    capacity: int,
    *,
    key: Callable[[int], str | None] = lambda n: None,
    group: tuple[str, ...] = (),
    rounds: int = 7,
) -> dict[str, tuple[int, int, float]]:
    """(statements, under the lock, ms of one uncontended call) for: an acquire granted at once
    and its release; an acquire skipped (on_full 'skip', SPEC 14.2); a queued acquire, the
    release that hands the slot over, and the woken run's confirming acquire. Leaves the limit empty.

    The sequence runs `rounds` times; the ms is the median of every round but the first, whose
    calls also compile the functions' plans in this session (PL/pgSQL plans are cached per
    connection: a first call of limits_acquire took 3-5 ms more than the next). The statements
    are the last round's (every round sends the same).

    `capacity` acquisitions fill the limit before the queued one; `key(n)` is the key of the
    n-th (-1: the queued one; None: no key). With `group`, each acquisition is
    acquire_group(group), and a "release" releases every slot of the acquisition."""
    from limits import services
    from tests.bench.common import median

    def take(name: str, n: int, on_full: str | None = None) -> Any:
        run_id = f"{name}-{tag}"  # a request is answered once: new ones on every round
        if group:
            return services.acquire_group(list(group), run_id=run_id, request=f"{run_id}:1", on_full=on_full)
        return services.acquire(limit, run_id=run_id, request=f"{run_id}:1", key=key(n), on_full=on_full)

    def free(got: Any) -> None:
        for slot_id in [slot for _, slot in got.slots] or [got.slot_id]:
            services.release(slot_id)

    plural = "s" if group else ""
    counts: dict[str, tuple[int, int]] = {}
    times: dict[str, list[float]] = {}

    def measure(name: str, operation: Callable[[], Any]) -> Any:
        result, total, under, ms = _count(operation)
        counts[name] = (total, under)
        times.setdefault(name, []).append(ms)
        return result

    for _ in range(rounds):
        tag = uuid.uuid4().hex[:8]
        got = measure("acquire, granted at once", lambda: take("stmt-a", capacity))
        measure(f"release{plural}, nobody waiting", partial(free, got))
        holders = [take(f"stmt-h{n}", n) for n in range(capacity)]
        # SPEC 14.2 (issue 47): full, answered at once and queued nowhere; against "acquire, queued"
        measure("acquire, skipped (on_full='skip')", lambda: take("stmt-s", -1, "skip"))
        measure("acquire, queued", lambda: take("stmt-w", -1))
        measure(f"release{plural}, handing the slot{plural} over", partial(free, holders[0]))
        mine = measure("acquire again by the woken run (confirm)", lambda: take("stmt-w", -1))
        for other in [*holders[1:], mine]:
            free(other)
    return {name: (*counts[name], median(times[name][1:] or times[name])) for name in counts}


def replace_at_a_key(limit: str, waiting: int = 1000, key: str = "key-replace") -> dict[str, Any]:
    """SPEC 14.3 (issue 47): one acquisition with on_full 'replace' at a key of `limit` (pool of
    1) with `waiting` runs of that key waiting behind its holder: its statements (and how many
    ran under the lock, and how many were engine calls: the rest is the run layer's wake of the
    replaced runs, after the commit), its ms, and how many entries it replaced. Issue 47 asks
    that it be one call. Leaves the limit empty."""
    from limits import services
    from limits.models import Limit

    tag = uuid.uuid4().hex[:8]
    holder = services.acquire(limit, run_id=f"rep-h-{tag}", request=f"rep-h-{tag}:1", key=key)
    for n in range(waiting):
        run_id = f"rep-w{n}-{tag}"
        services.acquire(limit, run_id=run_id, request=f"{run_id}:1", key=key, timeout="1h", on_full="wait")
    before = Limit.objects.get(name=limit).replaced_count
    newest = f"rep-n-{tag}"
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        got, total, under, ms = _count(
            lambda: services.acquire(limit, run_id=newest, request=f"{newest}:1", key=key, on_full="replace")
        )
    engine_calls = sum(1 for query in captured.captured_queries if _takes_lock(query["sql"]))
    replaced = Limit.objects.get(name=limit).replaced_count - before
    services.release(holder.slot_id)  # the newest, first in line, is reserved the slot ...
    services.end_run(newest)  # ... and its run ends: the limit is empty again
    return {
        "state": got.state,
        "statements": total,
        "engine_calls": engine_calls,  # the acquisition itself; any other statement is the wake of the replaced
        "under_lock": under,
        "ms": ms,
        "replaced": replaced,
    }


def summary(figures: dict[str, tuple[int, int, float]], *, timed: bool = False) -> str:
    """Each operation's statements (and, timed, the median ms of one uncontended call)."""
    return "; ".join(
        f"{name}: {total} ({under} under lock{f'; {ms:.1f} ms' if timed else ''})"
        for name, (total, under, ms) in figures.items()
    )


def lock_hold(limit: str, cycles: int = 200) -> dict[str, float]:
    """Uncontended, in this process: the median time a cycle (acquire granted at once + release)
    takes, and how long of it the limit's row stays locked (from sending the statement that takes
    it to the end of COMMIT: an upper bound, as the lock is taken inside that statement). Under
    contention the lock is the queue every process waits in, so 1000 / locked ms bounds the
    cycles/s of one limit, whatever the number of processes."""
    import time

    from django.db import connection

    from limits import services
    from tests.bench.common import median

    state: dict[str, float | None] = {"since": None}

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if _takes_lock(sql) and state["since"] is None:
                state["since"] = started

    totals, locked = [], []
    for number in range(cycles):
        started = time.perf_counter()
        held = 0.0
        for op in ("acquire", "release"):
            state["since"] = None
            with connection.execute_wrapper(timed):
                if op == "acquire":
                    got = services.acquire(limit, run_id="hold", request=f"hold:{number}")
                else:
                    services.release(got.slot_id)
            # COMMIT is sent by the connection, not through execute(): the operation returned
            # right after it, so the span ends now.
            if state["since"] is not None:
                held += time.perf_counter() - state["since"]
        totals.append((time.perf_counter() - started) * 1000)
        locked.append(held * 1000)
    return {"cycle_ms": median(totals), "locked_ms": median(locked)}


def reference_cycle_ms(cycles: int = 500) -> float:
    """The bare semaphore's cycle, uncontended: two autocommit UPDATEs (each holds the row lock
    for its own statement and commit)."""
    import os
    import time

    import psycopg

    from tests.bench.common import median, psycopg_dsn
    from tests.bench.load import SEMAPHORE_TABLE

    durations = []
    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn, conn.cursor() as cur:
        for _ in range(cycles):
            started = time.perf_counter()
            cur.execute(f"UPDATE {SEMAPHORE_TABLE} SET busy = busy + 1 WHERE id = 1 AND busy < 4", prepare=True)
            cur.execute(f"UPDATE {SEMAPHORE_TABLE} SET busy = busy - 1 WHERE id = 1", prepare=True)
            durations.append((time.perf_counter() - started) * 1000)
    return median(durations)
