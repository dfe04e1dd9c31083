"""The bench's statement row for a replace (tests/bench/statements.replace_at_a_key, issue 47):
on PostgreSQL a replace at a key with many runs waiting is one engine call, one round trip, its
commit included, whatever it replaces (SPEC 14.3); the run layer then wakes the replaced runs
in one query of its own, after the commit."""

from __future__ import annotations

import pytest

from limits.models import QueueEntry, Slot
from tests.bench import statements
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def test_a_replace_at_a_key_with_many_waiting_is_one_call() -> None:
    declare(keyed={"capacity": 10, "max_hold": "1h", "per_key": 1})
    figures = statements.replace_at_a_key("keyed", waiting=200)
    assert (figures["state"], figures["engine_calls"], figures["under_lock"], figures["replaced"]) == (
        "waiting",
        1,
        1,
        200,
    )
    assert figures["statements"] <= 2  # the other: the run layer's wake of the 200 runs, one query after the commit
    assert not QueueEntry.objects.filter(state="waiting").exists()
    assert not Slot.objects.filter(state__in=["busy", "reserved"]).exists()
    assert_counters_match_rows("keyed")
