"""Regression tests for races found by the multi-process stress test (tests/concurrency).

A re-acquire with the same request (a woken run confirming) reads the request's slots and then
its queue entries without the limit's lock. On PostgreSQL (READ COMMITTED) each statement sees
the latest commits, so a grant can land between the two reads: the entry then reads 'granted'
while its reserved slot was not seen. The engine must read again, not treat the request as new
(which queued it a second time while a slot was reserved for it: one acquire call granted twice).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from limits import services
from limits.models import QueueEntry, Slot
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare

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


def before_first(table: str, work: Callable[[], Any]) -> Callable[..., Any]:
    """An execute wrapper that commits `work` elsewhere just before the first SELECT on `table`."""
    done = False

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal done
        if not done and sql.lstrip().upper().startswith("SELECT") and f'FROM "{table}"' in sql:
            done = True
            in_another_connection(work)
        return execute(sql, params, many, context)

    return wrapper


def test_a_grant_between_the_replay_reads_is_confirmed_not_queued_again() -> None:
    declare(one={"capacity": 1, "max_hold": "1h"})
    holder = services.acquire("one", run_id="r1").slot_id
    assert services.acquire("one", run_id="r2", request="r2:0").state == "waiting"

    with connection.execute_wrapper(before_first("limits_queueentry", lambda: services.release(holder))):
        got = services.acquire("one", run_id="r2", request="r2:0")

    slot = Slot.objects.get(request="r2:0")
    assert (got.state, got.slot_id) == ("busy", slot.id)
    assert slot.state == "busy"
    assert QueueEntry.objects.filter(request="r2:0", state="waiting").count() == 0
    assert_counters_match_rows("one")


def test_a_regrant_after_a_lapse_between_the_replay_reads_is_confirmed_not_cancelled() -> None:
    """The request's first reservation was freed (an operator released it; it waits again); the
    re-acquire reads that freed slot, then a new grant lands before the entries are read."""
    declare(one={"capacity": 1, "max_hold": "1h"})
    holder = services.acquire("one", run_id="r1").slot_id
    services.acquire("one", run_id="r2", request="r2:0")
    services.release(holder)
    first = Slot.objects.get(request="r2:0", state="reserved")
    blocker = services.acquire("one", run_id="r3").state
    assert blocker == "waiting"
    services.release(first.id, actor="user:op")  # r3 reserved; r2 waits again behind it
    r3_slot = Slot.objects.get(run_id="r3", state="reserved").id

    with connection.execute_wrapper(before_first("limits_queueentry", lambda: services.release(r3_slot))):
        got = services.acquire("one", run_id="r2", request="r2:0")

    second = Slot.objects.get(request="r2:0", state="busy")
    assert (got.state, got.slot_id) == ("busy", second.id)
    assert_counters_match_rows("one")
