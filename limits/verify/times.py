"""Checks i and j of `limits verify` (limits/verify/__init__.py): time, on the box's one clock
(no time in its future, no expiry or time-out early), and pause (no grant while paused)."""

from __future__ import annotations

import datetime as dt

from limits.models import QueueEntry, Slot
from limits.verify.history import FOREVER, HistoryRows, _iso


class TimeChecks(HistoryRows):
    __slots__ = ()

    # --- i. time -----------------------------------------------------------------------------

    def times_off_the_clock(self, now: dt.datetime) -> list[str]:
        """Every time on the database's clock (`now`: read after the rows): none in its future,
        no expiry before grant + max hold, no time-out before the deadline. A host whose clock
        was off and stamped its own time would break one of these."""
        name = self.limit.name
        violations = []
        for slot in self.slots:
            for column in ("granted_at", "freed_at"):
                if slot[column] is not None and slot[column] > now:
                    violations.append(f"{name}: {slot['id']} {column} {_iso(slot[column])} is after now {_iso(now)}")
            if slot["state"] == Slot.State.EXPIRED and slot["freed_at"] < slot["expires_at"]:
                violations.append(
                    f"{name}: {slot['id']} was taken back at {_iso(slot['freed_at'])}, before its max hold "
                    f"ended at {_iso(slot['expires_at'])}"
                )
        for entry in self.entries:
            for column in ("enqueued_at", "finished_at"):
                if entry[column] is not None and entry[column] > now:
                    violations.append(
                        f"{name}: queue entry {entry['id']} {column} {_iso(entry[column])} is after now {_iso(now)}"
                    )
            if entry["state"] == QueueEntry.State.TIMED_OUT and entry["finished_at"] < entry["deadline"]:
                violations.append(
                    f"{name}: the wait of {entry['request']} timed out at {_iso(entry['finished_at'])}, before "
                    f"its deadline {_iso(entry['deadline'])}"
                )
        return violations

    # --- j. pause ---------------------------------------------------------------------------

    def grants_while_paused(self) -> list[str]:
        name, violations = self.limit.name, []
        spans = self.paused_spans()
        for slot in self.slots:
            granted = slot["granted_at"]
            for paused, resumed in spans:
                if paused < granted < resumed:
                    violations.append(
                        f"{name}: {slot['id']} granted at {_iso(granted)} while the limit was paused "
                        f"(since {_iso(paused)})"
                    )
        if self.limit.paused_at is not None and not (spans and spans[-1][1] == FOREVER):
            violations.append(f"{name}: paused since {_iso(self.limit.paused_at)} with no pause audited")
        return violations
