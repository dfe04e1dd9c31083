"""Rows as the JSON the API answers and the CLI prints: one shape for both, so
`stackbone limits ... --json` reads the same locally and through `--agent`.

No queries here: each function turns rows the selectors already loaded into plain dicts.
"""

from __future__ import annotations

from datetime import datetime

from limits.models import Limit, QueueEntry, Slot


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def limit_summary(limit: Limit) -> dict[str, object]:
    """A limit as the CLI and the API print it. `busy` counts busy and reserved slots together;
    `reserved` is the unconfirmed part of it."""
    return {
        "name": limit.name,
        "capacity": limit.capacity,
        "declared_capacity": limit.declared_capacity,
        "max_hold_ms": limit.max_hold_ms,
        "declared_max_hold_ms": limit.declared_max_hold_ms,
        "busy": limit.in_use,
        "reserved": limit.reserved_count,
        "waiting": limit.waiting_count,
        "capacity_overridden": limit.capacity_overridden,
        "max_hold_overridden": limit.max_hold_overridden,
        "declared": limit.declared,
    }


def slot_summary(slot: Slot) -> dict[str, object]:
    """A slot as the CLI and the API print it (times in ISO 8601). `reserved_until` is set while
    the slot waits for its run to confirm."""
    return {
        "id": slot.id,
        "state": slot.state,
        "run": slot.run_id,
        "label": slot.label,
        "granted_at": _iso(slot.granted_at),
        "expires_at": _iso(slot.expires_at),
        "reserved_until": _iso(slot.reserved_until) if slot.state == Slot.State.RESERVED else None,
    }


def queue_entry_summary(entry: QueueEntry, position: int) -> dict[str, object]:
    """A waiting run as the CLI and the API print it; `position` is 1 for the head of the queue."""
    return {
        "position": position,
        "run": entry.run_id,
        "label": entry.label,
        "waiting_since": _iso(entry.enqueued_at),
        "deadline": _iso(entry.deadline),
    }
