"""Check m of `limits verify` (limits/verify/__init__.py): the caps on a limit's queue (SPEC
14.5). No acquisition joined the queue while it already held max_waiting runs, or while its key's
runs held max_waiting_per_key of it (the runs without a key are one key); a lowering takes nobody
out, so the queue may stay longer than a lowered cap until runs leave it, and only a join can
break the rule."""

from __future__ import annotations

import datetime as dt
import heapq
from collections import Counter

from limits.models import AuditEvent
from limits.verify.history import FOREVER, HistoryRows, _iso


class CapChecks(HistoryRows):
    __slots__ = ()

    # --- m. queue caps ------------------------------------------------------------------------

    def queue_over_cap(self) -> list[str]:
        """A sweep line over the entries in the order they joined (enqueued_at, position): the
        runs waiting when each joined are those that joined before it and had not left
        (finished_at after its instant). Judged on a limit with a cap in force now, for joins
        after the last audited change of its declared values or caps (the caps of the past are
        not kept), and only for an acquisition's first join: a reservation that lapsed goes back
        to the queue whatever its length (3.6). A run's start (its request '<run>:start') is
        judged as any acquisition (capped since issue 47). An entry granted at the instant it
        joined never made the queue longer (a run the room left fits joins and is granted in the
        same call, SPEC 14.2, 14.5): not judged either."""
        limit = self.limit
        cap, per_key = limit.max_waiting, limit.max_waiting_per_key
        if cap is None and per_key is None:
            return []
        since = (
            AuditEvent.objects.filter(
                limit=limit,
                action__in=[AuditEvent.Action.SYNC, AuditEvent.Action.MAX_WAITING, AuditEvent.Action.MAX_WAITING_KEY],
            )
            .order_by("-at")
            .values_list("at", flat=True)
            .first()
        )
        violations: list[str] = []
        waiting: list[tuple[dt.datetime, int, str]] = []  # (finished_at, position, key): a heap by leaving time
        by_key: Counter[str] = Counter()
        seen: set[str] = set()
        for entry in sorted(self.entries, key=lambda e: (e["enqueued_at"], e["position"])):
            at = entry["enqueued_at"]
            while waiting and waiting[0][0] <= at:
                _, _, key = heapq.heappop(waiting)
                by_key[key] -= 1
            first_join = entry["request"] not in seen
            seen.add(entry["request"])
            granted_as_it_joined = entry["state"] == "granted" and entry["finished_at"] == at  # never waited
            judged = first_join and not granted_as_it_joined and (since is None or at > since)
            if judged and cap is not None and len(waiting) >= cap:
                violations.append(
                    f"{limit.name}: {entry['request']} joined at {_iso(at)} behind {len(waiting)} waiting runs "
                    f"(max_waiting {cap})"
                )
            elif judged and per_key is not None and by_key[entry["key"]] >= per_key:
                violations.append(
                    f"{limit.name}: {entry['request']} joined at {_iso(at)} behind {by_key[entry['key']]} waiting "
                    f"runs of key {entry['key']!r} (max_waiting_per_key {per_key})"
                )
            finished = entry["finished_at"]
            if finished is None or finished > at:
                heapq.heappush(waiting, (finished or FOREVER, entry["position"], entry["key"]))
                by_key[entry["key"]] += 1
        return violations
