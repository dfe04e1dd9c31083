"""The engine under real concurrency: several OS processes on one PostgreSQL database.

What must never happen, whatever the interleaving of acquires, re-acquires (confirms), releases
of one's own and of others' slots, operator releases of reservations, runs ending while they wait
or while a slot is reserved for them, timeouts, max-hold expiries and two sweeps running at once:

- more slots in use (reserved + busy) than the capacity, at any instant;
- a grant out of queue order: a run granted while a run queued before it was still waiting, or a
  slot granted at once while any run waited;
- counters on the limit row that differ from the rows;
- a waiting run lost (every acquire call ends busy, timed out or cancelled by its run's end, and
  nothing is left queued or reserved once all is quiet), or one acquire call granted twice (two
  live slots for one request, or two confirmed slots).

The invariants are checked twice: by a monitor process that samples each limit in one snapshot
while the load runs, and from the history rows once it has ended (limits/verify.py, also `manage.py limits verify`).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from limits import services
from limits.models import Limit, QueueEntry, Slot
from limits.verify import all_violations
from tests.concurrency.processes import Crew
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]

CLIENTS = 6
# Each client stops after OPERATIONS, or after this many seconds once it has done MIN_OPERATIONS,
# so the suite stays bounded on a loaded 2-core machine and still covers every kind of operation;
# a long soak raises both (STACKBONE_STRESS_OPERATIONS=20000 STACKBONE_STRESS_SECONDS=60).
OPERATIONS = int(os.environ.get("STACKBONE_STRESS_OPERATIONS", "300"))
SECONDS = float(os.environ.get("STACKBONE_STRESS_SECONDS", "6"))
MIN_OPERATIONS = 25


def run_load(tmp_path: Path, limits: list[str], *, clients: int = CLIENTS, ops: int = OPERATIONS) -> dict[str, Any]:
    """Start the clients, two sweepers and a monitor together; wait for the clients, then stop
    the others. Returns every worker's result."""
    seed = random.randrange(1 << 30)
    crew = Crew(tmp_path)
    try:
        workers = [
            crew.add("client", index=i, limits=limits, ops=ops, seconds=SECONDS, min_ops=MIN_OPERATIONS, seed=seed + i)
            for i in range(clients)
        ]
        sweepers = [crew.add("sweeper", index=f"s{i}") for i in range(2)]
        monitor = crew.add("monitor", index="m")
        crew.start()
        results = [worker.result(timeout=SECONDS + 90) for worker in workers]
        crew.stop()
        sweeps = [worker.result(timeout=30) for worker in sweepers]
        sampled = monitor.result(timeout=30)
    finally:
        crew.kill_all()
    return {"seed": seed, "clients": results, "sweepers": sweeps, "monitor": sampled}


def check_outcomes(results: dict[str, Any]) -> list[str]:
    """What each client was told holds against the rows: a 'busy' answer is the one confirmed slot
    of that request; a 'timed_out' or 'cancelled' answer is the final state of its last entry
    (or, for a run that ended while reserved, of its last slot), and such a request never had a
    confirmed slot. Every request in the rows was made by some client."""
    violations = []
    seen = set()
    for client in results["clients"]:
        for outcome in client["outcomes"]:
            request = outcome["request"]
            seen.add(request)
            slots = list(Slot.objects.filter(request=request).order_by("granted_at"))
            entries = list(QueueEntry.objects.filter(request=request).order_by("position"))
            confirmed = [slot for slot in slots if slot.confirmed_at is not None]
            if outcome["state"] == "busy":
                if [slot.id for slot in confirmed] != [outcome["slot_id"]]:
                    violations.append(f"{request}: told busy with {outcome['slot_id']}, rows {confirmed}")
            elif confirmed:
                violations.append(f"{request}: told {outcome['state']} but slot {confirmed[0].id} was confirmed")
            elif outcome["state"] == "timed_out":
                if not entries or entries[-1].state != "timed_out":
                    violations.append(f"{request}: told timed_out, last entry {entries[-1:]}")
            elif outcome["state"] == "cancelled":
                last_entry = entries[-1].state if entries else None
                ended = last_entry == "cancelled" or (
                    last_entry == "granted" and bool(slots) and slots[-1].state == "run_ended"
                )
                if not ended or not outcome["ended_run"]:
                    violations.append(f"{request}: told cancelled, rows {entries[-1:]} {slots[-1:]}")
            else:
                violations.append(f"{request}: ended {outcome['state']}")
    made = set(Slot.objects.values_list("request", flat=True)) | set(
        QueueEntry.objects.values_list("request", flat=True)
    )
    if made - seen:
        violations.append(f"requests nobody made: {sorted(made - seen)[:5]}")
    return violations


def assert_invariants(results: dict[str, Any], names: list[str]) -> Counter[str]:
    seed = results["seed"]
    monitor = results["monitor"]
    assert monitor["violation_count"] == 0, (seed, monitor["violations"])
    assert monitor["samples"] > 20, monitor
    services.sweep()  # whatever expired or timed out after the clients stopped
    for name in names:
        limit = Limit.objects.get(name=name)
        assert all_violations(limit) == [], seed
        assert monitor["peak"][name] == limit.capacity, "the load should fill the limit"
    assert check_outcomes(results) == [], seed
    # Quiet: every client ended every acquire call, so nothing may be left queued or reserved,
    # and every busy slot was released or taken back by max hold.
    assert Slot.objects.filter(state__in=["busy", "reserved"]).count() == 0, seed
    assert QueueEntry.objects.filter(state="waiting").count() == 0, seed
    return Counter(
        f"{outcome['limit']}:{outcome['state']}" for client in results["clients"] for outcome in client["outcomes"]
    )


def test_one_limit_holds_under_six_processes_and_two_sweeps(tmp_path: Path) -> None:
    declare(stress={"capacity": 3, "max_hold": "300ms"})
    results = run_load(tmp_path, ["stress"])
    outcomes = assert_invariants(results, ["stress"])
    # The load must have exercised what it claims to: queueing, timeouts, ends while waiting or
    # reserved, releases by others, and the sweep's work.
    states = Counter(slot.state for slot in Slot.objects.all())
    entries = Counter(entry.state for entry in QueueEntry.objects.all())
    assert outcomes["stress:busy"] > 30, outcomes
    assert outcomes["stress:timed_out"] > 0, outcomes  # ends while waiting: the entries/states check below
    assert entries["granted"] > 10 and entries["timed_out"] > 0, entries
    assert entries["cancelled"] + states["run_ended"] > 0 and states["expired"] > 0, (entries, states)
    assert sum(client["stats"]["foreign_releases"] for client in results["clients"]) > 0
    assert sum(sweeper["passes"] for sweeper in results["sweepers"]) > 20


def test_two_limits_at_once_never_wait_on_each_other_or_break_a_rule(tmp_path: Path) -> None:
    """Runs hold a slot of one limit while they take one of the other (both orders), so the two
    limits' locks are taken in every combination; a deadlock would fail the run."""
    declare(alpha={"capacity": 2, "max_hold": "1h"}, beta={"capacity": 3, "max_hold": "300ms"})
    results = run_load(tmp_path, ["alpha", "beta"])
    outcomes = assert_invariants(results, ["alpha", "beta"])
    assert outcomes["alpha:busy"] > 15 and outcomes["beta:busy"] > 15, outcomes
