"""What the engine's operations answer, and the timings they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

RESERVATION_MS = 2 * 60 * 1000  # SPEC 3.5
DEFAULT_TIMEOUT_MS = 24 * 60 * 60 * 1000  # SPEC 3.3


@dataclass(frozen=True, slots=True)
class Acquisition:
    """What an acquire call amounts to now. `state` is 'busy' (the slot is yours), 'waiting'
    (queued; the run is woken when that changes), 'timed_out' or 'cancelled'."""

    state: Literal["busy", "waiting", "timed_out", "cancelled"]
    limit: str
    request: str
    slot_id: str | None = None
    timeout_ms: int | None = None
    deadline: datetime | None = None
    # Several limits in one acquisition (SPEC 10.1): (limit, slot id) of each, in the order given.
    slots: tuple[tuple[str, str], ...] = ()
    limits: tuple[str, ...] = ()
    key: str = ""


@dataclass(slots=True)
class Changes:
    """What a locked section did to its limits: runs to wake after commit, and figures."""

    woken: list[str] = field(default_factory=list)
    granted: int = 0
    lapsed: int = 0
    timed_out: int = 0


@dataclass(slots=True)
class SweepReport:
    limits: int = 0
    expired: int = 0
    lapsed: int = 0
    timed_out: int = 0
    granted: int = 0
    purged: int = 0

    def found_work(self) -> bool:
        return bool(self.expired or self.lapsed or self.timed_out or self.granted or self.purged)


@dataclass(slots=True)
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    undeclared: list[str] = field(default_factory=list)
