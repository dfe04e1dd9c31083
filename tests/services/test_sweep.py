"""SPEC 4.1, 4.2 and 4.4: what the sweep takes back and hands on, and that it is idempotent."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.models import AuditEvent, Slot
from limits.services import acquire, sweep
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def one(clock):
    return declare(one={"capacity": 1, "max_hold": "10m"})["one"]


def test_a_busy_slot_past_its_max_hold_is_taken_back_and_handed_on(one, clock) -> None:
    slot_id = acquire("one", run_id="r1").slot_id
    acquire("one", run_id="r2")
    clock.advance(minutes=9, seconds=59)
    assert sweep().expired == 0
    clock.advance(seconds=1)
    report = sweep()
    assert (report.expired, report.granted) == (1, 1)
    assert Slot.objects.get(id=slot_id).state == "expired"
    assert holders("one") == [("r2", "reserved")]
    event = AuditEvent.objects.get(action="expire")
    assert (event.actor, event.new_value) == ("sweep", "1 slot(s)")
    assert services.release(slot_id) is False  # 2.4: already taken back by max hold


def test_a_slot_freed_by_expiry_reaches_the_queue_only_at_the_sweep(one, clock) -> None:
    """4.2: expiries are the sweep's; until it runs the slot still counts."""
    acquire("one", run_id="r1")
    clock.advance(minutes=11)
    assert acquire("one", run_id="r2").state == "waiting"
    sweep()
    assert holders("one") == [("r2", "reserved")]


def test_the_sweep_is_idempotent(one, clock) -> None:
    acquire("one", run_id="r1")
    acquire("one", run_id="r2", timeout="1m")
    acquire("one", run_id="r3")
    clock.advance(minutes=11)
    first = sweep()
    state = (holders("one"), queue("one"), list(Slot.objects.order_by("id").values_list("id", "state")))
    second = sweep()
    assert (first.expired, first.timed_out, first.granted) == (1, 1, 1)
    assert not second.found_work()
    assert (holders("one"), queue("one"), list(Slot.objects.order_by("id").values_list("id", "state"))) == state
    assert_counters_match_rows("one")


def test_the_sweep_grants_capacity_nobody_handed_on(one, clock) -> None:
    """If free capacity and waiting runs ever meet (e.g. a crash between commits in an older
    version), the sweep hands the capacity on."""
    acquire("one", run_id="r1")
    acquire("one", run_id="r2")
    from limits.models import Limit

    Limit.objects.filter(name="one").update(capacity_override=2)  # a raw change that granted nothing
    assert sweep().granted == 1
    assert holders("one")[-1] == ("r2", "reserved")


def test_an_idle_sweep_is_a_constant_number_of_queries(clock) -> None:
    declare(**{f"l{i}": {"capacity": 2, "max_hold": "1h"} for i in range(30)})
    for i in range(30):
        acquire(f"l{i}", run_id=f"r{i}")
    sweep()
    with CaptureQueriesContext(connection) as queries:
        report = sweep()
    assert not report.found_work()
    # the finds (four queries on SQLite; on PostgreSQL the one call limits_sweep, which also
    # sweeps), two history probes, the insights state (limits.insights: this minute sampled,
    # nothing to roll up), and recording that the sweep ran. In this test's transaction the
    # PostgreSQL call sits in a savepoint (the sweeper's durable block; in autocommit, none).
    sent = [q for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    assert len(sent) == (5 if connection.vendor == "postgresql" else 8)
    from limits.models import SweepState

    assert SweepState.objects.get().last_run_at is not None


def test_the_sweep_deletes_history_past_the_retention_in_bounded_batches(one, clock, settings, monkeypatch) -> None:
    from limits.engine import sweeper
    from limits.models import QueueEntry

    settings.STACKBONE_HISTORY_RETENTION = "1h"
    monkeypatch.setattr(sweeper, "HISTORY_BATCH", 2)
    services.set_max_hold("one", "30d")
    for run in ("a", "b", "c"):
        services.release(acquire("one", run_id=run).slot_id)
    live = acquire("one", run_id="live").slot_id
    acquire("one", run_id="waiter")
    clock.advance(minutes=30)
    assert sweep().purged == 0
    clock.advance(minutes=31)
    assert sweep().purged == 2  # a batch of 2 freed slots
    assert sweep().purged == 1
    assert sweep().purged == 0
    assert list(Slot.objects.values_list("id", flat=True)) == [live]
    assert QueueEntry.objects.get().run_id == "waiter"  # a waiting entry is not history
    assert_counters_match_rows("one")


def test_history_younger_than_the_retention_is_kept(one, clock) -> None:
    services.release(acquire("one", run_id="a").slot_id)
    clock.advance(days=6, hours=23)
    assert sweep().purged == 0
    clock.advance(hours=2)
    assert sweep().purged == 1


def test_a_granted_entry_is_kept_while_its_slot_remains(one, clock, settings) -> None:
    from limits.models import QueueEntry

    settings.STACKBONE_HISTORY_RETENTION = "1h"
    services.set_max_hold("one", "30d")
    holder = acquire("one", run_id="a").slot_id
    acquire("one", run_id="b", request="b:0")
    services.release(holder)
    acquire("one", run_id="b", request="b:0")  # b confirms; its entry is finished (granted)
    clock.advance(hours=2)
    sweep()
    assert QueueEntry.objects.filter(run_id="b").exists()
    assert Slot.objects.filter(run_id="b", state="busy").exists()


@pytest.mark.django_db(transaction=True)
def test_the_sweep_refuses_to_run_inside_a_callers_transaction(one, clock) -> None:
    """Each limit's sweep is a transaction of its own, committed before the next (on PostgreSQL
    inside the procedure limits_sweep): inside a caller's transaction the pass would hold every
    limit's locks to its end, in no lock order across limits. Refused on both databases, and
    nothing changes."""
    from django.db import transaction

    acquire("one", run_id="r1")
    clock.advance(hours=2)  # past the max hold: the sweep would take the slot back
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        sweep()
    assert Slot.objects.get(run_id="r1").state == "busy"
    assert sweep().expired == 1
