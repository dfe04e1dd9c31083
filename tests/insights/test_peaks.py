"""Issue 30: the chart sampled each limit once a minute and missed a burst of 14 runs that came
and went between two samples. insights.minute_peaks derives, from the history rows the rollup
recounts, the most runs waiting and slots in use at any instant of each minute.

What must never happen: a burst that joined and left the queue (or took and gave back slots)
between two samples reads as 0 for its minute."""

from __future__ import annotations

from datetime import timedelta

import pytest

from limits import insights
from limits.models import LimitMinute
from limits.services import acquire, release, sweep
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
