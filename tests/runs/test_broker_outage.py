"""A broker that is down when a committed change wakes runs must not fail the change.

Found by the chaos run (python -m tests.chaos): while Redis restarted, a `release_slot` step
released the slot and recorded itself in one commit, then publishing the woken run's task
raised after the commit; the step was recorded as failed and its run failed, although the slot
had been released. Now the publish failure is logged and the woken run is sent again by
recovery.
"""

from __future__ import annotations

import pytest

from limits.models import Slot
from stackbone.models import Run
from stackbone.runs.runtime import advance, recover
from studio.workflows import start_run
from studio.workflows.calls import call_ended, place_call
from tests.conftest import use_broker
from tests.factories import declare, holders

pytestmark = pytest.mark.django_db(transaction=True)

UNREACHABLE = "redis://127.0.0.1:9/0"  # nothing listens on the discard port


@pytest.fixture
def one_call(clock):
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})


def test_a_release_whose_wake_cannot_be_published_still_completes(one_call, no_worker, clock) -> None:
    holder = start_run(place_call, {"call_id": "c1"})
    assert advance(holder.id) == "completed"
    waiter = start_run(place_call, {"call_id": "c2"})
    assert advance(waiter.id) == "suspended"
    slot_id = Run.objects.get(id=holder.id).output["slot_id"]
    ender = start_run(call_ended, {"slot_id": slot_id})

    use_broker(UNREACHABLE, eager=False)
    assert advance(ender.id) == "completed"
    assert Run.objects.get(id=ender.id).output == {"released": True}
    assert Slot.objects.get(id=slot_id).state == "released"
    assert holders("voice-calls") == [(waiter.id, "reserved")]
    woken = Run.objects.get(id=waiter.id)
    assert (woken.status, woken.suspended) == ("running", False)  # woken; its task was lost

    clock.advance(seconds=31)
    use_broker("memory://", eager=True)
    assert recover() >= 1
    assert Run.objects.get(id=waiter.id).status == "completed"
    assert holders("voice-calls") == [(waiter.id, "busy")]


def test_starting_a_run_while_the_broker_is_down_keeps_the_run_for_recovery(one_call, no_worker, clock) -> None:
    use_broker(UNREACHABLE, eager=False)
    run = start_run(place_call, {"call_id": "c1"})
    assert Run.objects.get(id=run.id).status == "pending"
    clock.advance(seconds=31)
    use_broker("memory://", eager=True)
    assert recover() == 1
    assert Run.objects.get(id=run.id).status == "completed"
