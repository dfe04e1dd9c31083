"""One slot id format, whoever mints it: Python (new_slot_id), SQLite's set-based grant, and the
PostgreSQL functions (a grant at once, and the grant to the head of the queue)."""

from __future__ import annotations

import re

import pytest

from limits import services
from limits.models import SLOT_ID_FORMAT, Slot, new_slot_id
from tests.factories import declare

pytestmark = pytest.mark.django_db


def test_every_path_that_grants_a_slot_mints_the_same_format(clock) -> None:
    declare(one={"capacity": 1, "max_hold": "1h"})
    at_once = services.acquire("one", run_id="a").slot_id
    services.acquire("one", run_id="b")
    services.release(at_once)
    from_queue = Slot.objects.get(run_id="b").id
    ids = [new_slot_id(), at_once, from_queue, *Slot.objects.values_list("id", flat=True)]
    assert all(re.fullmatch(SLOT_ID_FORMAT, slot_id) for slot_id in ids), ids
    assert len(set(ids[:3])) == 3
