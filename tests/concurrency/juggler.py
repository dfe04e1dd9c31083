"""The juggler role of tests/concurrency/worker.py: one process playing several runs at once on
keyed limits and on acquisitions of two and three limits (SPEC 9, 10), as a client of the stress
test in tests/concurrency/test_stress.py. Django is set up by the worker before any of this runs
(hence the imports inside functions)."""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any


def deadlocked(error: BaseException) -> bool:
    """Whether PostgreSQL broke a deadlock by failing this statement (it must never have to:
    limits are locked in id order, SPEC 10 and limits.engine.keys)."""
    from psycopg import errors

    return isinstance(error.__cause__, errors.DeadlockDetected) or isinstance(error, errors.DeadlockDetected)


class Deadlock(Exception):
    """A call failed with DeadlockDetected: written down, and the call is tried again later."""


@dataclass
class Flight:
    """One acquire call of one run, from its first call until it is given back or ends."""

    names: list[str]
    key: str | None
    run_id: str
    request: str
    timeout: int | None
    may_end_run: bool
    started: float
    state: str = "new"  # new, waiting, held
    slot_ids: list[str] = field(default_factory=list)  # the handles, in the order of names
    unreleased: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # the limits of the handles, as answered
    hold_until: float = 0.0
    tied: bool = False
    ended_run: bool = False  # its run was ended while it waited
    polls: int = 0
    waited: float | None = None  # seconds from the first call to the grant
    next_call: float = 0.0  # a waiting run calls again when woken; here, every 10-30 ms
    began_at: float = field(default_factory=time.time)  # wall clock, to compare across processes


class Juggler:
    """One process playing several runs at once (up to `in_flight`), on a keyed limit and on
    acquisitions of two and three limits in random order, so A+B and B+A (the first two limits,
    drawn most often) and every order of three are taken at once by different processes. Runs
    are named q<index>-r<n>, one per acquire call; requests <run>:0.

    Each step does one of: start an acquire call (one limit with a key drawn from `keys`, a few
    of them hot so their pools fill; one limit without a key; or a group of two or three limits,
    with or without a key); call a waiting one again (which confirms a reservation, as a woken
    run does; sometimes its run ends instead, while waiting or right when reserved); give back a
    held one (its slots released one by one, so a group is held in part for a moment as SPEC
    10.1 allows, or, for slots tied to the run, by ending the run); release someone else's live
    slot; or, as an operator, change the keyed limit's per_key, one key's pool size, or its
    capacity, or pause one of the limits for a moment (SPEC 5.6: the juggler that paused it
    resumes it 0.1-0.4 s later, and every pause is resumed when the load stops). Once the load
    stops it takes no new work and keeps calling its waiting acquire calls until each is granted
    or times out: one still waiting after `drain` seconds starved.
    """

    def __init__(self, params: dict[str, Any]) -> None:
        self.index: int = params["index"]
        self.limits: list[str] = params["limits"]
        self.keyed: str = params["keyed"]
        self.keys: list[str] = params["keys"]
        self.hot: list[str] = self.keys[: params["hot_keys"]]
        self.in_flight: int = params["in_flight"]
        self.ops: int = params["ops"]
        self.seconds: float = params["seconds"]
        self.min_ops: int = params["min_ops"]
        self.drain: float = params["drain"]
        self.operator: bool = params["operator"]
        self.capacities: list[int | None] = params["capacities"]  # an operator's choices for the keyed limit
        self.rng = random.Random(params["seed"])
        self.run_number = 0
        self.flights: list[Flight] = []
        self.paused: dict[str, float] = {}  # limits this juggler paused: when it resumes each
        self.outcomes: list[dict[str, Any]] = []
        self.deadlocks: list[str] = []
        self.problems: list[str] = []
        self.starved: list[dict[str, Any]] = []
        self.timings: dict[str, list[float]] = {}  # per call: [count, seconds, longest]
        self.stats: dict[str, float] = {
            "operations": 0,
            "started": 0,
            "polls": 0,
            "released_true": 0,
            "released_false": 0,
            "foreign_releases": 0,
            "ended_runs": 0,
            "tied": 0,
            "operator_actions": 0,
            "partial_holds": 0,
            "pauses": 0,
        }

    # The loop ---------------------------------------------------------------------------------

    def play(self) -> dict[str, Any]:
        started = time.monotonic()
        loading = True
        while True:
            elapsed = time.monotonic() - started
            if loading and (
                self.stats["operations"] >= self.ops
                or (elapsed > self.seconds and self.stats["operations"] >= self.min_ops)
            ):
                loading, self.stats["load_seconds"] = False, round(elapsed, 2)
                self.resume_due(forever=True)
            if not loading and not self.flights:
                break
            if not loading and elapsed > self.stats["load_seconds"] + self.drain:
                self.starved = [self._shown(f) for f in self.flights if f.state != "held"]
                break
            with contextlib.suppress(Deadlock):  # written down; the step is tried again later
                self.step(loading)
            time.sleep(self.rng.uniform(0.001, 0.003))
        self.stats["seconds"] = round(time.monotonic() - started, 2)
        return {
            "index": self.index,
            "outcomes": self.outcomes,
            "stats": self.stats,
            "deadlocks": self.deadlocks,
            "problems": self.problems,
            "starved": self.starved,
            "timings": self.timings,
        }

    def step(self, loading: bool) -> None:
        self.resume_due()
        roll = self.rng.random()
        if loading and self.operator and not self.stats["operator_actions"] and self.stats["operations"] >= 3:
            # Every operator acts at least once, however few operations a loaded machine allows
            # (CI once ran 70 operations in all and drew none).
            self.stats["operations"] += 1
            self.operate(pause=self.index == 0)  # so every run pauses a limit at least once
        elif loading and len(self.flights) < self.in_flight and roll < 0.4:
            self.stats["operations"] += 1
            self.start()
        elif loading and roll < 0.45:
            self.stats["operations"] += 1
            self.release_someone_elses()
        elif loading and self.operator and roll < 0.47:
            self.stats["operations"] += 1
            self.operate()
        else:
            now = time.monotonic()
            due = [f for f in self.flights if (f.next_call if f.state != "held" else f.hold_until) <= now]
            if due:
                self.advance(self.rng.choice(due))

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One service call; a deadlock is written down and raised as Deadlock (its transaction
        rolled back: the same call is made again later)."""
        from django.db import DatabaseError

        began = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except DatabaseError as error:
            if not deadlocked(error):
                raise
            self.deadlocks.append(f"{what}: {error}".splitlines()[0][:300])
            raise Deadlock from error
        finally:
            spent = self.timings.setdefault(what, [0, 0.0, 0.0])
            took = time.monotonic() - began
            spent[0], spent[1], spent[2] = spent[0] + 1, spent[1] + took, max(spent[2], took)

    # Acquire calls ----------------------------------------------------------------------------

    def draw_key(self) -> str | None:
        roll = self.rng.random()
        if roll < 0.1:
            return None  # the no-key pool
        if roll < 0.45:
            return self.rng.choice(self.hot)
        return self.rng.choice(self.keys)

    def start(self) -> None:
        roll = self.rng.random()
        if roll < 0.3:
            names, key = [self.keyed], self.draw_key()
        elif roll < 0.4:
            names, key = [self.rng.choice([n for n in self.limits if n != self.keyed])], None
        else:
            if roll < 0.55:
                names = self.rng.sample(self.limits[:2], 2)  # the crossing pair: A+B and B+A
            elif roll < 0.75:
                names = self.rng.sample(self.limits, 2)
            else:
                names = self.rng.sample(self.limits, 3)
            key = self.draw_key() if self.rng.random() < 0.6 else None
        self.run_number += 1
        run_id = f"q{self.index}-r{self.run_number}"
        flight = Flight(
            names=names,
            key=key,
            run_id=run_id,
            request=f"{run_id}:0",
            timeout=self.rng.choice([None, None, None, None, 5, 50, 300, 2000]),
            may_end_run=self.rng.random() < 0.25,
            started=time.monotonic(),
        )
        self.stats["started"] += 1
        self.flights.append(flight)
        self.ask(flight)

    def ask(self, flight: Flight) -> None:
        """Call acquire (or acquire_group) for this flight, first or again with its request."""
        from limits import services

        if len(flight.names) == 1:
            got = self.call(
                "acquire",
                services.acquire,
                flight.names[0],
                run_id=flight.run_id,
                request=flight.request,
                timeout=flight.timeout,
                key=flight.key,
            )
        else:
            got = self.call(
                "acquire_group",
                services.acquire_group,
                flight.names,
                run_id=flight.run_id,
                request=flight.request,
                timeout=flight.timeout,
                key=flight.key,
            )
        if flight.state == "new":
            flight.state = "waiting"
        if got.state == "waiting":
            flight.next_call = time.monotonic() + self.rng.uniform(0.01, 0.03)
            return
        if got.state == "busy":
            self.hold(flight, got)
        else:
            self.finish(flight, got.state)

    def hold(self, flight: Flight, got: Any) -> None:
        from limits import services

        if len(flight.names) == 1:
            flight.slot_ids = [got.slot_id]
        else:
            if [name for name, _ in got.slots] != flight.names:
                self.problems.append(f"{flight.request}: handles {got.slots} not in the order {flight.names}")
            flight.slot_ids = [slot_id for _, slot_id in got.slots]
            flight.told = [name for name, _ in got.slots]
        flight.unreleased = list(flight.slot_ids)
        flight.waited = time.monotonic() - flight.started
        flight.state = "held"
        long = self.rng.random() < 0.04
        flight.hold_until = time.monotonic() + (self.rng.uniform(0.6, 1.0) if long else self.rng.uniform(0, 0.015))
        if self.rng.random() < 0.15:
            # with_limit: the slots are tied to the run, and ending the run frees them (2.5).
            flight.tied = all(
                self.call("tie_to_run", services.tie_to_run, slot_id, flight.run_id) for slot_id in flight.slot_ids
            )
            self.stats["tied"] += 1

    def advance(self, flight: Flight) -> None:
        from limits import services
        from limits.models import Slot

        if flight.state == "held":
            self.give_back(flight)
            return
        flight.polls += 1
        self.stats["polls"] += 1
        if flight.may_end_run and flight.state == "waiting":
            reserved = Slot.objects.filter(request=flight.request, state="reserved").exists()
            if (reserved and self.rng.random() < 0.7) or self.rng.random() < 0.05:
                self.call("end_run", services.end_run, flight.run_id)
                self.stats["ended_runs"] += 1
                flight.may_end_run, flight.ended_run = False, True
                self.ask(flight)  # answers cancelled (the wait, or the reservation, ended with the run)
                if flight in self.flights:
                    self.problems.append(f"{flight.request}: still {flight.state} after its run ended")
                    self.finish(flight, flight.state)
                return
        self.ask(flight)

    def give_back(self, flight: Flight) -> None:
        from limits import services

        if flight.tied and self.rng.random() < 0.5:
            self.call("end_run", services.end_run, flight.run_id)
            self.stats["ended_runs"] += 1
            self.finish(flight, "busy", ended_run=True)
            return
        if len(flight.unreleased) > 1 and self.rng.random() < 0.3:
            # One handle now, the others at a later step: the group is held in part (10.1).
            slot_id = self.rng.choice(flight.unreleased)
            self._release_own(flight, slot_id)
            flight.unreleased.remove(slot_id)
            flight.hold_until = time.monotonic() + self.rng.uniform(0, 0.01)
            self.stats["partial_holds"] += 1
            return
        while flight.unreleased:
            self._release_own(flight, flight.unreleased[-1])
            flight.unreleased.pop()
        self.finish(flight, "busy")
        if self.rng.random() < 0.1:
            self.call("end_run", services.end_run, flight.run_id)  # the run completes: changes nothing

    def _release_own(self, flight: Flight, slot_id: str) -> None:
        from limits import services

        released = self.call("release", services.release, slot_id)
        self.stats["released_true" if released else "released_false"] += 1
        if released and self.rng.random() < 0.05 and self.call("release", services.release, slot_id):
            self.problems.append(f"{flight.request}: a second release of {slot_id} changed something")

    def finish(self, flight: Flight, state: str, *, ended_run: bool = False) -> None:
        """Write down what the acquire call amounted to, once it is no longer waiting."""
        self.flights.remove(flight)
        self.outcomes.append(
            {
                **self._shown(flight),
                "state": state,
                "slot_ids": flight.slot_ids if state == "busy" else [],
                "handle_limits": (flight.told or flight.names) if state == "busy" else [],
                "ended_run": ended_run or flight.ended_run,
                "waited": round(time.monotonic() - flight.started if flight.waited is None else flight.waited, 3),
                "began_at": flight.began_at,
                "ended_at": time.time(),
            }
        )

    @staticmethod
    def _shown(flight: Flight) -> dict[str, Any]:
        return {
            "request": flight.request,
            "run_id": flight.run_id,
            "limits": flight.names,
            "key": flight.key,
            "timeout": flight.timeout,
            "polls": flight.polls,
            "state": flight.state,
        }

    # Others' slots and operators ----------------------------------------------------------------

    def release_someone_elses(self) -> None:
        """SPEC 2.4 and 5.1: any run or operator may release any slot; a reservation of a group
        sends the whole group back to the end of its queues (10.2)."""
        from limits import services
        from limits.models import Slot

        slot_id = (
            Slot.objects.filter(state__in=["busy", "reserved"])
            .exclude(run_id__startswith=f"q{self.index}-")
            .order_by("?")
            .values_list("id", flat=True)
            .first()
        )
        if slot_id is not None:
            self.call("foreign release", services.release, slot_id, actor=self.rng.choice([None, "user:op"]))
            self.stats["foreign_releases"] += 1

    def operate(self, *, pause: bool = False) -> None:
        """SPEC 9.4, 5.3 and 5.6: per_key of the whole limit, one key's pool, or the capacity,
        raised, lowered or reset (lowering takes nothing back); or a pause of one limit."""
        from limits import services

        roll = 1.0 if pause else self.rng.random()
        if roll < 0.35:
            value = self.rng.choice([1, 2, 3, None])
            self.call("set_per_key", services.set_per_key, self.keyed, value, actor="stress")
        elif roll < 0.7:
            key = self.rng.choice(self.hot) if self.rng.random() < 0.6 else self.rng.choice(self.keys)
            value = self.rng.choice([1, 2, 3, 4, None])
            self.call("set_per_key", services.set_per_key, self.keyed, value, key=key, actor="stress")
        elif roll < 0.8:
            value = self.rng.choice(self.capacities)
            self.call("set_capacity", services.set_capacity, self.keyed, value, actor="stress")
        else:
            name = self.rng.choice([limit for limit in self.limits if limit not in self.paused] or self.limits)
            self.call("pause", services.pause_limit, name, actor="stress")
            self.paused[name] = time.monotonic() + self.rng.uniform(0.1, 0.4)
            self.stats["pauses"] += 1
        self.stats["operator_actions"] += 1

    def resume_due(self, *, forever: bool = False) -> None:
        """Resume the limits this juggler paused whose moment has come (all of them `forever`: the
        load stopped). A pause by another juggler meanwhile is resumed by that one."""
        from limits import services

        now = time.monotonic()
        for name, due in list(self.paused.items()):
            if forever or due <= now:
                self.call("resume", services.resume_limit, name, actor="stress")
                del self.paused[name]


def juggler(params: dict[str, Any]) -> dict[str, Any]:
    return Juggler(params).play()
