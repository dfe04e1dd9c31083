"""Races between the history purge (no lock) and the engine functions (found in review, 2026-12-02)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from limits import services
from limits.models import Limit, Slot
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare


def _hold_lock_then(limit_id: int, work, locked: threading.Event, go: threading.Event) -> threading.Thread:
    """In another connection: lock the limit (FOR NO KEY UPDATE), say so, wait for `go`, run
    `work` under that lock, commit."""

    def target() -> None:
        try:
            with transaction.atomic():
                list(Limit.objects.locked().filter(id=limit_id))
                locked.set()
                go.wait(10)
                work()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_release_of_a_slot_the_purge_deletes_while_it_waits_for_the_lock_changes_no_counter() -> None:
    """limits_release reads the slot's limit without a lock, then locks it and reads the slot's
    state again. The history purge (sweeper.purge_history: no lock) may delete a freed slot in
    between. The state read after the lock is then NULL, and `v_state NOT IN ('busy','reserved')`
    is NULL, not true: the function goes on as for a busy slot (UPDATE busy_count - 1, keyed_busy_count
    - (NULL <> '')): only the NOT NULL on keyed_busy_count stops it, with an IntegrityError. SPEC
    2.4: a release of a slot already free or unknown answers {"released": False}, changes nothing,
    and is safe to retry; here it raises (limits_confirm has the same NULL hole)."""
    limit = declare(one={"capacity": 2, "max_hold": "1h"})["one"]
    old = services.acquire("one", run_id="r-old").slot_id
    assert services.release(old) is True  # history: freed, purgeable once old enough
    services.acquire("one", run_id="r-busy")  # a busy slot, so busy_count can go down by one

    locked, go = threading.Event(), threading.Event()
    thread = _hold_lock_then(limit.id, lambda: Slot.objects.filter(id=old).delete(), locked, go)
    assert locked.wait(10)

    def let_the_purge_go() -> None:
        time.sleep(1.0)
        go.set()

    releaser = threading.Thread(target=let_the_purge_go)
    releaser.start()  # lets the purge commit a second after the release below waits for the lock
    try:
        released = services.release(old, actor="user:op")  # the retried release of an old slot id
    finally:
        thread.join()
        releaser.join()

    assert released is False
    assert_counters_match_rows("one")
