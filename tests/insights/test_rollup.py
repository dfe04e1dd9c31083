"""The per-minute rollup (limits.insights): exact time-to-grant figures on a known history,
catch-up, idempotence, retention, and totals that never go back."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from limits import insights
from limits.models import LimitMinute, LimitTotals, SweepState
from limits.services import acquire, sweep
from tests.factories import declare
from tests.insights.helpers import History, roll_up_all, start_insights

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(clock):
    limit = declare(api={"capacity": 1, "max_hold": "1h"})["api"]
    start_insights(clock)
    return limit


def known_history(clock) -> History:
    """20 grants: 4 at once (0 s), 14 after a 5 s wait, 2 after a 60 s wait."""
    history = History("api", clock)
    for _ in range(4):
        history.at_once()
    for _ in range(14):
        history.waits(5)
    for _ in range(2):
        history.waits(60)
    return history


def test_p50_and_p95_are_exact_on_a_known_history(api, clock) -> None:
    known_history(clock)
    roll_up_all(clock)
    figures = insights.wait_figures(api, now=clock.now())
    for window in ("hour", "day"):
        got = figures[window]
        # nearest rank: the 10th of 20 waits is 5 s, the 19th is 60 s
        assert (got.grants, got.waited, got.p50, got.p95) == (20, 16, 5.0, 60.0)
        assert got.mean_s == pytest.approx((14 * 5 + 2 * 60) / 20)
        # the 16 that waited: the 8th is 5 s, the 16th (ceil 0.95 x 16) 60 s
        assert (got.queued_p50, got.queued_p95) == (5.0, 60.0)
        assert got.queued_mean_s == pytest.approx((14 * 5 + 2 * 60) / 16)


def test_grants_made_at_once_count_as_no_wait(api, clock) -> None:
    history = History("api", clock)
    for _ in range(19):
        history.at_once()
    history.waits(30)
    roll_up_all(clock)
    hour = insights.wait_figures(api, now=clock.now())["hour"]
    assert (hour.grants, hour.waited, hour.p50, hour.p95) == (20, 1, 0.0, 0.0)
    # ... while the run that waited shows its 30 s in the queue's own percentiles
    assert (hour.queued_p50, hour.queued_p95, hour.queued_mean_s) == (30.0, 30.0, 30.0)


def test_the_queue_percentiles_leave_out_only_the_grants_made_at_once(api, clock) -> None:
    """10 at once, then 2 queue grants with no wait (0 s), 7 after 1 s, 1 after 15 s: over all
    20 grants p50 is 0 s (the 12 at 0 s), p95 1 s; over the 10 that waited, p50 1 s (the 5th:
    2 at 0 s, then 1 s) and p95 15 s (the 10th)."""
    history = History("api", clock)
    for _ in range(10):
        history.at_once()
    for seconds in (0, 0, 1, 1, 1, 1, 1, 1, 1, 15):
        history.waits(seconds)
    roll_up_all(clock)
    hour = insights.wait_figures(api, now=clock.now())["hour"]
    assert (hour.grants, hour.waited, hour.p50, hour.p95) == (20, 10, 0.0, 1.0)
    assert (hour.queued_p50, hour.queued_p95) == (1.0, 15.0)
    assert hour.queued_mean_s == pytest.approx(22 / 10)


def test_the_windows_keep_only_their_minutes(api, clock) -> None:
    known_history(clock)
    roll_up_all(clock)
    clock.advance(hours=2)
    figures = insights.wait_figures(api, now=clock.now())
    assert figures["hour"].grants == 0 and figures["hour"].p50 is None
    assert figures["day"].grants == 20


def test_waits_past_the_last_bucket_read_as_infinite() -> None:
    counts = [0] * len(insights.BUCKET_FIELDS)
    counts[0] = 1
    assert insights.percentile_bound(counts, 3, 0.5) == math.inf
    assert insights.percentile_bound(counts, 3, 0.2) == 0.0
    assert insights.percentile_bound(counts, 0, 0.5) is None


def test_each_minute_is_rolled_up_once_and_totals_add_it_once(api, clock) -> None:
    """Never: a minute counted twice into the totals (a second sweep, or the same minute again)."""
    known_history(clock)
    roll_up_all(clock)
    totals = LimitTotals.objects.get(limit=api)
    assert (totals.grants, totals.queue_grants) == (20, 16)
    assert insights.roll_up(clock.now()) == 0
    sweep()
    # Rolling the minutes up again (rolled_until moved back, as if a racing sweep had not seen
    # the last pass) recounts them: the minute rows are set to the same counts, and the totals
    # add only the differences (none).
    rows = list(LimitMinute.objects.filter(limit=api).order_by("minute").values())
    SweepState.objects.update(rolled_until=F("rolled_until") - insights.MINUTE)
    assert insights.roll_up(clock.now()) == 1
    assert list(LimitMinute.objects.filter(limit=api).order_by("minute").values()) == rows
    totals.refresh_from_db()
    assert (totals.grants, totals.queue_grants) == (20, 16)


def test_catch_up_is_bounded_per_pass_and_complete_in_the_end(api, clock) -> None:
    history = History("api", clock)
    for _ in range(25):  # a grant in each of 25 minutes
        history.at_once()
        clock.advance(minutes=1)
    clock.advance(seconds=31)
    passes = []
    while rolled := insights.roll_up(clock.now()):
        passes.append(rolled)
    assert passes == [10, 10, 7]  # 8:59 (the first sweep's minute) to 9:25
    assert LimitTotals.objects.get(limit=api).grants == 25
    assert LimitMinute.objects.filter(limit=api, grants=1).count() == 25


def test_a_long_stop_skips_to_the_last_hour(api, clock) -> None:
    History("api", clock).at_once()
    clock.advance(hours=5)
    while insights.roll_up(clock.now()):
        pass
    state = SweepState.objects.get()
    assert state.rolled_until == insights.floor_minute(clock.now() - insights.ROLLUP_GRACE)
    assert LimitTotals.objects.filter(limit=api).count() == 0  # the grant 5 h ago is skipped


def test_a_rollup_pass_is_a_constant_number_of_queries(clock) -> None:
    declare(**{f"l{i}": {"capacity": 1, "max_hold": "1h"} for i in range(3)})
    start_insights(clock)
    clock.advance(seconds=31)
    insights.record(clock.now())  # caught up: each pass below samples and rolls up one minute
    for i in range(3):
        acquire(f"l{i}", run_id=f"a{i}")
    clock.advance(minutes=1)
    with CaptureQueriesContext(connection) as few:
        insights.record(clock.now())
    declare(**{f"l{i}": {"capacity": 1, "max_hold": "1h"} for i in range(40)})
    for i in range(3, 40):
        acquire(f"l{i}", run_id=f"a{i}")
    clock.advance(minutes=1)
    with CaptureQueriesContext(connection) as many:
        insights.record(clock.now())
    assert len(few) == len(many)
    assert LimitTotals.objects.filter(grants=1).count() == 40


def test_samples_are_taken_once_a_minute(api, clock) -> None:
    History("api", clock).at_once()
    sweep()
    clock.advance(seconds=15)
    acquire("api", run_id="x")  # waits
    sweep()
    row = LimitMinute.objects.get(limit=api, minute=insights.floor_minute(clock.now()))
    assert (row.busy, row.reserved, row.waiting, row.capacity) == (1, 0, 0, 1)  # the first sample
    clock.advance(minutes=1)
    sweep()
    row = LimitMinute.objects.get(limit=api, minute=insights.floor_minute(clock.now()))
    assert (row.busy, row.reserved, row.waiting) == (1, 0, 1)


def test_minutes_older_than_the_retention_are_purged_in_batches(api, clock, monkeypatch) -> None:
    monkeypatch.setattr("limits.insights.rollups.PURGE_BATCH", 3)
    start = insights.floor_minute(clock.now()) - insights.INSIGHTS_RETENTION - timedelta(minutes=10)
    LimitMinute.objects.bulk_create(
        [LimitMinute(limit=api, minute=start + i * insights.MINUTE, busy=0) for i in range(8)]
    )
    cutoff = clock.now() - insights.INSIGHTS_RETENTION
    assert insights.purge(cutoff) == 3
    assert insights.purge(cutoff) == 3
    assert insights.purge(cutoff) == 2
    assert insights.purge(cutoff) == 0
    assert LimitMinute.objects.filter(minute__lt=cutoff).count() == 0
    assert LimitMinute.objects.filter(limit=api).exists()  # the recent minutes stay
