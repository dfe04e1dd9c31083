"""The limit page's insights fragment: the chart's points, the figures shown, the ETA rate,
and a constant number of queries whatever the history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import insights, insights_views
from limits.models import LimitKeySpan, LimitMinute
from limits.services import acquire, release, set_capacity, sweep
from tests.factories import declare
from tests.insights.helpers import History, roll_up_all, start_insights
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client):
    client.force_login(make_user("vera"))
    return client


@pytest.fixture
def api(clock):
    limit = declare(api={"capacity": 2, "max_hold": "1h"})["api"]
    start_insights(clock)
    return limit


def test_the_hour_has_a_point_per_minute_from_its_sample(api, clock) -> None:
    """Each minute's sample is taken at its first sweep: busy 1, then 2, then 2 and 1 waiting."""
    minute = insights.floor_minute(clock.now())
    sweep()  # 0 busy
    clock.advance(minutes=1)
    acquire("api", run_id="a")
    sweep()
    clock.advance(minutes=1)
    acquire("api", run_id="b")
    sweep()
    clock.advance(minutes=1)
    acquire("api", run_id="c")  # waits
    set_capacity("api", 3, actor="alice")  # c is reserved at once
    sweep()
    clock.advance(minutes=1)
    points = insights.backlog_points(api, now=clock.now())["hour"]
    assert len(points) == 60
    assert points[-1].at == minute + timedelta(minutes=3)
    got = [(p.busy, p.reserved, p.waiting, p.capacity) for p in points[-4:]]
    assert got == [(0, 0, 0, 2), (1, 0, 0, 2), (2, 0, 0, 2), (2, 1, 0, 3)]
    assert all(p.busy is None for p in points[:-5])  # before insights began: no sample, a gap


def test_a_day_point_is_the_average_of_its_ten_minutes(api, clock) -> None:
    start = insights.floor_minute(clock.now()) - timedelta(hours=3)
    span = start.replace(minute=start.minute - start.minute % 10)
    LimitMinute.objects.bulk_create(
        [
            LimitMinute(limit=api, minute=span + timedelta(minutes=i), busy=i, reserved=0, waiting=2 * i, capacity=2)
            for i in range(4)
        ]
    )
    day = insights.backlog_points(api, now=clock.now())["day"]
    assert len(day) == 144
    point = next(p for p in day if p.at == span)
    assert (point.busy, point.waiting, point.capacity) == (1.5, 3.0, 2.0)  # 4 samples of 10


def test_a_point_carries_its_minutes_peaks_and_a_day_point_the_largest(api, clock) -> None:
    """The burst the samples missed: a minute sampled at 0 waiting whose peak was 14 is drawn
    with 14; a ten-minute point keeps the largest peak of its minutes, not their average."""
    current = insights.floor_minute(clock.now())
    span = current.replace(minute=current.minute - current.minute % 10) - timedelta(minutes=30)
    minute = current - timedelta(minutes=2)
    rows = [
        LimitMinute(limit=api, minute=minute, busy=1, reserved=0, waiting=0, capacity=2, waiting_peak=14, in_use_peak=2)
    ]
    rows += [
        LimitMinute(
            limit=api,
            minute=span + timedelta(minutes=i),
            busy=1,
            reserved=0,
            waiting=0,
            capacity=2,
            waiting_peak=peak,
            in_use_peak=1,
        )
        for i, peak in enumerate([3, 9, 0, None])
    ]
    LimitMinute.objects.bulk_create(rows)
    points = insights.backlog_points(api, now=clock.now())
    hour = next(p for p in points["hour"] if p.at == minute)
    assert (hour.waiting, hour.waiting_peak, hour.in_use_peak) == (0, 14, 2)
    day = next(p for p in points["day"] if p.at == span)
    assert (day.waiting, day.waiting_peak, day.in_use_peak) == (0, 9, 1)
    chart = insights_views.chart("Last hour", points["hour"], clock.now(), "1-minute points")
    assert chart.waiting.top == 20 and chart.waiting.peak  # the scale fits the peak, drawn as a line
    assert chart.in_use.peak and "peak 14 waiting, 2 in use" in chart.summary


def test_the_chart_draws_gaps_and_scales_to_the_capacity() -> None:
    assert insights_views.nice_top(0) == 1
    assert insights_views.nice_top(7) == 8
    assert insights_views.nice_top(11) == 12
    assert insights_views.nice_top(41) == 50
    assert insights_views.nice_top(200) == 200
    values = [None, (2.0, 0.0), (4.0, 0.0), None, (1.0, 0.0)]
    path = insights_views.area(values, 4, 100)
    assert path.count("M") == 2  # two runs of points: the gap is not drawn over
    assert path.startswith("M150.0,50.0 L300.0,0.0 L300.0,100.0 L150.0,100.0 Z")


def test_the_fragment_shows_the_percentiles_and_the_chart(api, clock, viewer_client) -> None:
    set_capacity("api", 1, actor="alice")
    history = History("api", clock)
    history.at_once()
    for _ in range(3):
        history.waits(60)
    roll_up_all(clock)
    sweep()
    response = viewer_client.get("/studio/limits/api/insights/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Time to grant · Last hour" in html
    assert "p50 <b data-p50>≤ 1 min</b>" in html  # 3 of 4 waited 60 s: the 2nd is 60 s
    assert "All 4 grants (granted at once: 0 s)" in html
    assert "The 3 that waited in the queue (joining it to the grant)" in html
    assert "p50 <b data-queued-p50>≤ 1 min</b>" in html and "p95 <b data-queued-p95>≤ 1 min</b>" in html
    assert html.count("<svg") == 4 and 'class="area busy"' in html
    assert "style=" not in html and "<script" not in html  # the CSP forbids inline style and script


def test_the_fragment_answers_unknown_limits_with_404(viewer_client) -> None:
    assert viewer_client.get("/studio/limits/nope/insights/").status_code == 404


def test_the_limit_page_loads_the_fragment(api, viewer_client) -> None:
    html = viewer_client.get("/studio/limits/api/").content.decode()
    assert 'hx-get="/studio/limits/api/insights/"' in html


@pytest.mark.parametrize("hours", [1, 30])
def test_the_fragment_is_a_constant_number_of_queries(api, clock, viewer_client, hours) -> None:
    start = insights.floor_minute(clock.now()) - timedelta(hours=hours)
    LimitMinute.objects.bulk_create(
        [
            LimitMinute(limit=api, minute=start + timedelta(minutes=i), busy=1, reserved=0, waiting=0, capacity=2)
            for i in range(hours * 60)
        ],
        ignore_conflicts=True,  # the first sweep sampled the current minute
    )
    viewer_client.get("/studio/limits/api/insights/")
    with CaptureQueriesContext(connection) as queries:
        assert viewer_client.get("/studio/limits/api/insights/").status_code == 200
    assert len(queries) == 5  # session, user, limit, percentiles, samples


@pytest.mark.parametrize("keys", [2, 40])
def test_the_fragment_of_a_limit_with_keys_is_two_queries_more(clock, viewer_client, keys) -> None:
    declare(k={"capacity": 100, "max_hold": "1h", "per_key": 1})
    start_insights(clock)
    for i in range(keys):
        acquire("k", run_id=f"r{i}", key=f"key-{i}")
    roll_up_all(clock)
    with CaptureQueriesContext(connection) as queries:
        assert viewer_client.get("/studio/limits/k/insights/").status_code == 200
    assert len(queries) == 7  # session, user, limit, percentiles, samples, top keys, their spans


def test_per_key_figures_on_a_known_history(clock, viewer_client) -> None:
    """acme: one grant at once, one after 5 s; globex waits behind them, granted nothing."""
    limit = declare(k={"capacity": 1, "max_hold": "1h", "per_key": 1})["k"]
    start_insights(clock)
    first = acquire("k", run_id="a1", key="acme").slot_id
    assert acquire("k", run_id="a2", request="q-a2", key="acme").state == "waiting"
    clock.advance(seconds=5)
    assert release(first)
    assert acquire("k", run_id="a2", request="q-a2", key="acme").state == "busy"
    assert acquire("k", run_id="g1", key="globex").state == "waiting"
    roll_up_all(clock)
    limit.refresh_from_db()
    figures = insights.key_wait_figures(limit, now=clock.now())
    assert [(k.key, k.waiting) for k in figures] == [("globex", 1), ("acme", 0)]
    acme = figures[1]
    for window in (acme.hour, acme.day):
        assert (window.grants, window.waited, window.p50, window.p95) == (2, 1, 0.0, 5.0)
    assert figures[0].day.grants == 0 and figures[0].day.p50 is None
    html = viewer_client.get("/studio/limits/k/insights/").content.decode()
    assert '<tr data-key="acme">' in html
    assert '<span class="nowrap">0 s</span> · <span class="nowrap">≤ 5 s</span>' in html


def test_key_spans_are_added_once_per_minute(clock) -> None:
    """Never: a minute's keyed grants added twice to their span (a second pass adds nothing)."""
    limit = declare(k={"capacity": 10, "max_hold": "1h", "per_key": 5})["k"]
    start_insights(clock)
    for i in range(3):
        acquire("k", run_id=f"r{i}", key="acme")
        clock.advance(minutes=1)
    roll_up_all(clock)
    assert insights.roll_up(clock.now()) == 0
    spans = LimitKeySpan.objects.filter(limit=limit, key="acme")
    assert sum(spans.values_list("grants", flat=True)) == 3


def test_grant_rates_read_the_last_ten_rolled_up_minutes_in_one_query(clock, django_assert_num_queries) -> None:
    limits = declare(
        a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"}, c={"capacity": 1, "max_hold": "1h"}
    )
    ids = [limit.pk for limit in limits.values()]
    start_insights(clock)  # 9:01
    history = History("a", clock)
    for _ in range(12):  # a grant at the start of each minute, 9:01 to 9:12
        history.at_once()
        clock.advance(minutes=1)
    acquire("b", run_id="once")  # 9:13
    roll_up_all(clock)  # 9:14:31: every minute to 9:13 rolled up
    clock.advance(seconds=15)  # 9:14:46: the window is 9:04 to 9:13
    with django_assert_num_queries(1):
        rates = insights.grant_rates(ids, now=clock.now())
    assert rates == {limits["a"].pk: 9 / 600, limits["b"].pk: 1 / 600, limits["c"].pk: None}
    rates = insights.grant_rates(ids, now=clock.now() - timedelta(minutes=3))  # 9:01 to 9:10
    assert rates == {limits["a"].pk: 10 / 600, limits["b"].pk: None, limits["c"].pk: None}
    assert insights.grant_rates(ids, now=clock.now() + timedelta(minutes=30)) == dict.fromkeys(ids)
    assert insights.grant_rates([]) == {}
