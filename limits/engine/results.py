"""What the engine's operations answer, and the timings they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

RESERVATION_MS = 2 * 60 * 1000  # SPEC 3.5
# The acquisition of a run's bounds for its whole run (SPEC 11) has the request "<run id>:start"
# (limits.runs.bounds); under the box its slots of any limit but the box count against the base
# (SPEC 12.3: keys.whole_run_room).
WHOLE_RUN_SUFFIX = ":start"
DEFAULT_TIMEOUT_MS = 24 * 60 * 60 * 1000  # SPEC 3.3
# A workflow's own bound as a deploy syncs it (SPEC 11.5, 14.1): (total, per_key, on_full,
# max_waiting, max_waiting_per_key), total None for "only the per-key pools bind".
type BoundValues = tuple[int | None, int | None, str, int | None, int | None]


@dataclass(frozen=True, slots=True)
class Acquisition:
    """What an acquire call amounts to now. `state` is 'busy' (the slot is yours), 'waiting'
    (queued; the run is woken when that changes), 'timed_out' or 'cancelled'; or, answered at
    once and queued nowhere (SPEC 14), 'skipped' (its on_full is 'skip') or 'refused' (a queue's
    cap): then `reason` (a key of REASONS) says why, of the limit `limit`. 'replaced' (SPEC 14.3):
    it waited and a newer acquisition of its key with on_full 'replace' took its place;
    `replaced_by` is that acquisition's request, `replaced_by_run` its run."""

    state: Literal["busy", "waiting", "timed_out", "cancelled", "skipped", "refused", "replaced"]
    limit: str
    request: str
    slot_id: str | None = None
    timeout_ms: int | None = None
    deadline: datetime | None = None
    # Several limits in one acquisition (SPEC 10.1): (limit, slot id) of each, in the order given.
    slots: tuple[tuple[str, str], ...] = ()
    limits: tuple[str, ...] = ()
    key: str = ""
    reason: str = ""
    replaced_by: str = ""
    replaced_by_run: str = ""


@dataclass(frozen=True, slots=True)
class BoxPlace:
    """The box's run concurrency in one acquisition (SPEC 12.2): the run also needs a slot of the
    box bound `limit`, from the pool of `key` (its workflow's name: 12.3 caps one workflow at the
    box's base). If the run executes in a box slot already (a busy one of its own), it keeps it
    when every other limit has room at once (no wait, no suspension); otherwise it gives it back
    and waits for every limit and a box slot together, all or nothing."""

    limit: str
    key: str


REASONS = {
    # SPEC 6.5: why a run waits, one vocabulary on every surface (code: sentence).
    "limit_paused": "the limit is paused",
    "limit_full": "the limit is full",
    "key_pool_full": "its key's pool is full",
    "group_limit_full": "another limit of its group is full",
    "held_for_owed": "capacity is held for an owed run",
    # SPEC 13.7: a full fair limit serves another key's run first
    "fair_turn": "other keys hold less of their share and are served first",
    "next": "next in line: granted at the next hand-over",
    # SPEC 12: the box's run concurrency, said of the box whichever limit's queue shows the run
    "box_full": "the box is full: as many runs execute as its ceiling allows (base x burst)",
    "workflow_at_base": "its workflow executes the box's base of runs already",
    "whole_runs_at_base": "the limit serves the box's base of whole runs already",
    # SPEC 14.5: why an acquisition or a start was refused instead of queued
    "queue_full": "the queue is full",
    "key_queue_full": "its key's share of the queue is full",
    # SPEC 14.4: why a run was cancelled by another (Run.end_reason; Run.caused_by the newer run)
    "cancel_running": "a newer run of its key cancelled it (cancel_running): its bound's pool was full",
}


_PARTNER = {  # what stops the other limit of a group, said of that limit
    "limit_full": "is full",
    "whole_runs_at_base": "serves the box's base of whole runs",
    "limit_paused": "is paused",
    "key_pool_full": "has its key's pool full",
    "held_for_owed": "holds capacity for an owed run",
    "fair_turn": "serves other keys first",
}


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a waiting run is not granted now (SPEC 6.5): `code` (a key of REASONS), the limit
    that stops it (its own, or for group_limit_full the other limit of its group), and for
    key_pool_full the key; for held_for_owed, the owed run. limits.engine.waiting.why_waiting
    computes it from the grant's own rules."""

    code: str
    limit: str
    key: str = ""
    owed_run: str = ""
    detail: str = ""  # group_limit_full: what stops the other limit (one of the other codes)

    @property
    def text(self) -> str:
        if self.code == "group_limit_full":
            return f"another limit of its group, {self.limit}, {_PARTNER.get(self.detail, _PARTNER['limit_full'])}"
        if self.code == "held_for_owed" and self.owed_run:
            return f"{REASONS[self.code]} ({self.owed_run})"
        return REASONS[self.code]

    def as_json(self) -> dict[str, str]:
        found = {"code": self.code, "text": self.text, "limit": self.limit}
        if self.key:
            found["key"] = self.key
        if self.owed_run:
            found["owed_run"] = self.owed_run
        return found


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
