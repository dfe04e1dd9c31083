"""end_run's first read, raw SQL (issue 17: every run's end asks it): it must name exactly the
limits the ORM's definition names: where the run waits, holds a reservation, or holds a busy
slot tied to the run; never a limit where it holds an untied busy slot or only freed ones."""

from __future__ import annotations

import pytest
from django.db.models import Q

from limits import services
from limits.engine.python import _limits_ending_with
from limits.models import QueueEntry, Slot
from tests.factories import assert_counters_match_rows, declare

pytestmark = pytest.mark.django_db


def orm_definition(run_id: str) -> set[int]:
    waiting = QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING)
    ending = Slot.objects.filter(run_id=run_id).filter(
        Q(state=Slot.State.RESERVED) | Q(state=Slot.State.BUSY, ends_with_run=True)
    )
    return set(waiting.values_list("limit_id", flat=True)) | set(ending.values_list("limit_id", flat=True))


def test_the_raw_read_names_the_limits_the_orm_definition_names(clock) -> None:
    limits = declare(**{name: {"capacity": 1, "max_hold": "1h"} for name in "abcdef"})
    ids = {name: limit.id for name, limit in limits.items()}
    # a: r waits behind another run.
    services.acquire("a", run_id="other", request="other:a")
    services.acquire("a", run_id="r", request="r:a")
    # b: r holds a reservation (the holder released while r waited).
    held = services.acquire("b", run_id="other", request="other:b").slot_id
    services.acquire("b", run_id="r", request="r:b")
    services.release(held)
    # c: a busy slot tied to r (with_limit); d: a busy slot that belongs to the work.
    tied = services.acquire("c", run_id="r", request="r:c").slot_id
    assert services.tie_to_run(tied, "r")
    services.acquire("d", run_id="r", request="r:d")
    # e: only freed slots of r; f: nothing of r, another run waits there.
    services.release(services.acquire("e", run_id="r", request="r:e").slot_id)
    services.acquire("f", run_id="other", request="other:f")
    services.acquire("f", run_id="third", request="third:f")

    assert _limits_ending_with("r") == orm_definition("r") == {ids["a"], ids["b"], ids["c"]}
    assert _limits_ending_with("third") == orm_definition("third") == {ids["f"]}
    assert _limits_ending_with("nobody") == orm_definition("nobody") == set()

    assert services.end_run("r") == 3
    assert _limits_ending_with("r") == orm_definition("r") == set()
    assert Slot.objects.get(request="r:d").state == Slot.State.BUSY  # untouched: the work's
    for name in limits:
        assert_counters_match_rows(name)
