"""The tenant role of tests/concurrency/worker.py: one process playing one tenant's runs on a fair
limit (SPEC 13), as a client of the fair stress test in tests/concurrency/test_stress.py. A
flooding tenant keeps many acquire calls in flight at once; a small one a few, arriving now and
then. Built on the juggler's acquire calls (tests/concurrency/juggler.py): the same waits, calls
again, holds, releases, runs ended while waiting, and outcomes the checks read."""

from __future__ import annotations

import time
from typing import Any

from tests.concurrency.juggler import Flight, Juggler


class Tenant(Juggler):
    """Acquire calls on one fair limit with this tenant's keys (taken in turn; None: no key), up
    to `in_flight` at once. A new call starts `think` seconds (drawn from the range) after the
    last one ended, or at once with no think time: a flooding tenant always has calls waiting.
    Runs are named q<index>-r<n>, one per acquire call. No groups, no operators, no releases of
    others' slots: the weights, mins and pools set before the load hold throughout, so the checks
    can judge every grant against them (tests/concurrency/checks.py, fair_rule_violations)."""

    def __init__(self, params: dict[str, Any]) -> None:
        fair = params["fair"]
        super().__init__(
            {
                **params,
                "limits": [fair],
                "keyed": fair,
                "hot_keys": 0,
                "operator": False,
                "capacities": [],
            }
        )
        low, high = params["think"]
        self.think = (float(low), float(high))
        self.next_arrival = 0.0

    def step(self, loading: bool) -> None:
        now = time.monotonic()
        if loading and len(self.flights) < self.in_flight and now >= self.next_arrival:
            self.stats["operations"] += 1
            self.start()
            return
        due = [f for f in self.flights if (f.next_call if f.state != "held" else f.hold_until) <= now]
        if due:
            self.advance(self.rng.choice(due))

    def start(self) -> None:
        self.run_number += 1
        run_id = f"q{self.index}-r{self.run_number}"
        flight = Flight(
            names=[self.keyed],
            key=self.keys[self.run_number % len(self.keys)],
            run_id=run_id,
            request=f"{run_id}:0",
            timeout=self.rng.choice([None, None, None, None, 300, 2000]),
            may_end_run=self.rng.random() < 0.1,
            started=time.monotonic(),
        )
        self.stats["started"] += 1
        self.flights.append(flight)
        self.ask(flight)

    def finish(self, flight: Flight, state: str, *, ended_run: bool = False) -> None:
        super().finish(flight, state, ended_run=ended_run)
        low, high = self.think
        self.next_arrival = time.monotonic() + (self.rng.uniform(low, high) if high else 0.0)


def tenant(params: dict[str, Any]) -> dict[str, Any]:
    return Tenant(params).play()
