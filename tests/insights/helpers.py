"""A known history, built through the real engine with the test clock."""

from __future__ import annotations

from limits import insights
from limits.models import Slot
from limits.services import acquire, release, sweep
from tests.conftest import Clock


class History:
    """One limit of capacity 1: grants made at once, and runs that wait a known time each."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name, self.clock, self.count = name, clock, 0
        self.holder: str | None = None

    def _run(self) -> str:
        self.count += 1
        return f"{self.name}-r{self.count}"

    def at_once(self) -> None:
        """Free the slot, then take it at once (a grant with no wait)."""
        if self.holder is not None:
            release(self.holder)
        outcome = acquire(self.name, run_id=self._run())
        assert outcome.state == "busy"
        self.holder = outcome.slot_id

    def waits(self, seconds: float) -> None:
        """A run joins the queue behind the holder, which releases `seconds` later: the run is
        granted then, and confirms."""
        assert self.holder is not None
        run, request = self._run(), f"req-{self.name}-{self.count}"
        assert acquire(self.name, run_id=run, request=request).state == "waiting"
        self.clock.advance(seconds=seconds)
        assert release(self.holder)
        outcome = acquire(self.name, run_id=run, request=request)  # confirms the reservation
        assert outcome.state == "busy"
        self.holder = outcome.slot_id


def start_insights(clock: Clock) -> None:
    """The first sweep: insights count from the next minute on."""
    sweep()
    clock.advance(minutes=1)


def roll_up_all(clock: Clock) -> None:
    """Let every minute so far end and roll it up (several passes if need be)."""
    clock.advance(minutes=1, seconds=31)
    while insights.roll_up(clock.now()):
        pass


def live_slots(name: str) -> int:
    return Slot.objects.filter(limit__name=name, state__in=["busy", "reserved"]).count()
