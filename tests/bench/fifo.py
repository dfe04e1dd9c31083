"""The hand-written durable FIFO semaphore (tests/bench/fifo.sql), the bench's reference for the
engine's hot path (issue 17): install it, reset it, and one client of it.

A client is one autocommit psycopg connection: it LISTENs on a channel of its own, calls
bench_fifo_acquire; when queued, it waits for the notification that bench_fifo_release sends the
head of the queue in the releasing commit (the grant already wrote its row: nothing to confirm,
except in the `_rc` variant, which confirms as the engine's woken runs do), looking at its row
with bench_fifo_state if none comes within `wake_timeout` seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SQL = Path(__file__).with_name("fifo.sql")


def install(conn: Any) -> None:
    """Create the tables and functions (idempotent) on a psycopg connection."""
    conn.execute(SQL.read_text())
    if not conn.autocommit:
        conn.commit()


def reset(conn: Any, limits: int, capacity: int) -> None:
    """Limits 1..`limits`, each of `capacity`, empty; no waiter."""
    conn.execute("DELETE FROM bench_fifo_waiter")
    conn.execute("DELETE FROM bench_fifo_limit")
    for limit in range(1, limits + 1):
        conn.execute("INSERT INTO bench_fifo_limit (id, capacity) VALUES (%s, %s)", [limit, capacity])
    if not conn.autocommit:
        conn.commit()


class Client:
    """One process's use of the semaphore on one connection (autocommit, listening on `channel`).
    variant: "" (bench_fifo_acquire/release), "_mx" (the lock in a subtransaction, the writes
    after it: the engine's shape before migration 0015), "_sx" (lock and writes in one block: the
    engine's shape now) or "_rc" (the SPEC's reservation: a woken waiter confirms its slot in one
    more call); fifo.sql."""

    def __init__(self, conn: Any, channel: str, wake_timeout: float = 1.0, variant: str = "") -> None:
        if variant not in ("", "_mx", "_sx", "_rc"):
            raise ValueError(f"no variant {variant!r}")
        acquire = "" if variant == "_rc" else variant
        self.acquire_sql = f"SELECT bench_fifo_acquire{acquire}(%s, %s)"
        self.release_sql = f"SELECT bench_fifo_release{variant}(%s, %s)"
        self.confirm_sql = "SELECT bench_fifo_confirm_rc(%s, %s)" if variant == "_rc" else ""
        self.conn = conn
        self.channel = channel
        self.wake_timeout = wake_timeout
        self.wakes = 0  # notifications waited for
        self.looks = 0  # bench_fifo_state calls after a wait timed out
        conn.execute(f"LISTEN {channel}")

    def acquire(self, limit: int) -> tuple[int, bool]:
        """(ticket, queued): hold a slot of `limit` when this returns; the ticket is what release
        needs (0: taken at once)."""
        with self.conn.cursor() as cur:
            cur.execute(self.acquire_sql, [limit, self.channel], prepare=True)
            ticket = int(cur.fetchone()[0])
        if ticket == 0:
            return 0, False
        self.wait(ticket)
        if self.confirm_sql:  # _rc: the grant was a reservation; confirm it, as a resumed run does
            with self.conn.cursor() as cur:
                cur.execute(self.confirm_sql, [limit, ticket], prepare=True)
        return ticket, True

    def wait(self, ticket: int) -> None:
        expected = str(ticket)
        while True:
            # Collect the notifications first, then query (psycopg: no query inside notifies()).
            got = [n.payload for n in self.conn.notifies(timeout=self.wake_timeout, stop_after=1)]
            self.wakes += 1
            if expected in got:
                return
            if not got:
                self.looks += 1
                state = self.conn.execute("SELECT bench_fifo_state(%s)", [ticket]).fetchone()[0]
                if state == "granted":
                    return
                if state is None:
                    raise RuntimeError(f"ticket {ticket} is not in the queue")

    def release(self, limit: int, ticket: int) -> None:
        with self.conn.cursor() as cur:
            cur.execute(self.release_sql, [limit, ticket], prepare=True)
