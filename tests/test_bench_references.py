"""The bench's references (issue 17) still work, without timing anything: the hand-written durable
FIFO semaphore of tests/bench/fifo.sql grants in FIFO order and never over capacity, its grant
writes the waiter's row and notifies only the waiter; the hand-off measure both sides of scenario
11 share; DBOS's queue (skipped when `dbos`, in the optional `bench` extra, is not installed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.bench import dbos_queue, fifo
from tests.conftest import requires_postgres


def _url(name: str | None = None) -> str:
    db = settings.DATABASES["default"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgresql://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name or db['NAME']}"


@pytest.fixture
def connect(transactional_db: None) -> Iterator[Any]:
    """Autocommit connections to the test database, the FIFO installed and limit 1 of capacity 2
    reset; the FIFO's tables are dropped afterwards."""
    opened: list[psycopg.Connection[Any]] = []

    def open_one() -> psycopg.Connection[Any]:
        conn = psycopg.connect(_url(), autocommit=True)
        opened.append(conn)
        return conn

    admin = open_one()
    fifo.install(admin)
    fifo.reset(admin, limits=1, capacity=2)
    yield open_one
    admin.execute("DROP TABLE IF EXISTS bench_fifo_waiter, bench_fifo_limit CASCADE")
    for conn in opened:
        conn.close()


def _limit(conn: Any) -> tuple[int, int]:
    busy, waiting = conn.execute("SELECT busy, waiting FROM bench_fifo_limit WHERE id = 1").fetchone()
    return busy, waiting


def _join(client: fifo.Client) -> int:
    """bench_fifo_acquire without waiting: the ticket (0: taken at once)."""
    return int(client.conn.execute("SELECT bench_fifo_acquire(1, %s)", [client.channel]).fetchone()[0])


def _notified(client: fifo.Client) -> list[str]:
    return [n.payload for n in client.conn.notifies(timeout=0.5, stop_after=1)]


@requires_postgres
@pytest.mark.postgres
def test_fifo_grants_in_order_and_never_over_capacity(connect):
    clients = [fifo.Client(connect(), f"bench_smoke_{n}", wake_timeout=0.5) for n in range(5)]
    a, b, c, d, e = clients
    assert a.acquire(1) == (0, False)
    assert b.acquire(1) == (0, False)
    assert _limit(a.conn) == (2, 0)
    tickets = [_join(c), _join(d), _join(e)]
    assert all(t > 0 for t in tickets) and tickets == sorted(tickets)
    assert _limit(a.conn) == (2, 3)
    # Each release hands its slot to the head of the queue: busy stays at capacity, the grant is
    # written on the waiter's row, and only that waiter is notified, with its ticket.
    order = []
    for releaser, ticket in ((a, 0), (b, 0)):
        releaser.release(1, ticket)
        assert _limit(a.conn)[0] == 2
        granted = [cl for cl, t in zip((c, d, e), tickets, strict=True) if _state(a.conn, t) == "granted"]
        order = [cl.channel for cl in granted]
    assert order == [c.channel, d.channel]
    assert _notified(c) == [str(tickets[0])]
    assert _notified(d) == [str(tickets[1])]
    assert _notified(e) == []
    assert _state(a.conn, tickets[2]) == "waiting"
    # A newcomer queues behind e, the last waiter.
    late = fifo.Client(connect(), "bench_smoke_late", wake_timeout=0.5)
    late_ticket = _join(late)
    assert late_ticket > tickets[2]
    c.release(1, tickets[0])  # c's row goes, e is granted
    assert _state(a.conn, tickets[0]) is None
    assert _state(a.conn, tickets[2]) == "granted" and _state(a.conn, late_ticket) == "waiting"
    e.wait(tickets[2])  # returns: its notification is there
    for client, ticket in ((d, tickets[1]), (e, tickets[2])):
        client.release(1, ticket)
    assert _state(a.conn, late_ticket) == "granted"
    late.release(1, late_ticket)
    assert _limit(a.conn) == (0, 0)
    assert a.conn.execute("SELECT count(*) FROM bench_fifo_waiter").fetchone()[0] == 0


@requires_postgres
@pytest.mark.postgres
@pytest.mark.parametrize("variant", ["", "_mx", "_sx", "_rc"])
def test_fifo_under_concurrent_use_ends_empty(connect, variant):
    """Threads, each on its own connection, cycle acquire -> release on a limit of capacity 2:
    every cycle ends (a join that raced the last releases would wait forever), no more than 2
    hold at once (the table's CHECK; the threads count too), and the limit ends empty."""
    import threading

    holding, most, failures = [0], [0], []
    lock = threading.Lock()

    def cycle(n: int) -> None:
        try:
            client = fifo.Client(connect(), f"bench_smoke_t{n}", wake_timeout=0.2, variant=variant)
            for _ in range(25):
                ticket, _ = client.acquire(1)
                with lock:
                    holding[0] += 1
                    most[0] = max(most[0], holding[0])
                with lock:
                    holding[0] -= 1
                client.release(1, ticket)
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=cycle, args=(n,), daemon=True) for n in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a cycle never ended"
    assert failures == []
    assert most[0] <= 2
    conn = connect()
    assert _limit(conn) == (0, 0)
    assert conn.execute("SELECT reserved FROM bench_fifo_limit WHERE id = 1").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM bench_fifo_waiter").fetchone()[0] == 0


@requires_postgres
@pytest.mark.postgres
def test_fifo_refuses_more_than_capacity(connect):
    conn = connect()
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE bench_fifo_limit SET busy = 3 WHERE id = 1")


def _state(conn: Any, ticket: int) -> str | None:
    return conn.execute("SELECT bench_fifo_state(%s)", [ticket]).fetchone()[0]


def test_release_to_next_start():
    # Releases at 10, 20, 35; step starts at 12, 21, 50; a release after the last start is left out.
    assert dbos_queue.release_to_next_start([10, 20, 35, 60], [21, 12, 50]) == [2, 1, 15]


@requires_postgres
@pytest.mark.postgres
def test_dbos_queue_runs_every_workflow(transactional_db):
    pytest.importorskip("dbos", reason="dbos is in the optional `bench` extra")
    name = f"{settings.DATABASES['default']['NAME']}_dbos_smoke"
    with psycopg.connect(_url("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        figures = dbos_queue.run(_url(name), 12, 0.01)
    finally:
        with psycopg.connect(_url("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert figures["n"] == 12
    assert figures["max_running"] >= 1


@requires_postgres
@pytest.mark.postgres
def test_fifo_rc_grants_a_reservation_the_waiter_confirms(connect):
    """The _rc variant (the SPEC's reservation on the reference): the grant reserves the head's
    slot, only a confirmed slot can be released, and the confirm moves it from reserved to held."""
    a, b, c = (fifo.Client(connect(), f"bench_rc_{n}", wake_timeout=0.5, variant="_rc") for n in range(3))
    assert a.acquire(1) == (0, False) and b.acquire(1) == (0, False)
    ticket = _join(c)
    a.release(1, 0)
    reserved = a.conn.execute("SELECT busy, waiting, reserved FROM bench_fifo_limit WHERE id = 1").fetchone()
    assert reserved == (2, 0, 1)
    assert _notified(c) == [str(ticket)]
    with pytest.raises(psycopg.errors.RaiseException, match="no confirmed slot"):
        c.release(1, ticket)  # not confirmed yet: refused, nothing changed
    c.conn.execute("SELECT bench_fifo_confirm_rc(1, %s)", [ticket])
    assert a.conn.execute("SELECT busy, waiting, reserved FROM bench_fifo_limit WHERE id = 1").fetchone() == (2, 0, 0)
    with pytest.raises(psycopg.errors.RaiseException, match="no reservation"):
        c.conn.execute("SELECT bench_fifo_confirm_rc(1, %s)", [ticket])  # a second confirm
    c.release(1, ticket)
    b.release(1, 0)
    assert _limit(a.conn) == (0, 0)
