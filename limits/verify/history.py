"""The history reader of `limits verify` (limits/verify/__init__.py says what it proves): one
limit's slots, queue entries and audited changes, read inside one snapshot (`_snapshot`), as the
checks need them."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from django.db import connection, transaction

from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, QueueEntry, Slot

LIVE = frozenset(LIVE_SLOT_STATES)
FOREVER = dt.datetime.max.replace(tzinfo=dt.UTC)
_LEADING_INT = re.compile(r"\s*(\d+)")
_DECLARED_CAPACITY = re.compile(r"capacity (\d+)")
_BOX_CEILING = re.compile(r"ceiling (\d+)")  # the box's audit text (operator_actions._box_text)


class _snapshot:  # noqa: N801 - used as a context manager, like transaction.atomic
    """One transaction that sees one instant of the database."""

    def __enter__(self) -> None:
        outermost = not connection.in_atomic_block  # inside a caller's transaction: its snapshot
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._atomic.__exit__(exc_type, exc, traceback)


@dataclass(slots=True)
class HistoryRows:
    """One limit's rows, as the checks need them, and the readings several checks share (the
    capacity in force at each instant, the paused spans). Each area's checks are a subclass
    of it; `limits.verify.History` is them all."""

    limit: Limit
    slots: Sequence[Mapping[str, Any]]
    entries: Sequence[Mapping[str, Any]]
    capacity_events: Sequence[Mapping[str, Any]]
    pause_events: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def load(cls, limit: Limit) -> Self:
        slots = list(
            Slot.objects.filter(limit=limit)
            .order_by("granted_at", "id")
            .values(
                "id",
                "request",
                "run_id",
                "state",
                "granted_at",
                "expires_at",
                "freed_at",
                "confirmed_at",
                "queue_entry_id",
                "ends_with_run",
                "key",
                "group_size",
                "fair_pass",
            )
        )
        entries = list(
            QueueEntry.objects.filter(limit=limit)
            .order_by("position")
            .values(
                "id",
                "position",
                "request",
                "run_id",
                "state",
                "enqueued_at",
                "deadline",
                "finished_at",
                "key",
                "group_size",
                "passed_over_at",
                "fair_pass",
                "replaced_by",
                "replacing",
            )
        )
        events = list(
            AuditEvent.objects.filter(
                limit=limit, action__in=[AuditEvent.Action.CAPACITY, AuditEvent.Action.SYNC, AuditEvent.Action.BOX]
            )
            .order_by("at", "id")
            .values("at", "action", "old_value", "new_value", "capacity_after")
        )
        pauses = list(
            AuditEvent.objects.filter(limit=limit, action__in=[AuditEvent.Action.PAUSE, AuditEvent.Action.RESUME])
            .order_by("at", "id")
            .values("at", "action")
        )
        return cls(limit, slots, entries, events, pauses)

    # --- the capacity in force at each instant (checks a and l) --------------------------

    def capacity_timeline(self) -> tuple[int, list[tuple[dt.datetime, int]]]:
        """The capacity in force before the first recorded change, and (at, capacity after) for
        each change. Rows written before `capacity_after` existed are read from their text."""
        events = self.capacity_events
        if not events:
            return self.limit.capacity, []
        overridden = False
        changes: list[tuple[dt.datetime, int]] = []
        current = _capacity_before(events[0])
        for event in events:
            if event["action"] == AuditEvent.Action.CAPACITY:
                overridden = "(declared)" not in event["new_value"]
            after = event["capacity_after"]
            if after is None:
                after = _capacity_after_from_text(event, current, overridden)
            changes.append((event["at"], after))
            current = after
        return _capacity_before(events[0]), changes

    # --- the paused spans (checks j and l) -----------------------------------------------

    def paused_spans(self) -> list[tuple[dt.datetime, dt.datetime]]:
        """[pause, resume) of each pause in the audit; the last one open while paused now."""
        spans: list[tuple[dt.datetime, dt.datetime]] = []
        paused_at: dt.datetime | None = None
        for event in self.pause_events:
            if event["action"] == AuditEvent.Action.PAUSE:
                paused_at = event["at"] if paused_at is None else paused_at
            elif paused_at is not None:
                spans.append((paused_at, event["at"]))
                paused_at = None
        if paused_at is not None:
            spans.append((paused_at, FOREVER))
        return spans


def _capacity_before(event: Mapping[str, Any]) -> int:
    """The capacity in force before the first recorded change. A capacity change records the old
    capacity; a sync records the old declared values, and before any capacity change there was
    no override (a limit is created without one)."""
    pattern = _LEADING_INT if event["action"] == AuditEvent.Action.CAPACITY else _DECLARED_CAPACITY
    if "ceiling" in event["old_value"]:
        pattern = _BOX_CEILING
    found = pattern.match(event["old_value"]) if pattern is _LEADING_INT else pattern.search(event["old_value"])
    if found:
        return int(found.group(1))
    return event["capacity_after"] if event["capacity_after"] is not None else 0


def _capacity_after_from_text(event: Mapping[str, Any], current: int, overridden: bool) -> int:
    """For audit rows written before `capacity_after` existed."""
    if event["action"] == AuditEvent.Action.CAPACITY:
        found = _LEADING_INT.match(event["new_value"])
        return int(found.group(1)) if found else current
    found = (_BOX_CEILING if "ceiling" in event["new_value"] else _DECLARED_CAPACITY).search(event["new_value"])
    return int(found.group(1)) if found and not overridden else current


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat()
