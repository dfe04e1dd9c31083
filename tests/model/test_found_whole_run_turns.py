"""SPEC 13.2 with 12.3: a start held back at the box's base does not hold back the younger runs of
its key on a fair limit. Found by the model test on PostgreSQL (seed 22; tests/model/
test_engine_model.py), kept as regression tests.

13.2: "Inside one key, arrival order is strict" and "no capacity stays free while some waiting run
could be granted". A run's start waiting for its bounds (request '<run>:start') that the base of
whole runs holds back (12.3) cannot be granted; a younger run of the same key that is not a start
can. Found: limits_fair_next left such a start out of the fair limit's stream, so the stream never
dealt with it, and limits_grant's left-to-fairness check (grant._Grant._left_to_fairness: "an
older run of its key waits that its stream has not dealt with yet") left the younger group to a
stream that would never reach it: it waited on two fair limits with room on both. The Python
track and the model's reference deal with the start (it is passed, SPEC 10.2) and grant the
younger run.
"""

from __future__ import annotations

import pytest

from limits import services
from limits.config import define_workspace
from limits.verify import verify
from tests.factories import holders, queue

pytestmark = pytest.mark.django_db

FAIR = {"capacity": 3, "max_hold": "1h", "share": "fair"}


def declare_with_base_one(**limits: dict[str, object]) -> None:
    services.sync_workspace(define_workspace(limits=limits, run_concurrency={"base": 1, "burst": 1.0}))


def test_a_younger_group_of_the_key_of_a_start_held_at_the_base_is_granted_on_two_fair_limits(clock) -> None:
    """b and c are fair with room; r0's start holds one slot of each for its whole run, the base
    (1). s's start (key t2) waits: whole runs at the base. y (key t2, not a start) asks b and c:
    nothing stops it, it is granted at once; s's start still waits."""
    declare_with_base_one(b=FAIR, c=FAIR)
    assert services.acquire_group(["c", "b"], run_id="r0", request="r0:start").state == "busy"
    assert services.acquire_group(["c", "b"], run_id="s", request="s:start", key="t2").state == "waiting"
    got = services.acquire_group(["c", "b"], run_id="y", request="y", key="t2")
    assert got.state == "busy"
    assert holders("b") == holders("c") == [("r0", "busy"), ("y", "busy")]
    assert queue("b") == queue("c") == ["s"]
    assert verify().ok, verify().violations


def test_a_younger_run_of_the_key_of_a_start_held_at_the_base_is_granted_when_a_slot_frees(clock) -> None:
    """The same through a settle: c (fair, capacity 2) is full, s's start (key t2) and then y (key
    t2) queue for b and c. A slot of c frees: s's start is held back at the base, y is granted."""
    declare_with_base_one(b=FAIR, c={**FAIR, "capacity": 2})
    assert services.acquire_group(["c", "b"], run_id="r0", request="r0:start").state == "busy"
    other = services.acquire("c", run_id="o", request="o").slot_id
    assert services.acquire_group(["c", "b"], run_id="s", request="s:start", key="t2").state == "waiting"
    assert services.acquire_group(["c", "b"], run_id="y", request="y", key="t2").state == "waiting"
    assert other is not None
    services.release(other)
    assert holders("b") == [("r0", "busy"), ("y", "reserved")]
    assert holders("c") == [("r0", "busy"), ("y", "reserved")]
    assert queue("b") == queue("c") == ["s"]
    assert verify().ok, verify().violations
