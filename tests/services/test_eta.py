"""The ETA rule (limits.eta): one function for the run page, the CLI and the API."""

from __future__ import annotations

import pytest

from limits.eta import FairKey, eta_seconds, eta_words, fair_order, ordinal, run_eta_seconds


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


# --- a fair limit's order (limits.eta.fair_order, SPEC 13.2 and 13.7) -----------------------------

TURN = 12  # a turn in pass units, for these tests (the engine's is PASS_STRIDE)


def key(name: str, *heads: int, in_use: int = 0, weight: int = 1, minimum: int = 0, pool: int | None = None,
        turns: float = 0, waiting: int | None = None) -> FairKey:  # fmt: skip
    return FairKey(
        key=name,
        in_use=in_use,
        weight=weight,
        minimum=minimum,
        pool=pool,
        fair_pass=int(turns * TURN),
        stride=TURN // weight,
        waiting=len(heads) if waiting is None else waiting,
        heads=list(heads),
    )


def walk(*keys: FairKey, room: int = 0, frees: tuple[str, ...] = (), rows: int = 100) -> list[str]:
    found = fair_order({k.key: k for k in keys}, room=room, frees=frees, rows=rows)
    return [f"{name}@{position}" for name, position in found.order]


def test_keys_under_their_min_come_first_then_the_smallest_share() -> None:
    assert walk(key("a", 1, 2, in_use=1), key("b", 3), key("m", 4, in_use=1, minimum=2), room=2, rows=2) == [
        "m@4",
        "b@3",
    ]


def test_ties_in_share_go_to_the_smaller_pass_then_to_the_oldest_run() -> None:
    assert walk(key("a", 1, turns=2), key("b", 2, turns=1), key("c", 3, turns=1), room=3) == ["b@2", "c@3", "a@1"]


def test_keys_take_turns_and_a_weight_of_3_takes_three() -> None:
    heavy = key("h", 1, 2, 3, 4, 5, 6, weight=3)
    light = key("l", 7, 8, 9)
    order = walk(heavy, light, room=0, frees=("x",) * 8, rows=8)
    assert order == ["h@1", "l@7", "h@2", "h@3", "h@4", "l@8", "h@5", "h@6"]


def test_without_room_the_slot_held_longest_frees_first() -> None:
    """a holds the oldest slot: freed, a is back at 0 and its run ties with b's on the pass, and
    came first; had b's slot been the oldest, b would have won."""
    assert walk(key("a", 1, in_use=1, turns=1), key("b", 2, in_use=1, turns=1), frees=("a", "b"), rows=1) == ["a@1"]
    assert walk(key("a", 1, in_use=1, turns=1), key("b", 2, in_use=1, turns=1), frees=("b", "a"), rows=1) == ["b@2"]


def test_a_full_pool_is_served_again_when_its_own_slot_frees() -> None:
    full = key("a", 1, 2, in_use=1, pool=1)
    assert walk(full, key("b", 3), room=1, frees=("z", "a"), rows=3) == ["b@3", "a@1", "a@2"]


def test_the_walk_stops_where_a_keys_next_run_was_not_read() -> None:
    found = fair_order({"a": key("a", 1, waiting=3), "b": key("b", 5, 6)}, room=4, frees=(), rows=4)
    assert found.order == [("a", 1), ("b", 5)] and found.short == "a"


def test_the_walk_leaves_its_keys_as_they_were() -> None:
    a = key("a", 1, 2)
    found = fair_order({"a": a}, room=2, frees=(), rows=2)
    assert (a.taken, a.in_use, a.fair_pass) == (0, 0, 0)
    assert (found.keys["a"].taken, found.keys["a"].in_use, found.keys["a"].fair_pass) == (2, 2, 2 * TURN)
