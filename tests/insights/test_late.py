"""The rollup's guarantees under late commits, racing sweeps, short history retention, a clock
that jumps ahead and a lagging rollup (limits.insights, the module docstring): each event is
counted exactly once, counters never go back."""

from __future__ import annotations

import random
import threading
from collections import Counter
from datetime import datetime, timedelta

import pytest
from django.db import connection, transaction
from django.db.models import Count, F, Sum
from django.db.models.functions import Now

from limits import insights
from limits.engine import sweeper
from limits.models import LimitKeySpan, LimitMinute, LimitTotals, QueueEntry, Slot, SweepState
from limits.services import acquire, end_run, release, sweep
from tests.conftest import requires_postgres
from tests.factories import declare
from tests.insights.helpers import History, roll_up_all, start_insights


def totals(name: str) -> object:
    return LimitTotals.objects.filter(limit__name=name).values("grants", "released_by_workflow").first()


def roll_up_until_done(clock) -> None:
    while insights.roll_up(clock.now()):
        pass


# --- late commits ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_event_stamped_in_a_minute_already_rolled_up_is_counted_once(clock) -> None:
    """The SQLite equivalent of a late commit: the grant and its release land in the history
    stamped 100 s before the rollup that already did their minute."""
    declare(a={"capacity": 2, "max_hold": "1h"})
    start_insights(clock)
    clock.advance(seconds=5)
    stamped = clock.now()
    clock.advance(minutes=1, seconds=40)
    roll_up_until_done(clock)  # the grant's minute is rolled up, with nothing in it
    assert SweepState.objects.get().rolled_until > stamped
    assert totals("a") is None
    clock.advance(minutes=-1, seconds=-40)  # the caller's clock read at the start of its work
    release(acquire("a", run_id="late").slot_id)
    clock.advance(minutes=1, seconds=40)
    roll_up_until_done(clock)
    assert totals("a") is None  # nothing new to roll up yet: counted with the next minute
    clock.advance(minutes=1)
    roll_up_until_done(clock)
    assert totals("a") == {"grants": 1, "released_by_workflow": 1}
    row = LimitMinute.objects.get(limit__name="a", minute=insights.floor_minute(stamped))
    assert (row.grants, row.released_by_workflow) == (1, 1)
    for _ in range(20):  # later passes recount the minute while it is in the window: no change
        clock.advance(minutes=1)
        roll_up_until_done(clock)
    assert totals("a") == {"grants": 1, "released_by_workflow": 1}


@pytest.mark.django_db
def test_an_event_later_than_the_recount_window_is_not_counted(clock) -> None:
    """The documented bound: a commit more than RECOUNT_WINDOW after its minute is not counted
    (and nothing goes wrong otherwise)."""
    declare(a={"capacity": 2, "max_hold": "1h"})
    start_insights(clock)
    clock.advance(seconds=5)
    clock.advance(minutes=20)
    roll_up_until_done(clock)
    clock.advance(minutes=-20)
    release(acquire("a", run_id="too-late").slot_id)
    clock.advance(minutes=21)
    roll_up_until_done(clock)
    assert totals("a") is None


@requires_postgres
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_grant_committed_long_after_its_time_is_counted_once(clock) -> None:
    """A caller's open transaction holds a grant and its release 100 s: the sweeps that roll
    its minute up meanwhile do not see it; a later one counts it, once."""
    declare(a={"capacity": 2, "max_hold": "1h"})
    start_insights(clock)
    clock.advance(seconds=5)
    stamped, go = threading.Event(), threading.Event()

    def caller() -> None:
        try:
            with transaction.atomic():  # e.g. a caller's own transaction around the work
                slot = acquire("a", run_id="late").slot_id
                stamped.set()
                assert go.wait(10)
                release(slot)
        finally:
            connection.close()

    thread = threading.Thread(target=caller)
    thread.start()
    assert stamped.wait(10)
    clock.advance(minutes=1, seconds=40)  # the work took 100 s
    roll_up_until_done(clock)
    assert totals("a") is None
    go.set()
    thread.join()
    clock.advance(minutes=3)
    roll_up_until_done(clock)
    assert list(Slot.objects.values_list("state", flat=True)) == ["released"]
    assert totals("a") == {"grants": 1, "released_by_workflow": 1}
    clock.advance(minutes=20)
    roll_up_until_done(clock)
    assert totals("a") == {"grants": 1, "released_by_workflow": 1}


# --- racing sweeps -----------------------------------------------------------------------------


@requires_postgres
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_four_rollups_at_once_add_each_minute_once(clock, attempt: int) -> None:
    declare(a={"capacity": 50, "max_hold": "1h", "per_key": 50})
    start_insights(clock)
    for m in range(8):
        for i in range(5):
            release(acquire("a", run_id=f"r{m}-{i}", key=f"k{i}").slot_id)
        clock.advance(minutes=1)
    clock.advance(seconds=31)
    barrier = threading.Barrier(4)
    done: list[int] = []

    def worker() -> None:
        try:
            barrier.wait()
            while n := insights.roll_up(clock.now(), max_minutes=3):
                done.append(n)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    row = LimitTotals.objects.get(limit__name="a")
    assert (row.grants, row.released_by_workflow) == (40, 40), done
    assert sum(LimitKeySpan.objects.values_list("grants", flat=True)) == 40
    assert sum(done) == 10  # 8:59 (the first sweep's minute) to 9:08, each minute by one sweep


# --- history retention -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_short_history_retention_never_purges_what_the_rollup_needs(clock, settings) -> None:
    settings.STACKBONE_HISTORY_RETENTION = "1m"
    declare(a={"capacity": 2, "max_hold": "3m"})
    start_insights(clock)
    clock.advance(seconds=2)  # early in a minute
    for i in range(5):
        release(acquire("a", run_id=f"r{i}").slot_id)
    for _ in range(10):
        clock.advance(seconds=15)
        sweep()
    assert totals("a") == {"grants": 5, "released_by_workflow": 5}
    assert Slot.objects.count() == 5  # kept: still in the recount window
    for _ in range(30):  # once out of the window (15 min and its key span), they go
        clock.advance(minutes=1)
        sweep()
    assert Slot.objects.count() == 0
    assert totals("a") == {"grants": 5, "released_by_workflow": 5}


@pytest.mark.django_db
def test_the_history_cutoff_is_the_retention_when_it_is_long(clock, settings, django_assert_num_queries) -> None:
    start_insights(clock)
    now = clock.now()
    with django_assert_num_queries(0):
        assert sweeper.history_cutoff(now) == now - timedelta(days=7)
    settings.STACKBONE_HISTORY_RETENTION = "10m"
    rolled_until = SweepState.objects.get().rolled_until
    assert sweeper.history_cutoff(now) == insights.floor_span(rolled_until - insights.RECOUNT_WINDOW)


# --- a clock that jumps ahead ------------------------------------------------------------------


def database_now() -> datetime:
    """The database's own clock (time-machine moves only Python's)."""
    value = SweepState.objects.annotate(db_now=Now()).values_list("db_now", flat=True).first()
    assert isinstance(value, datetime)
    return value


@pytest.mark.django_db
def test_rolled_until_never_passes_the_database_clock(clock) -> None:
    """The app's clock jumps hours past the database's: rolled_until stays at most at the
    database's clock, so events stamped once the clock is right again still count."""
    declare(a={"capacity": 2, "max_hold": "1h"})
    start_insights(clock)
    db_now = database_now()
    assert db_now > clock.now()  # the tests' clock starts in the past
    ahead = db_now - clock.now() + timedelta(hours=3)
    clock.advance(seconds=ahead.total_seconds())
    roll_up_until_done(clock)
    rolled_until = SweepState.objects.get().rolled_until
    assert rolled_until <= insights.floor_minute(database_now() - insights.ROLLUP_GRACE)
    assert rolled_until >= insights.floor_minute(db_now - insights.ROLLUP_GRACE)


# --- the ETA's input ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_grant_rates_use_only_minutes_the_rollup_counted(clock, django_assert_num_queries) -> None:
    limit = declare(a={"capacity": 1, "max_hold": "1h"})["a"]
    start_insights(clock)  # 9:01
    history = History("a", clock)
    for _ in range(12):  # a grant at the start of each minute, 9:01 to 9:12
        history.at_once()
        clock.advance(minutes=1)
    roll_up_all(clock)  # 9:14:31: every minute to 9:13 rolled up
    clock.advance(seconds=15)  # 9:14:46: the window is 9:04 to 9:13
    assert insights.grant_rates([limit.id], now=clock.now()) == {limit.id: 9 / 600}
    # The rollup lags 5 minutes (rolled_until 9:09): the window's covered part is 9:04 to 9:09.
    SweepState.objects.update(rolled_until=F("rolled_until") - 5 * insights.MINUTE)
    with django_assert_num_queries(1):
        assert insights.grant_rates([limit.id], now=clock.now()) == {limit.id: 5 / 300}
    # Lagging by the whole window: no figure rather than a false 0.
    SweepState.objects.update(rolled_until=F("rolled_until") - 20 * insights.MINUTE)
    assert insights.grant_rates([limit.id], now=clock.now()) == {limit.id: None}


# --- the reviewer's randomised check: totals equal the counts from the rows ---------------------


def expected(limit_id: int) -> dict[str, int]:
    slots = Slot.objects.filter(limit_id=limit_id)
    return {
        "grants": slots.count(),
        "queue_grants": slots.filter(queue_entry__isnull=False).count(),
        "released_by_workflow": slots.filter(state="released", freed_by="").count(),
        "released_by_operator": slots.filter(state="released").exclude(freed_by="").count(),
        "released_by_max_hold": slots.filter(state="expired").count(),
        "released_by_run_end": slots.filter(state="run_ended").count(),
        "lapses": slots.filter(state="lapsed").count(),
        "timeouts": QueueEntry.objects.filter(limit_id=limit_id, state="timed_out").count(),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(2))
def test_random_history_is_counted_exactly(clock, seed: int) -> None:
    rng = random.Random(seed)
    limits = declare(a={"capacity": 2, "max_hold": "3m"}, b={"capacity": 3, "max_hold": "2m", "per_key": 1})
    start_insights(clock)
    runs: list[tuple[str, str, str, str | None]] = []
    for n in range(1, 301):
        op = rng.random()
        if op < 0.35:
            name = rng.choice("ab")
            key = rng.choice(["", "k1", "k2", "k3"]) if name == "b" else None
            acquire(name, run_id=f"r{n}", request=f"q{n}", timeout=f"{rng.randint(20, 300)}s", key=key or None)
            runs.append((name, f"r{n}", f"q{n}", key))
        elif op < 0.5 and runs:
            name, run, request, key = rng.choice(runs)
            acquire(name, run_id=run, request=request, key=key or None)
        elif op < 0.65:
            live = list(Slot.objects.filter(state="busy").values_list("id", flat=True))
            if live:
                release(rng.choice(live), actor=rng.choice([None, None, "alice"]))
        elif op < 0.7 and runs:
            end_run(rng.choice(runs)[1])
        elif op < 0.8:
            sweep()
        clock.advance(seconds=rng.uniform(0.5, 20))
    clock.advance(minutes=5)
    for _ in range(21):
        sweep()
        clock.advance(seconds=15)
    for limit in limits.values():
        want = expected(limit.id)
        assert LimitTotals.objects.filter(limit=limit).values(*want).first() == want
        got = dict(LimitMinute.objects.filter(limit=limit, grants__gt=0).values_list("minute", "grants"))
        granted = Slot.objects.filter(limit=limit).values_list("granted_at", flat=True)
        assert got == dict(Counter(insights.floor_minute(at) for at in granted))
    spans = LimitKeySpan.objects.values("limit_id", "key").annotate(g=Sum("grants"))
    slots = Slot.objects.exclude(key="").values("limit_id", "key").annotate(g=Count("id"))
    assert {(r["limit_id"], r["key"]): r["g"] for r in spans} == {(r["limit_id"], r["key"]): r["g"] for r in slots}
