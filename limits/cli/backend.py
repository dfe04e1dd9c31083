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
    key: dict[str, Any] | None = None
    """With `--key`: that key's pool (serializers.key_summary); the rows are then only its own."""

    def as_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit["name"],
            "kind": self.limit.get("kind", "limit"),
            "key": self.key["key"] if self.key is not None else None,
            "slots": self.slots,
            "queue": self.queue,
            "more_slots": self.more_slots,
            "more_queue": self.more_queue,
        }


@dataclass(slots=True)
class KeysView:
    """A limit's keys, busiest first, as far as the cut goes; and the pool of runs without a key."""

    limit: dict[str, Any]
    keys: list[dict[str, Any]]
    more_keys: int
    no_key: dict[str, Any]
    key: str | None = None
    """The `--key` filter, if one."""
    search: str = ""
    """The `--search` filter, if one."""

    def as_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit["name"],
            "per_key": self.limit.get("per_key"),
            "key": self.key,
            "search": self.search,
            "keys": self.keys,
            "more_keys": self.more_keys,
            "no_key": self.no_key,
        }


@dataclass(slots=True)
class Change:
    """A capacity or max-hold change: the value before and the limit after."""

    old: int
    limit: dict[str, Any]


@dataclass(slots=True)
class PoolChange:
    """A per-key change: the pool size before (None: only the total applied), the limit after,
    and, when one key's pool was changed, that key after (serializers.key_summary)."""

    old: int | None
    limit: dict[str, Any]
    key: dict[str, Any] | None = None


@dataclass(slots=True)
class ShareChange:
    """A switch between fifo and fair (SPEC 13.5): the share before and the limit after."""

    old: str
    limit: dict[str, Any]


@dataclass(slots=True)
class OnFullChange:
    """A change of what a full limit does (SPEC 14.1): on_full before ('wait', 'skip' or 'replace') and the
    limit after."""

    old: str
    limit: dict[str, Any]


@dataclass(slots=True)
class CapChange:
    """A change of a queue's cap, max_waiting or max_waiting_per_key (SPEC 14.5): the cap before
    (None: no cap) and the limit after."""

    old: int | None
    limit: dict[str, Any]


@dataclass(slots=True)
class KeyChange:
    """A key's weight or min changed (SPEC 13.5): the value before, the limit after and the key
    after (serializers.key_summary, with its fair share)."""

    old: int
    limit: dict[str, Any]
    key: dict[str, Any]


@dataclass(slots=True)
class PauseChange:
    """A pause or a resume: the state before ("running" or "paused", as the audit log writes it)
    and the limit after. Pausing a paused limit (resuming a running one) changes nothing."""

    old: str
    limit: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.old != ("paused" if self.limit.get("paused") else "running")


@dataclass(slots=True)
class BoxChange:
    """A change of the box's run concurrency (SPEC 12.5): base, burst and ceiling before, and
    the box bound after (serializers.limit_summary, with `base` and `burst`)."""

    old: dict[str, Any]
    limit: dict[str, Any]


class Backend(Protocol):
    def limits(self, kind: str | None = None) -> list[dict[str, Any]]: ...

    def limit(self, name: str) -> dict[str, Any]: ...

    def slots(self, name: str, cut: int | None, key: str | None = None) -> SlotsView: ...

    def keys(self, name: str, cut: int | None, key: str | None = None, search: str = "") -> KeysView: ...

    def slot(self, slot_id: str) -> dict[str, Any]: ...

    def release(self, slot_id: str) -> tuple[bool, dict[str, Any]]: ...

    def set_capacity(self, name: str, value: int | str | None) -> Change: ...

    def set_max_hold(self, name: str, value: int | str | None) -> Change: ...

    def set_per_key(self, name: str, value: int | str | None, key: str | None = None) -> PoolChange: ...

    def set_paused(self, name: str, paused: bool) -> PauseChange: ...

    def set_share(self, name: str, value: str | None) -> ShareChange: ...

    def set_on_full(self, name: str, value: str | None) -> OnFullChange: ...

    def set_max_waiting(self, name: str, value: int | str | None, *, per_key: bool) -> CapChange: ...

    def set_key_field(self, name: str, field: str, value: int | str | None, key: str) -> KeyChange: ...

    def forget(self, name: str) -> dict[str, Any]: ...

    def box(self) -> dict[str, Any]: ...

    def set_box(self, changes: dict[str, object]) -> BoxChange: ...


def more_past_cut(fetched: int, total: int, cut: int | None) -> int:
    """How many rows lie past the cut. `total` comes from the limit's counters; `fetched` holds
    one row past the cut when there are more, in case the counters moved since they were read."""
    if cut is None or fetched <= cut:
        return 0
    return max(total - cut, 1)
