"""docs/engine.md: "the service tests and the Hypothesis model test run on both databases, so both
paths are held to the same rules". Found by the model test (tests/model/test_engine_model.py),
kept as a regression test: a workflow's release of a busy slot of a plain limit (or one where
nobody waits) was, on PostgreSQL, the fast path limits_release (limits/sql/engine.sql), which
settled that limit alone; the Python rules settle it with the other limits of the groups reserved
from it (limits.engine.keys.lock), so a stale wait on those limits timed out at once on SQLite and
only at the next sweep on PostgreSQL.
"""

from __future__ import annotations

import pytest

from limits.models import QueueEntry
from limits.services import acquire, acquire_group, release
from tests.factories import declare

pytestmark = pytest.mark.django_db


def test_a_release_settles_the_limits_of_the_groups_reserved_from_it_on_both_databases(clock) -> None:
    declare(p={"capacity": 2, "max_hold": "1h"}, x={"capacity": 1, "max_hold": "1h", "per_key": 1})
    holder = acquire("x", run_id="holder").slot_id
    acquire_group(["p", "x"], run_id="g", request="g")
    release(holder)  # g is reserved p and x
    acquire("x", run_id="w", request="w", timeout=500)  # waits behind g's reservation
    clock.advance(seconds=1)  # w's deadline has passed; no sweep yet
    busy = acquire("p", run_id="s").slot_id
    release(busy)  # p's settle takes in x, where g holds a reservation: w times out
    assert QueueEntry.objects.get(request="w").state == "timed_out"
