"""SPEC 2.4, 4.1, 4.2, 5.1 and 5.5: giving slots back."""

from __future__ import annotations

import pytest

from limits import services
from limits.models import AuditEvent, Slot
from limits.services import acquire, release
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def one(clock):
    return declare(one={"capacity": 1, "max_hold": "1h"})["one"]


def test_release_frees_a_busy_slot(one) -> None:
    slot_id = acquire("one", run_id="r1").slot_id
    assert release(slot_id) is True
    assert Slot.objects.get(id=slot_id).state == "released"
    assert holders("one") == []
    assert_counters_match_rows("one")


def test_release_of_a_free_slot_changes_nothing(one) -> None:
    slot_id = acquire("one", run_id="r1").slot_id
    release(slot_id)
    acquire("one", run_id="r2")
    before = list(Slot.objects.order_by("id").values())
    assert release(slot_id) is False
    assert list(Slot.objects.order_by("id").values()) == before
    assert_counters_match_rows("one")


@pytest.mark.parametrize("slot_id", ["slot_unknown", "", "x" * 500, None, 42])
def test_release_of_an_unknown_slot_is_false(one, slot_id) -> None:
    assert release(slot_id) is False


def test_a_release_grants_the_head_of_the_queue_in_the_same_transaction(
    one,
    woken,
    django_capture_on_commit_callbacks,
) -> None:
    slot_id = acquire("one", run_id="r1").slot_id
    acquire("one", run_id="r2")
    acquire("one", run_id="r3")
    with django_capture_on_commit_callbacks(execute=True):
        release(slot_id)
    assert holders("one") == [("r2", "reserved")]
    assert queue("one") == ["r3"]
    assert woken == ["r2"]
    assert_counters_match_rows("one")


def test_release_works_from_any_run(one) -> None:
    """2.4: the slot id is all a caller needs; nothing ties the release to the acquiring run."""
    slot_id = acquire("one", run_id="placer").slot_id
    assert release(slot_id) is True


def test_an_operator_release_is_audited_with_the_actor(one, clock) -> None:
    slot_id = acquire("one", run_id="r1").slot_id
    assert release(slot_id, actor="user:ana") is True
    event = AuditEvent.objects.get(action="release")
    assert (event.actor, event.action, event.slot_id, event.old_value, event.new_value, event.at) == (
        "user:ana",
        "release",
        slot_id,
        "busy",
        "released",
        clock.now(),
    )
    assert Slot.objects.get(id=slot_id).freed_by == "user:ana"
    assert release(slot_id, actor="user:ana") is False
    assert AuditEvent.objects.filter(action="release").count() == 1


def test_releasing_a_reservation_sends_its_run_to_the_end_of_the_queue(one) -> None:
    """An operator who frees a reserved slot must not lose the run that was picked: it waits
    again, behind the others, with its deadline, and the slot goes to the next run."""
    slot_id = acquire("one", run_id="r1").slot_id
    acquire("one", run_id="r2", timeout="1h")
    acquire("one", run_id="r3")
    release(slot_id)
    reserved = Slot.objects.get(state="reserved")
    deadline = reserved.queue_entry.deadline
    assert release(reserved.id, actor="user:ana") is True
    assert holders("one") == [("r3", "reserved")]
    assert queue("one") == ["r2"]
    assert services.acquire("one", run_id="r2", request=reserved.request).deadline == deadline
    assert_counters_match_rows("one")


def test_release_slots_frees_each_as_release_does_and_grants_once(clock) -> None:
    """Issue 44: several slots given back in one call, each answered as release answers it, in the
    order given; a group waiting for both limits is granted by it; an operator's is audited."""
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})
    held = services.acquire_group(["a", "b"], run_id="r1", request="q1")
    waiting = services.acquire_group(["b", "a"], run_id="r2", request="q2")
    assert waiting.state == "waiting"
    ids = [slot_id for _, slot_id in held.slots]
    assert services.release_slots([ids[0], "slot_unknown", ids[1], ids[0]], actor="ops") == [True, False, True, False]
    assert holders("a") == [("r2", "reserved")] and holders("b") == [("r2", "reserved")]
    assert AuditEvent.objects.filter(action="release", actor="ops").count() == 2
    assert services.release_slots([]) == []
    assert_counters_match_rows("a")
    assert_counters_match_rows("b")
