"""The ETA rule (limits.eta): one function for the run page, the CLI and the API."""

from __future__ import annotations

import pytest

from limits.eta import eta_seconds, eta_words, ordinal, run_eta_seconds


@pytest.mark.parametrize(
    ("place", "rate", "expected"),
    [
        (1, 1 / 60, 60),  # one grant a minute: the head waits a minute
        (3, 1 / 60, 180),
        (3, 0.05, 60),  # 3 / 0.05 is 60.00000000000001 in floats: still 60 s
        (1, 0.7, 2),  # 1.43 s, rounded up to whole seconds
        (41, 2.0, 21),
        (1, 1000.0, 1),  # never 0 s: the run is still waiting
    ],
)
def test_the_eta_is_the_place_over_the_recent_grant_rate_rounded_up(place: int, rate: float, expected: int) -> None:
    assert eta_seconds(place, rate) == expected


@pytest.mark.parametrize("rate", [None, 0.0])
def test_the_eta_is_unknown_when_nothing_was_granted_recently(rate: float | None) -> None:
    assert eta_seconds(5, rate) is None


def test_a_run_waiting_for_several_limits_waits_for_the_slowest() -> None:
    assert run_eta_seconds([90, 30, 600]) == 600
    assert run_eta_seconds([90]) == 90


def test_a_run_waiting_for_several_limits_has_no_estimate_if_one_of_them_has_none() -> None:
    assert run_eta_seconds([90, None]) is None
    assert run_eta_seconds([]) is None


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (None, "unknown"),
        (1, "under a minute"),
        (59, "under a minute"),
        (60, "about 1 min"),
        (89, "about 1 min"),
        (90, "about 2 min"),
        (240, "about 4 min"),
        (89 * 60, "about 89 min"),
        (90 * 60, "about 2 h"),
        (47 * 3600, "about 47 h"),
        (48 * 3600, "about 2 days"),
    ],
)
def test_the_eta_reads_rounded_for_people(seconds: int | None, words: str) -> None:
    assert eta_words(seconds) == words


@pytest.mark.parametrize(
    ("number", "text"),
    [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"), (13, "13th"), (21, "21st")]
    + [(22, "22nd"), (101, "101st"), (111, "111th"), (112, "112th"), (1000, "1000th")],
)
def test_places_read_as_ordinals(number: int, text: str) -> None:
    assert ordinal(number) == text
