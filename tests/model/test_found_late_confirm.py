"""SPEC 10.3, "Freed capacity goes to the oldest waiting run of that limit that can be granted
now", after a late confirm: the shortest sequence the model test (tests/model/test_engine_model.py)
found the engine getting wrong, kept as a regression test. A late confirm of a single run's
reservation through services.confirm (3.6: it lapses, the run goes to the end of the queue)
handed the freed slot on by settling that one limit only, so a group waiting for it and another
free limit could not be granted, and the younger run that had just lapsed got the slot back.
"""

from __future__ import annotations

import pytest

from limits.models import Slot
from limits.services import acquire, acquire_group, confirm, release
from tests.factories import declare, queue

pytestmark = pytest.mark.django_db

ONE = {"capacity": 1, "max_hold": "1h"}


def reserved(name: str) -> list[str]:
    return list(Slot.objects.filter(limit__name=name, state="reserved").values_list("run_id", flat=True))


def test_a_late_confirm_hands_the_slot_to_the_oldest_run_that_can_take_it(clock) -> None:
    declare(a=ONE, b=ONE)
    holder = acquire("a", run_id="holder").slot_id
    acquire("a", run_id="s", request="s")
    release(holder)  # s is reserved a
    s = Slot.objects.get(request="s", state="reserved").id
    assert acquire_group(["a", "b"], run_id="g", request="g").state == "waiting"  # a is taken; b is free
    clock.advance(minutes=2, milliseconds=1)
    assert confirm(s) is False  # late: s lapses and goes behind g
    assert reserved("a") == ["g"] and reserved("b") == ["g"] and queue("a") == ["s"]
