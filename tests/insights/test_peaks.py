"""Issue 30: the chart sampled each limit once a minute and missed a burst of 14 runs that came
and went between two samples. insights.minute_peaks derives, from the history rows the rollup
recounts, the most runs waiting and slots in use at any instant of each minute.

What must never happen: a burst that joined and left the queue (or took and gave back slots)
between two samples reads as 0 for its minute."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from limits import insights
from limits.insights.peaks import peak_params, record_peaks_sql
from limits.models import LimitMinute
from limits.services import acquire, release, sweep
from tests.conftest import requires_postgres
from tests.factories import declare
from tests.insights.helpers import start_insights

pytestmark = pytest.mark.django_db


def test_a_burst_of_14_between_two_samples_is_its_minutes_peak(clock) -> None:
    """voice-calls (capacity 1) is held; 20 s after the minute's sample 14 runs join its queue,
    and over the next 20 s each is granted the slot, confirms and gives it back; the next
    minute's sample finds the queue empty again. Both samples read 0 waiting; the peak is 14."""
    limit = declare(voice_calls={"capacity": 1, "max_hold": "45m"})["voice-calls"]
    start_insights(clock)
    minute = insights.floor_minute(clock.now())
    holder = acquire("voice-calls", run_id="holder").slot_id
    sweep()  # the minute's sample: 1 busy, 0 waiting
    clock.advance(seconds=20)
    for n in range(14):
        assert acquire("voice-calls", run_id=f"burst-{n}", request=f"req-{n}", timeout="1h").state == "waiting"
    for n in range(14):
        clock.advance(seconds=1.4)
        assert release(holder)
        confirmed = acquire("voice-calls", run_id=f"burst-{n}", request=f"req-{n}")
        assert confirmed.state == "busy"
        holder = confirmed.slot_id
    assert release(holder)
    clock.advance(minutes=1)
    sweep()  # the next minute's sample: nothing waiting, nothing in use
    samples = dict(LimitMinute.objects.filter(limit=limit).values_list("minute", "waiting"))
    assert samples[minute] == 0 and samples[minute + timedelta(minutes=1)] == 0
    peaks = insights.minute_peaks(minute - timedelta(minutes=15), minute + timedelta(minutes=2))
    assert peaks[(limit.id, minute)] == insights.Peak(waiting=14, in_use=1)
    assert (limit.id, minute + timedelta(minutes=1)) not in peaks  # nothing changed in it


def test_slots_taken_and_given_back_between_two_samples_are_their_minutes_peak(clock) -> None:
    """partner-api (capacity 20): 2 runs hold a slot from before the window; 14 more take one
    30 s into a minute and give it back 10 s later. In use peaks at 16; and a run that was
    waiting before the window began counts from the window's first instant."""
    limit = declare(partner_api={"capacity": 20, "max_hold": "45m"})["partner-api"]
    held = [acquire("partner-api", run_id=f"early-{n}").slot_id for n in range(2)]
    start_insights(clock)
    clock.advance(minutes=20)
    minute = insights.floor_minute(clock.now())
    sweep()
    clock.advance(seconds=30)
    slots = [acquire("partner-api", run_id=f"burst-{n}").slot_id for n in range(14)]
    clock.advance(seconds=10)
    for slot in [*slots, *held]:
        assert release(slot)
    peaks = insights.minute_peaks(minute - timedelta(minutes=10), minute + timedelta(minutes=1))
    assert peaks[(limit.id, minute)].in_use == 16
    assert peaks[(limit.id, minute)].waiting is None
    assert peaks[(limit.id, minute - timedelta(minutes=10))] == insights.Peak(waiting=None, in_use=2)  # the count at a


def test_the_peaks_of_a_window_are_one_statement(clock, django_assert_num_queries) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    acquire("voice-calls", run_id="holder")
    for n in range(5):
        acquire("voice-calls", run_id=f"w{n}", timeout="1h")
    now = insights.floor_minute(clock.now())
    with django_assert_num_queries(1):
        peaks = insights.minute_peaks(now - timedelta(minutes=15), now + timedelta(minutes=1))
    assert [peak.waiting for peak in peaks.values()] == [5]


# --- stored with the sample: insights.record_peaks ------------------------------------------------


def _row(limit, minute) -> tuple[int | None, int | None, int | None]:
    row = LimitMinute.objects.get(limit=limit, minute=minute)
    return row.waiting, row.waiting_peak, row.in_use_peak


def test_the_next_minutes_sample_stores_the_burst_as_its_minutes_peak(clock) -> None:
    """The burst of 14 of the first test, through the sweep alone: the minute's row keeps its
    sample (0 waiting) and, once the next minute is sampled, its peaks (14 waiting, 1 in use)."""
    limit = declare(voice_calls={"capacity": 1, "max_hold": "45m"})["voice-calls"]
    start_insights(clock)
    clock.advance(minutes=1)
    sweep()  # a sample with the queue's next position: the reference of the minute after next
    clock.advance(minutes=1)
    minute = insights.floor_minute(clock.now())
    holder = acquire("voice-calls", run_id="holder").slot_id
    sweep()
    clock.advance(seconds=20)
    for n in range(14):
        assert acquire("voice-calls", run_id=f"burst-{n}", request=f"req-{n}", timeout="1h").state == "waiting"
    for n in range(14):
        clock.advance(seconds=1.4)
        assert release(holder)
        holder = acquire("voice-calls", run_id=f"burst-{n}", request=f"req-{n}").slot_id
    assert release(holder)
    assert _row(limit, minute) == (0, None, None)  # not yet: the peak is set by the next sample
    clock.advance(minutes=1)
    sweep()
    assert _row(limit, minute) == (0, 14, 1)
    next_minute = minute + timedelta(minutes=1)
    assert _row(limit, next_minute) == (0, None, None)
    clock.advance(minutes=1)
    sweep()
    assert _row(limit, next_minute) == (0, 0, 0)  # nothing changed in it: the count it began with


def test_the_stored_peaks_are_those_of_the_whole_history(clock) -> None:
    """Never: a stored peak that differs from minute_peaks, which reads every waiting run and the
    whole history. Eight minutes of a capacity-2 limit: runs that wait from before a minute
    began, join and leave within it, time out, are granted at once, and slots freed by the run
    or an operator; both counts change in every minute."""
    limit = declare(api={"capacity": 2, "max_hold": "45m"})["api"]
    start_insights(clock)
    clock.advance(minutes=1)
    sweep()
    clock.advance(minutes=1)
    first = insights.floor_minute(clock.now())
    held: list[str] = []
    waiting: list[tuple[str, str]] = []
    for m in range(8):
        sweep()
        clock.advance(seconds=5)
        for n in range(m % 3 + 1):
            outcome = acquire("api", run_id=f"m{m}-{n}", request=f"q{m}-{n}", timeout="25s" if n == 2 else "1h")
            if outcome.state == "busy":
                held.append(outcome.slot_id)
            else:
                waiting.append((f"m{m}-{n}", f"q{m}-{n}"))
            clock.advance(seconds=7)
        if held:
            assert release(held.pop(0), actor="alice" if m % 2 else None)
        clock.advance(seconds=10)
        for run_id, request in list(waiting):
            outcome = acquire("api", run_id=run_id, request=request)
            if outcome.state == "busy":
                held.append(outcome.slot_id)
                waiting.remove((run_id, request))
            elif outcome.state != "waiting":
                waiting.remove((run_id, request))
        clock.advance(seconds=60 - 5 - 7 * (m % 3 + 1) - 10)
    sweep()
    expected = insights.minute_peaks(first - timedelta(minutes=1), first + timedelta(minutes=8))
    for m in range(8):
        minute = first + timedelta(minutes=m)
        want = expected.get((limit.id, minute), insights.Peak(None, None))
        row = LimitMinute.objects.get(limit=limit, minute=minute)
        # None: that count did not change in the minute; it kept what its sample (at :00) read.
        waiting_peak = row.waiting if want.waiting is None else want.waiting
        in_use_peak = (row.busy or 0) + (row.reserved or 0) if want.in_use is None else want.in_use
        assert (row.waiting_peak, row.in_use_peak) == (waiting_peak, in_use_peak), minute
    peaks = list(LimitMinute.objects.filter(limit=limit, waiting__isnull=False).values_list("waiting_peak", "waiting"))
    assert any(peak is not None and peak > sampled for peak, sampled in peaks)  # a burst the samples missed


def test_a_limit_sampled_for_the_first_time_has_no_peak_yet(clock) -> None:
    """The peak needs a sample at least a minute before its minute (where the queue's new runs
    begin): a limit declared now has none for its first minute, then has one."""
    start_insights(clock)
    limit = declare(fresh={"capacity": 1, "max_hold": "45m"})["fresh"]
    sweep()
    minute = insights.floor_minute(clock.now())
    for _ in range(2):
        clock.advance(minutes=1)
        sweep()
    assert _row(limit, minute)[1:] == (None, None)
    assert _row(limit, minute + timedelta(minutes=1))[1:] == (0, 0)


@pytest.mark.parametrize("limits", [2, 20])
def test_a_sample_with_its_peaks_is_three_statements_whatever_the_limits(clock, limits) -> None:
    declare(**{f"l{n}": {"capacity": 2, "max_hold": "45m"} for n in range(limits)})
    start_insights(clock)
    clock.advance(minutes=1)
    sweep()
    clock.advance(minutes=1)
    for n in range(limits):
        acquire(f"l{n}", run_id=f"r{n}")
    clock.advance(minutes=1)
    with CaptureQueriesContext(connection) as queries:
        assert insights.sample(insights.floor_minute(clock.now()))
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) == 3  # claim the minute, sample, the peaks of the minute before
    peaks = LimitMinute.objects.filter(
        minute=insights.floor_minute(clock.now()) - timedelta(minutes=1), limit__name__startswith="l"
    )
    assert sorted(peaks.values_list("in_use_peak", flat=True)) == [1] * limits


@pytest.mark.postgres
@requires_postgres
def test_on_postgresql_the_peaks_never_read_the_queue_before_the_minute(clock) -> None:
    """A queue of 20,000 runs that joined an hour ago and 3 that joined in the minute: EXPLAIN
    ANALYZE of the peaks' statement shows no scan of the queue returning more than the new runs
    (the tail from the earlier sample's position), and no JIT (record_peaks turns it off)."""
    limit = declare(voice_calls={"capacity": 1, "max_hold": "45m"})["voice-calls"]
    start_insights(clock)
    acquire("voice-calls", run_id="holder")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                                           enqueued_at, deadline, timeout_ms)
            SELECT %s, 'bulk-' || g, 'bulk-' || g, '', 1000 + g, '', 1, 'waiting', %s, %s, 86400000
            FROM generate_series(1, 20000) AS g
            """,
            [limit.id, clock.now() - timedelta(hours=1), clock.now() + timedelta(days=1)],
        )
        cursor.execute(
            "UPDATE limits_limit SET waiting_count = waiting_count + 20000, next_position = 21001 WHERE id = %s",
            [limit.id],
        )
        cursor.execute("ANALYZE limits_queueentry")
    sweep()  # the reference sample: next position 21001
    clock.advance(minutes=2)
    minute = insights.floor_minute(clock.now())
    sweep()
    clock.advance(seconds=10)
    for n in range(3):
        assert acquire("voice-calls", run_id=f"new-{n}", timeout="1h").state == "waiting"
    clock.advance(minutes=1)
    params = peak_params(minute)
    with transaction.atomic(), connection.cursor() as cursor:
        insights.no_jit(cursor)  # as record_peaks runs it: its estimate sits near jit_above_cost
        cursor.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + record_peaks_sql(), params)
        plan = [row[0] for row in cursor.fetchall()]
    text = "\n".join(plan)
    queue_scans = [line for line in plan if "Scan" in line and "limits_queueentry" in line]
    rows = [int(n) for line in queue_scans for n in re.findall(r"actual time=\S+ rows=(\d+)", line)]
    assert queue_scans and max(rows) <= 3, text
    # No sequential scan of the live queue (where the 20,000 wait). The history partition is empty
    # here, and the planner may scan an empty partition sequentially (it costs it 0 or 1 page):
    # that reads nothing.
    assert "Seq Scan on limits_queueentry_live" not in text and "JIT" not in text, text
    history_scans = [line for line in queue_scans if "Seq Scan on limits_queueentry_history" in line]
    assert all(re.search(r"actual time=\S+ rows=0 loops", line) for line in history_scans), text
    assert _row(limit, minute) == (20000, 20003, 1)
