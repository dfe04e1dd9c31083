"""Issue 26, part 2: live state apart from history (migration 0034, PostgreSQL).

limits_slot and limits_queueentry are partitioned by state: a live partition (reserved and busy
slots, waiting entries) and a history partition (every other state). A row that ends moves in
the same UPDATE.

Must never happen: a live row in a history partition or a finished one in a live partition; a
slot, queue position or history row lost or changed by the migration (either way); a queue entry
id made twice after it; and a run's call failing because the row it waited for moved partition
(PostgreSQL reports that as a serialization failure where one table had the row no longer match).
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.db import IntegrityError, connection, connections, transaction

from limits import services
from limits.models import QueueEntry, Slot
from limits.verify import verify
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare, holders, queue

partitions = importlib.import_module("limits.migrations.0034_live_apart_from_history")
live_keys = importlib.import_module("limits.migrations.0037_live_partitions_hold_the_limit_keys")

pytestmark = requires_postgres


def every_state(clock: Any) -> None:
    """A box with slots reserved, busy, released, expired, lapsed and ended with their run, and
    queue entries waiting, granted, timed out and cancelled."""
    declare(one={"capacity": 2, "max_hold": "1h"}, short={"capacity": 1, "max_hold": "1m"})
    first = services.acquire("one", run_id="r1").slot_id
    services.acquire("one", run_id="r2")
    tied = services.acquire("short", run_id="t1").slot_id
    assert services.tie_to_run(tied, "t1")
    assert services.end_run("t1") == 1  # run_ended
    services.acquire("short", run_id="x1")  # expires: max hold 1 minute
    services.acquire("one", run_id="r3", request="r3:0", timeout="30s")
    for run in ("r4", "r5", "r6"):
        services.acquire("one", run_id=run, request=f"{run}:0")
    clock.advance(seconds=31)
    assert services.sweep().timed_out == 1  # r3
    services.end_run("r6")  # cancelled
    services.release(first)  # r4 reserved
    clock.advance(minutes=2, seconds=1)
    report = services.sweep()  # r4's reservation lapses, r5 reserved, r4 waits again; x1 expires
    assert (report.lapsed, report.expired) == (1, 1)
    assert holders("one") == [("r2", "busy"), ("r5", "reserved")]
    assert queue("one") == ["r4"]


def rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every column of every slot and queue entry."""
    return {
        "slots": sorted(Slot.objects.values_list(*(f.attname for f in Slot._meta.concrete_fields))),
        "entries": sorted(QueueEntry.objects.values_list(*(f.attname for f in QueueEntry._meta.concrete_fields))),
    }


def kinds() -> dict[str, str]:
    """relkind of the two tables: 'p' partitioned, 'r' one table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, relkind FROM pg_class WHERE relname IN ('limits_slot', 'limits_queueentry') "
            "AND relnamespace = current_schema()::regnamespace"
        )
        return dict(cursor.fetchall())


def partition_states() -> dict[str, set[str]]:
    with connection.cursor() as cursor:
        found = {}
        for table in ("limits_slot_live", "limits_slot_history", "limits_queueentry_live", "limits_queueentry_history"):
            cursor.execute(f"SELECT DISTINCT state FROM {table}")
            found[table] = {state for (state,) in cursor.fetchall()}
        return found


@pytest.mark.django_db
def test_each_row_sits_in_the_partition_of_its_state(clock) -> None:
    every_state(clock)
    assert kinds() == {"limits_slot": "p", "limits_queueentry": "p"}
    assert partition_states() == {
        "limits_slot_live": {"reserved", "busy"},
        "limits_slot_history": {"released", "expired", "lapsed", "run_ended"},
        "limits_queueentry_live": {"waiting"},
        "limits_queueentry_history": {"granted", "timed_out", "cancelled"},
    }


@pytest.mark.django_db
def test_the_migration_keeps_every_live_slot_queue_position_and_history_row_both_ways(clock) -> None:
    """A box with rows in every state, taken back to one table of each (0034 reversed) and
    forward again: every column of every row the same each time, each row in its partition,
    verify ok, and the box goes on from where it was (the next grant in queue order, a new
    entry's id after every one ever made, a deleted row's included)."""
    every_state(clock)
    services.acquire("one", run_id="r8", request="r8:0")
    services.end_run("r8")  # cancelled: its entry is the newest
    made = QueueEntry.objects.order_by("-id").values_list("id", flat=True).first()
    QueueEntry.objects.filter(id=made).delete()  # as forget and the demo's reset delete rows
    before = rows()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending foreign-key checks under the DDL
    with connection.schema_editor() as editor:
        partitions.backward(django_apps, editor)
    assert kinds() == {"limits_slot": "r", "limits_queueentry": "r"}
    assert rows() == before
    assert verify(["one", "short"]).ok
    with connection.schema_editor() as editor:
        partitions.forward(django_apps, editor)
    assert kinds() == {"limits_slot": "p", "limits_queueentry": "p"}
    assert rows() == before
    assert partition_states()["limits_queueentry_live"] == {"waiting"}
    assert verify(["one", "short"]).ok, verify(["one", "short"]).violations

    assert services.acquire("one", run_id="r7", request="r7:0").state == "waiting"
    assert QueueEntry.objects.get(run_id="r7").id > made  # no id made twice, even a deleted row's
    services.release(Slot.objects.get(run_id="r2").id)
    assert sorted(holders("one")) == [("r4", "reserved"), ("r5", "reserved")]  # r4 was first in the queue
    assert queue("one") == ["r7"]
    assert_counters_match_rows("one")


def limit_keys() -> set[str]:
    """The slot and queue tables (parent or partition) that carry a foreign key to limits_limit."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT conrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND confrelid = 'limits_limit'::regclass "
            "AND conrelid::regclass::text SIMILAR TO 'limits\\_(slot|queueentry)%%'"
        )
        return {table for (table,) in cursor.fetchall()}


@pytest.mark.django_db
def test_the_limit_keys_sit_on_the_live_partitions_where_every_row_enters(clock) -> None:
    """Migration 0037: a row that ends moves to history with no key check (the move is an insert
    there); a live row is still held to its limit, and the migration goes both ways."""
    every_state(clock)
    assert limit_keys() == {"limits_slot_live", "limits_queueentry_live"}
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    for live in (Slot.objects.filter(state="busy"), QueueEntry.objects.filter(state="waiting")):
        with pytest.raises(IntegrityError), transaction.atomic():
            live.update(limit_id=10**9)
    with connection.schema_editor() as editor:
        live_keys.backward(django_apps, editor)
    assert limit_keys() == {
        "limits_slot", "limits_slot_live", "limits_slot_history",
        "limits_queueentry", "limits_queueentry_live", "limits_queueentry_history",
    }  # fmt: skip
    with connection.schema_editor() as editor:
        live_keys.forward(django_apps, editor)
    assert limit_keys() == {"limits_slot_live", "limits_queueentry_live"}
    assert verify(["one", "short"]).ok


@pytest.mark.django_db(transaction=True)
def test_a_slot_freed_while_its_run_ties_it_answers_not_tied_rather_than_failing() -> None:
    """An operator frees a run's busy slot while the run, in its own transaction, ties the slot
    to itself (with_limit, SPEC 2.5). The tie waits for the row; the free commits and moves the
    row to the history partition. The tie answers False, as it did on one table, and fails
    nothing."""
    declare(one={"capacity": 1, "max_hold": "1h"})
    slot_id = services.acquire("one", run_id="r1").slot_id
    released, go_on = threading.Event(), threading.Event()
    answers: list[Any] = []

    def operator() -> None:
        try:
            with transaction.atomic():
                services.release(slot_id, actor="user:ada")
                released.set()
                go_on.wait(10)
        finally:
            connection.close()

    def run() -> None:
        try:
            answers.append(services.tie_to_run(slot_id, "r1"))
        except Exception as error:  # noqa: BLE001 - the failure is the answer under test
            answers.append(error)
        finally:
            connection.close()

    freeing = threading.Thread(target=operator)
    freeing.start()
    assert released.wait(10)
    tying = threading.Thread(target=run)
    tying.start()
    for _ in range(200):  # until the tie waits for the row the free holds
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                break
        time.sleep(0.02)
    else:
        pytest.fail("the tie never waited for the slot's row")
    go_on.set()
    freeing.join(10)
    tying.join(10)
    assert answers == [False]
    slot = Slot.objects.get(id=slot_id)
    assert (slot.state, slot.ends_with_run) == ("released", False)


@pytest.mark.django_db
def test_verify_checks_what_the_foreign_key_and_the_one_to_one_held(clock) -> None:
    """Partitions cannot hold limits_slot.queue_entry_id's foreign key or its uniqueness across
    them: `limits verify` (check d) finds a slot naming an entry its queue lacks, and two slots
    naming one entry."""
    every_state(clock)
    assert verify(["one"]).ok
    handed = Slot.objects.filter(limit__name="one", queue_entry__isnull=False).order_by("granted_at")
    lapsed, reserved = handed[0], handed[1]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE limits_slot SET queue_entry_id = %s WHERE id = %s", [reserved.queue_entry_id, lapsed.id])
    assert f"2 slots name queue entry {reserved.queue_entry_id}" in " ".join(verify(["one"]).violations)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE limits_slot SET queue_entry_id = 987654 WHERE id = %s", [lapsed.id])
    assert "a slot names queue entry 987654, which is not one of its queue" in " ".join(verify(["one"]).violations)
