"""Found by the model test on PostgreSQL (issue 26, one grant track): a replay of a request whose
wait was cancelled (its run ended) answered `cancelled` without the wait's timeout and deadline
once a plain acquire's replay went through the rules of groups; a waiting or timed-out replay
carries them, and so does a cancelled one, with or without a key."""

from __future__ import annotations

import pytest

from limits import services
from tests.factories import declare

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("key", [None, "acme"])
def test_a_replay_of_a_cancelled_wait_keeps_its_timeout_and_deadline(clock, key) -> None:
    declare(a={"capacity": 1, "max_hold": "1h"})
    services.acquire("a", run_id="r0", key=key)
    waiting = services.acquire("a", run_id="r1", request="r1:1", key=key)
    assert waiting.state == "waiting"
    services.end_run("r1")
    replay = services.acquire("a", run_id="r1", request="r1:1", key=key)
    assert (replay.state, replay.timeout_ms, replay.deadline) == ("cancelled", waiting.timeout_ms, waiting.deadline)
