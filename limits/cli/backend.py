"""What a verb asks of an installation, whether this one (limits.cli.local) or another through
its JSON API (limits.cli.remote). Both answer in the JSON shapes of limits.serializers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


@dataclass(slots=True)
class SlotsView:
    """A limit's slots and queue, as far as the cut goes, and how many more there are."""

    limit: dict[str, Any]
    slots: list[dict[str, Any]]
    queue: list[dict[str, Any]]
    more_slots: int
    more_queue: int
    now: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit["name"],
            "slots": self.slots,
            "queue": self.queue,
            "more_slots": self.more_slots,
            "more_queue": self.more_queue,
        }


@dataclass(slots=True)
class Change:
    """A capacity or max-hold change: the value before and the limit after."""

    old: int
    limit: dict[str, Any]


class Backend(Protocol):
    def limits(self) -> list[dict[str, Any]]: ...

    def slots(self, name: str, cut: int | None) -> SlotsView: ...

    def slot(self, slot_id: str) -> dict[str, Any]: ...

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]: ...

    def set_capacity(self, name: str, value: int | str | None) -> Change: ...

    def set_max_hold(self, name: str, value: int | str | None) -> Change: ...


def more_past_cut(fetched: int, total: int, cut: int | None) -> int:
    """How many rows lie past the cut. `total` comes from the limit's counters; `fetched` holds
    one row past the cut when there are more, in case the counters moved since they were read."""
    if cut is None or fetched <= cut:
        return 0
    return max(total - cut, 1)
