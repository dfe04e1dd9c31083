"""SPEC 3.1: the queue is durable; a process that dies, even SIGKILLed in the middle of a
transaction holding the limit's lock, leaves the queue intact and in order.

What must never happen: a committed wait lost or reordered, an uncommitted one visible, the
counters out of step with the rows, or the dead process's lock blocking the next one.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from limits import services
from limits.models import Limit, QueueEntry
from limits.verify import all_violations
from tests.concurrency.processes import Worker
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare, queue

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


def test_a_killed_process_leaves_the_queue_intact_and_in_order(tmp_path: Path) -> None:
    declare(calls={"capacity": 1, "max_hold": "1h"})
    assert services.acquire("calls", run_id="holder").state == "busy"

    enqueuer = Worker("enqueuer", {"limit": "calls", "count": 6}, tmp_path)
    try:
        committed = []
        while True:
            line = enqueuer.line()
            if line.get("parked"):
                break
            assert line["state"] == "waiting"
            committed.append(line["committed"])
        enqueuer.process.send_signal(signal.SIGKILL)
        enqueuer.process.wait(timeout=10)
    finally:
        enqueuer.kill()
    assert enqueuer.process.returncode == -signal.SIGKILL

    found = Worker("reader", {"limit": "calls"}, tmp_path).result(timeout=60)
    assert found["queue"] == [[run, f"order-{run[1:]}"] for run in committed]
    assert found["counters"] == [1, 0, 6]
    assert found["joined"] == "waiting"  # the dead transaction's lock was let go
    assert found["reserved"] == ["k0"]  # the head of the intact queue gets the freed slot

    assert queue("calls") == committed[1:] + ["after"]
    assert not QueueEntry.objects.filter(run_id="uncommitted").exists()
    assert_counters_match_rows("calls")
    assert all_violations(Limit.objects.get(name="calls")) == []
