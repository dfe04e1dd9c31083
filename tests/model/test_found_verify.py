"""Histories the engine writes by the rules, which `limits verify` (limits/verify/) reported as
broken. Found by the model test (tests/model/test_engine_model.py), kept as regression tests.

1. Several capacity changes at one instant (a raise that grants, then a lower): verify judged the
   grant against the capacity before the instant and the last one at it, not the highest in force
   during it ("the engine gets the benefit of the doubt" at a shared instant).
2. A deploy that lowers a declared per_key below what a key holds (9.4: lowering takes nothing
   back): verify skipped the pool check only after an operator's per-key change, so it judged the
   old grants against the new, smaller pool.
3. A replace at the instant its key's older run joined (SPEC 14.3, 14.5): the replaced run's row of
   history takes a new ticket, so check m judged it as joining behind the runs that joined after
   it, at the cap ("joined behind 3 waiting runs (max_waiting 3)"; seed 55 on PostgreSQL; with
   max_waiting_per_key, "joined behind N waiting runs of key").
"""

from __future__ import annotations

import pytest

from limits.services import acquire
from limits.verify import verify
from tests.factories import declare, queue

pytestmark = pytest.mark.django_db


def test_a_grant_under_a_capacity_raised_and_lowered_in_one_instant_is_not_a_violation(clock) -> None:
    declare(c={"capacity": 1, "max_hold": "1h"})
    acquire("c", run_id="r1")
    acquire("c", run_id="r2")  # waits
    declare(c={"capacity": 3, "max_hold": "1h"})  # r2 is granted
    declare(c={"capacity": 1, "max_hold": "1h"})  # lowered in the same instant: takes nothing back
    assert verify().ok, verify().violations


def test_slots_held_before_a_deploy_lowered_per_key_are_not_a_violation(clock) -> None:
    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 3})
    acquire("api", run_id="r1", key="t1")
    acquire("api", run_id="r2", key="t1")
    clock.advance(seconds=5)
    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 1})  # lowering takes nothing back (9.4)
    assert verify().ok, verify().violations


@pytest.mark.parametrize(
    "caps", [{"max_waiting": 3}, {"max_waiting_per_key": 1}], ids=["max_waiting", "max_waiting_per_key"]
)
def test_a_run_replaced_at_the_instant_it_joined_did_not_join_behind_the_cap(clock, caps) -> None:
    declare(c={"capacity": 1, "max_hold": "1h", "on_full": "replace", **caps})
    acquire("c", run_id="h", request="h")
    assert acquire("c", run_id="e", request="e", key="t1").state == "waiting"
    acquire("c", run_id="w2", request="w2", key="t2")
    acquire("c", run_id="w3", request="w3", key="t3")
    assert acquire("c", run_id="n", request="n", key="t1").state == "waiting"  # in e's place
    assert queue("c") == ["n", "w2", "w3"]
    assert verify().ok, verify().violations
