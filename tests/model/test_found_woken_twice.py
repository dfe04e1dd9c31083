"""Found by the model test on PostgreSQL (issue 26), kept as a regression test: a run that joins a
queue and is granted at once in the same call is not woken for that grant (it resumes with its
slot), but it is still woken for another of its waits that the same grant timed out. The SQL home
of the join (limits_acquire_group) removed every mention of the run from the runs to wake; the
Python rules remove one, and so must the function.
"""

from __future__ import annotations

import pytest

from limits.models import QueueEntry
from limits.services import acquire, acquire_group, release
from tests.factories import declare

pytestmark = pytest.mark.django_db


def test_a_run_granted_at_once_is_still_woken_for_its_other_wait_that_timed_out(
    clock, woken, django_capture_on_commit_callbacks
) -> None:
    declare(a={"capacity": 1, "max_hold": "1h"}, c={"capacity": 1, "max_hold": "1h"})
    on_a = acquire("a", run_id="r8").slot_id
    acquire("c", run_id="r7")
    assert acquire_group(["c", "a"], run_id="g", request="g").state == "waiting"  # a and c go together now
    assert acquire("c", run_id="r1", request="r1:c", timeout=500).state == "waiting"
    release(on_a)  # a has room; g still waits for c
    clock.advance(seconds=1)  # r1's wait for c is past its deadline, with no sweep yet
    with django_capture_on_commit_callbacks(execute=True):
        mine = acquire("a", run_id="r1", request="r1:a")  # joins a's queue behind g, granted at once
    assert mine.state == "busy"
    assert QueueEntry.objects.get(request="r1:c").state == "timed_out"
    assert "r1" in woken  # to raise its SlotTimeoutError for c
