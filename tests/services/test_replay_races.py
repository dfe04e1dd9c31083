"""Regression tests for races found by the multi-process stress test (tests/concurrency).

1. A re-acquire with the same request (a woken run confirming) reads the request's slots and
   its queue entries without the limit's lock. When they were two statements (READ COMMITTED:
   each sees the latest commits) a grant could land between them: the entry then read 'granted'
   while its reserved slot was not seen, and the engine treated the request as new (queued a
   second time while a slot was reserved for it: one acquire call granted twice). The Python
   track reads again in that case; on PostgreSQL the replay is one call (limits_previous) that
   reads both in one statement, so one snapshot. The tests commit the grant just before the
   replay's call and hold the answer to it: confirmed, never queued again or cancelled.
2. Every service reads the clock after it holds the limit's lock. A clock read before waiting
   for the lock stamps the change with a time earlier than changes that committed before it:
   a slot freed before it was granted, a grant dated before the release that made room for it.
   The history (granted_at, freed_at, finished_at) must follow the order of the transactions,
   or it cannot prove the invariants (SPEC 4.3: expiry = grant time + max hold).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from limits import services
from limits.models import QueueEntry, Slot
from limits.verify import capacity_overruns, queue_jumps
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare, limit_named

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def in_another_connection(work: Callable[[], Any]) -> None:
    """Run `work` in its own thread, so on its own connection, and commit it."""

    def target() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()


def _calls_the_engine(sql: str) -> bool:
    return bool(re.match(r"\s*(SELECT .* FROM|CALL) limits_\w+\(", sql, re.S))


def before_first(table: str, work: Callable[[], Any], *, locking: bool = False) -> Callable[..., Any]:
    """An execute wrapper that commits `work` elsewhere just before the first SELECT on `table`
    (with locking, the first SELECT ... FOR [NO KEY] UPDATE on it, or the first call of an engine
    function, limits/sql/engine.sql, which takes its locks inside the server)."""
    done = False

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal done
        selects = sql.lstrip().upper().startswith("SELECT") and f'FROM "{table}"' in sql
        if locking:
            fire = bool(selects and re.search(r"FOR (NO KEY )?UPDATE", sql)) or _calls_the_engine(sql)
        else:
            fire = selects
        if not done and fire:
            done = True
            in_another_connection(work)
        return execute(sql, params, many, context)

    return wrapper


def _before_the_replay(work: Callable[[], Any]) -> Callable[..., Any]:
    """`work` committed elsewhere just before the replay's one engine call, which reads the
    request's slots and entries in one snapshot (the Python track's two reads, which a grant
    could fall between, are SQLite's, where writers serialize)."""
    return before_first("limits_queueentry", work, locking=True)


def test_a_grant_between_the_replay_reads_is_confirmed_not_queued_again() -> None:
    declare(one={"capacity": 1, "max_hold": "1h"})
    holder = services.acquire("one", run_id="r1").slot_id
    assert services.acquire("one", run_id="r2", request="r2:0").state == "waiting"

    with connection.execute_wrapper(_before_the_replay(lambda: services.release(holder))):
        got = services.acquire("one", run_id="r2", request="r2:0")

    slot = Slot.objects.get(request="r2:0")
    assert (got.state, got.slot_id) == ("busy", slot.id)
    assert slot.state == "busy"
    assert QueueEntry.objects.filter(request="r2:0", state="waiting").count() == 0
    assert_counters_match_rows("one")


def test_a_regrant_after_a_lapse_between_the_replay_reads_is_confirmed_not_cancelled() -> None:
    """The request's first reservation was freed (an operator released it; it waits again); the
    re-acquire reads that freed slot, then a new grant lands before the entries are read (one
    snapshot on PostgreSQL: the grant lands just before the call)."""
    declare(one={"capacity": 1, "max_hold": "1h"})
    holder = services.acquire("one", run_id="r1").slot_id
    services.acquire("one", run_id="r2", request="r2:0")
    services.release(holder)
    first = Slot.objects.get(request="r2:0", state="reserved")
    blocker = services.acquire("one", run_id="r3").state
    assert blocker == "waiting"
    services.release(first.id, actor="user:op")  # r3 reserved; r2 waits again behind it
    r3_slot = Slot.objects.get(run_id="r3", state="reserved").id

    with connection.execute_wrapper(_before_the_replay(lambda: services.release(r3_slot))):
        got = services.acquire("one", run_id="r2", request="r2:0")

    second = Slot.objects.get(request="r2:0", state="busy")
    assert (got.state, got.slot_id) == ("busy", second.id)
    assert_counters_match_rows("one")


def test_an_acquire_that_waited_for_the_lock_is_dated_after_the_release_before_it(clock) -> None:
    """r2 asks for the only slot while r1 takes and gives it back, one second later, first."""
    declare(one={"capacity": 1, "max_hold": "1h"})

    def r1_takes_and_gives_back() -> None:
        clock.advance(seconds=1)
        slot_id = services.acquire("one", run_id="r1").slot_id
        clock.advance(seconds=1)
        services.release(slot_id)

    with connection.execute_wrapper(before_first("limits_limit", r1_takes_and_gives_back, locking=True)):
        assert services.acquire("one", run_id="r2").state == "busy"

    assert capacity_overruns(limit_named("one")) == []
    assert Slot.objects.get(run_id="r2").granted_at == clock.now()


def test_a_reservation_freed_by_its_run_ending_is_freed_after_it_was_granted(clock) -> None:
    declare(one={"capacity": 1, "max_hold": "1h"})
    holder = services.acquire("one", run_id="r1").slot_id
    services.acquire("one", run_id="r2")

    def r1_releases() -> None:
        clock.advance(seconds=1)
        services.release(holder)

    with connection.execute_wrapper(before_first("limits_limit", r1_releases, locking=True)):
        assert services.end_run("r2") == 1

    slot = Slot.objects.get(run_id="r2")
    assert slot.state == "run_ended"
    assert slot.freed_at >= slot.granted_at
    assert capacity_overruns(limit_named("one")) == []


def test_a_sweep_that_waited_for_the_lock_grants_after_the_release_before_it(clock) -> None:
    """r1's slot is past its max hold. While the sweep waits for the lock, r3 releases and r2
    (first in the queue) is reserved; the sweep then takes r1's slot back and reserves for r4.
    r4's grant must not be dated before r2's. (The release commits just before the call
    limits_sweep, whose time was read before it: limits_clock dates the sweep after the release.)"""
    declare(two={"capacity": 2, "max_hold": "1m"})
    services.acquire("two", run_id="r1")
    clock.advance(seconds=30)
    r3 = services.acquire("two", run_id="r3").slot_id
    services.acquire("two", run_id="r2")
    services.acquire("two", run_id="r4")
    clock.advance(seconds=31)

    def r3_releases() -> None:
        clock.advance(seconds=1)
        services.release(r3)

    with connection.execute_wrapper(before_first("limits_limit", r3_releases, locking=True)):
        report = services.sweep()

    assert (report.expired, report.granted) == (1, 1)
    granted = dict(Slot.objects.filter(state="reserved").values_list("run_id", "granted_at"))
    assert sorted(granted) == ["r2", "r4"] and granted["r4"] >= granted["r2"]
    assert queue_jumps(limit_named("two")) == []
    assert capacity_overruns(limit_named("two")) == []
