"""python -m tests.bench.ab_cycle DB_A DB_B [--cycles N] [--rounds N]

Uncontended queued cycles sent straight on psycopg to the engine's functions in two databases of
this server, alternated round by round: the same engine.sql, the schema the only difference (used
for migration 0034: one database migrated to `limits 0033`, the other to the end). Each database
gets a limit of capacity 1 named `ab-cycle`; a cycle is acquire -> a second acquire queues ->
release hands the slot over -> the woken request acquires again (confirms) -> release, each an
autocommit call with server-side binding. Prints the ms per cycle of each round and the median,
then each function's own ms per call (pg_stat_user_functions, track_functions = pl).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid

import psycopg

LIMIT = "ab-cycle"
ACQUIRE = "SELECT outcome, slot_id FROM limits_acquire(%s, %s, %s, '', 600000, NULL, 120000, 30000)"
RELEASE = "SELECT outcome FROM limits_release(%s, NULL, 120000, 30000, NULL)"


def prepare(conn: psycopg.Connection) -> None:
    """A fresh limit of capacity 1 (this script's rows of an earlier run deleted)."""
    for table in ("limits_slot", "limits_queueentry", "limits_auditevent"):
        conn.execute(f"DELETE FROM {table} WHERE limit_id IN (SELECT id FROM limits_limit WHERE name = %s)", [LIMIT])
    conn.execute("DELETE FROM limits_limit WHERE name = %s", [LIMIT])
    conn.execute(
        "INSERT INTO limits_limit (name, declared, declared_capacity, declared_max_hold_ms, busy_count, "
        "reserved_count, waiting_count, next_position, created_at, updated_at) "
        "VALUES (%s, true, 1, 3600000, 0, 0, 0, 1, now(), now())",
        [LIMIT],
    )


def cycles(conn: psycopg.Connection, count: int) -> float:
    """ms per queued cycle over `count` cycles."""
    tag = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    for i in range(count):
        first, second = f"{tag}-a{i}", f"{tag}-b{i}"
        _, held = conn.execute(ACQUIRE, [LIMIT, first, first], prepare=True).fetchone() or (None, None)
        outcome = (conn.execute(ACQUIRE, [LIMIT, second, second], prepare=True).fetchone() or ("",))[0]
        if outcome != "waiting":
            raise RuntimeError(f"the second acquire answered {outcome!r}, not 'waiting'")
        conn.execute(RELEASE, [held], prepare=True).fetchone()
        outcome, got = conn.execute(ACQUIRE, [LIMIT, second, second], prepare=True).fetchone() or ("", None)
        if outcome != "busy":
            raise RuntimeError(f"the woken request's acquire answered {outcome!r}, not 'busy'")
        conn.execute(RELEASE, [got], prepare=True).fetchone()
    return (time.perf_counter() - started) * 1000 / count


def own_times(url: str) -> list[tuple[str, int, float]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT funcname, calls, self_time / calls FROM pg_stat_user_functions "
            "WHERE calls > 0 ORDER BY self_time DESC LIMIT 5"
        ).fetchall()
    return [(name, calls, own) for name, calls, own in rows]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("databases", nargs=2, help="two database names on postgres@127.0.0.1:5432")
    parser.add_argument("--cycles", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    urls = {name: f"postgresql://postgres@127.0.0.1:5432/{name}" for name in args.databases}
    conns = {name: psycopg.connect(url, autocommit=True) for name, url in urls.items()}
    figures: dict[str, list[float]] = {name: [] for name in conns}
    for conn in conns.values():
        prepare(conn)
        conn.execute("SET track_functions = 'pl'")
        cycles(conn, 200)  # warm: plans cached, pages read
        conn.execute("SELECT pg_stat_reset()")
    for _ in range(args.rounds):
        for name, conn in conns.items():
            conn.execute("VACUUM limits_slot, limits_queueentry, limits_limit")
            figures[name].append(cycles(conn, args.cycles))
    for conn in conns.values():
        conn.close()  # a backend's function statistics are flushed as it exits
    time.sleep(1)
    for name, ms in figures.items():
        rounds = " ".join(f"{m:.3f}" for m in ms)
        print(f"{name}: ms per queued cycle {rounds}; median {statistics.median(ms):.3f}")
        own = "; ".join(f"{func} {own:.3f} ms x {calls:,}" for func, calls, own in own_times(urls[name]))
        print(f"{name}: own time per call: {own}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
