"""docs/engine.md, "Audit": releases "are not audit events; the slot row keeps when it was freed
and by whom" (SPEC 5.1: an operator's release, same effect wherever it comes from). Found by the
model test (tests/model/test_engine_model.py), kept as a regression test: an operator's release
of a group's reservation (which sends the whole group back to the end of its queues, SPEC 10.2)
left freed_by empty on the group's slots, where a single run's reservation got the operator.
"""

from __future__ import annotations

import pytest

from limits.models import Slot
from limits.services import acquire, acquire_group, release
from tests.factories import declare

pytestmark = pytest.mark.django_db

ONE = {"capacity": 1, "max_hold": "1h"}


def test_an_operators_release_of_a_groups_reservation_records_who_freed_it(clock) -> None:
    declare(a=ONE, b=ONE)
    holder = acquire("a", run_id="holder").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    release(holder)  # g is reserved a and b
    reserved_a = Slot.objects.get(request="g", limit__name="a").id
    assert release(reserved_a, actor="user:ops") is True
    assert Slot.objects.get(id=reserved_a).freed_by == "user:ops"
