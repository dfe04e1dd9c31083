"""A history the engine writes by the rules, which `limits verify` reported as broken. Found by the
model test (tests/model/test_engine_model.py), kept as a regression test.

A group whose reservation is released by an operator goes back to the end of its queues (10.2)
and, when nobody else can take its slots, is reserved them again in the same transaction. When
that release shares an instant with the first grant (transactions can share a timestamp: the
engine's clock never goes back, so it repeats one when the system clock does; verify promises
the engine "the benefit of the doubt" then), verify's check g counted the group's slots by
(request, granted_at) and found 4 slots for a group of 2: "a: group g was granted 4 of its 2
slots at ...".
"""

from __future__ import annotations

import pytest

from limits.models import Slot
from limits.services import acquire, acquire_group, release
from limits.verify import verify
from tests.factories import declare

pytestmark = pytest.mark.django_db

ONE = {"capacity": 1, "max_hold": "1h"}


def test_a_group_released_and_granted_again_in_one_instant_is_no_partial_group(clock) -> None:
    declare(a=ONE, b=ONE)
    holder = acquire("a", run_id="holder").slot_id
    acquire_group(["a", "b"], run_id="g", request="g")
    release(holder)  # g is reserved a and b
    reserved_a = Slot.objects.get(request="g", limit__name="a").id
    assert release(reserved_a, actor="user:ops") is True  # back to the end of both queues: granted again
    assert Slot.objects.filter(request="g", state="reserved").count() == 2
    assert verify().ok, verify().violations
