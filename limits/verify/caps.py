"""Checks m and n of `limits verify` (limits/verify/__init__.py). m: the caps on a limit's queue
(SPEC 14.5). No acquisition joined the queue while it already held max_waiting runs, or while its
key's runs held max_waiting_per_key of it (the runs without a key are one key); a lowering takes
nobody out, so the queue may stay longer than a lowered cap until runs leave it, and only a join
can break the rule. o: replace (SPEC 14.3). An entry that joined with on_full 'replace' left no
other entry of its key waiting for the same limits, and every replaced entry names the
acquisition that replaced it, of its key, joined at that instant."""

from __future__ import annotations

import datetime as dt
import heapq
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from limits.models import AuditEvent, QueueEntry
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
        same call, SPEC 14.2, 14.5): not judged either. Nor is a replaced entry (SPEC 14.3): the
        oldest one a replace finds becomes a row of history at a new ticket (full.take_place,
        limits_acquire_group), so among entries that joined at the same instant its position
        places it after runs that joined after it, and it was judged behind them (found by the
        model test, where the clock stands still: tests/model/test_found_verify.py). It still
        counts as waiting from its instant to its end, ordered at its old place (_join_order)."""
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
        for entry in sorted(self.entries, key=self._join_order()):
            at = entry["enqueued_at"]
            while waiting and waiting[0][0] <= at:
                _, _, key = heapq.heappop(waiting)
                by_key[key] -= 1
            first_join = entry["request"] not in seen
            seen.add(entry["request"])
            granted_as_it_joined = entry["state"] == "granted" and entry["finished_at"] == at  # never waited
            replaced = entry["state"] == QueueEntry.State.REPLACED
            judged = first_join and not granted_as_it_joined and not replaced and (since is None or at > since)
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

    def _join_order(self) -> Callable[[Mapping[str, Any]], tuple[dt.datetime, int, int]]:
        """The order the entries joined in: by instant, then by the place each took (its position),
        except for the row of history of the oldest entry a replace took the place of (SPEC 14.3,
        full.take_place, swap_place): that row moved to a new ticket at the end, the largest
        position of the rows its replacer replaced here, and its place (its old position) is its
        replacer's row now; so it is ordered there, just before its replacer. In one instant of the
        clock (several calls, or a join and the replace that follows it) ordering it by its new
        ticket would put it after runs that joined after it."""
        moved: dict[int, int] = {}  # the moved row's id: the position it had
        replacers: dict[str, int] = {}
        for e in self.entries:
            if e["replacing"]:
                replacers[e["request"]] = min(e["position"], replacers.get(e["request"], e["position"]))
        newest: dict[str, Mapping[str, Any]] = {}
        for e in self.entries:
            by = e["replaced_by"]
            if (
                e["state"] == QueueEntry.State.REPLACED
                and by
                and (by not in newest or e["position"] > newest[by]["position"])
            ):
                newest[by] = e
        for by, e in newest.items():
            if by in replacers and replacers[by] < e["position"]:
                moved[e["id"]] = replacers[by]
        return lambda e: (e["enqueued_at"], moved.get(e["id"], e["position"]), 0 if e["id"] in moved else 1)

    # --- o. replace ---------------------------------------------------------------------------

    def replace_left_two(self) -> list[str]:
        """A sweep line over the instants entries joined: at each, the entries that left by then
        leave first; an entry that joined with on_full 'replace' (`replacing`) must find no entry
        of its key, waiting for the same limits (its group's, read from the rows of its round),
        (each with the same key pool: a box bound's is the run's workflow, 12.3) that joined at an
        earlier instant and is still waiting after it (those it replaced left
        at that very instant). Entries joined at the same instant are not judged against each
        other (a lapse's requeue in the same call may follow the join), nor an entry granted at
        the instant it joined: the room left fitted it, so it replaced nobody (SPEC 14.3 as 14.2:
        "cannot be granted at once"; a run keeping its box slot needs no other, 12.2). And a 'replaced' entry
        names its replacer (`replaced_by`): an acquisition of its key here, not joined after it
        was replaced."""
        entries = self.entries
        if not any(e["replacing"] or e["state"] == QueueEntry.State.REPLACED for e in entries):
            return []
        limit = self.limit
        violations: list[str] = []
        sets = self._group_sets()
        by_request: dict[str, list[Mapping[str, Any]]] = {}
        for e in entries:
            by_request.setdefault(e["request"], []).append(e)

        def kind(e: Mapping[str, Any]) -> tuple[str, frozenset[tuple[int, str]]]:
            return (e["key"], sets.get((e["request"], e["enqueued_at"]), frozenset({(limit.id, e["key"])})))

        waiting: list[tuple[dt.datetime, int, str, frozenset[tuple[int, str]]]] = []
        by_kind: Counter[tuple[str, frozenset[tuple[int, str]]]] = Counter()
        ordered = sorted(entries, key=lambda e: (e["enqueued_at"], e["position"]))
        i = 0
        while i < len(ordered):
            at = ordered[i]["enqueued_at"]
            instant = []
            while i < len(ordered) and ordered[i]["enqueued_at"] == at:
                instant.append(ordered[i])
                i += 1
            while waiting and waiting[0][0] <= at:
                _, _, key, limits = heapq.heappop(waiting)
                by_kind[(key, limits)] -= 1
            for e in instant:
                granted_as_it_joined = e["state"] == "granted" and e["finished_at"] == at  # it fit: replaced nobody
                if e["replacing"] and not granted_as_it_joined and by_kind[kind(e)] > 0:
                    violations.append(
                        f"{limit.name}: {e['request']} joined at {_iso(at)} with on_full 'replace' and "
                        f"{by_kind[kind(e)]} other run(s) of key {e['key']!r} waiting for the same limits stayed"
                    )
            for e in instant:
                finished = e["finished_at"]
                if finished is None or finished > at:
                    heapq.heappush(waiting, (finished or FOREVER, e["position"], *kind(e)))
                    by_kind[kind(e)] += 1
        for e in entries:
            if e["state"] != QueueEntry.State.REPLACED:
                continue
            by = e["replaced_by"]
            replacer = by_request.get(by, []) if by else []
            if not by:
                violations.append(f"{limit.name}: #{e['position']} ({e['request']}) was replaced by no one named")
            elif replacer and (
                min(r["enqueued_at"] for r in replacer) > e["finished_at"]
                or any(r["key"] != e["key"] for r in replacer)
            ):
                violations.append(
                    f"{limit.name}: #{e['position']} ({e['request']}) names {by} as its replacer, which is not an "
                    f"acquisition of its key joined when it was replaced ({_iso(e['finished_at'])})"
                )
        return violations

    def _group_sets(self) -> dict[tuple[str, dt.datetime], frozenset[tuple[int, str]]]:
        """The limits of each round of the groups waiting here (request, joined at), each with
        its key pool (a box bound's is the run's workflow, SPEC 12.3): the rows of every limit
        that round joined together. A replace replaces the acquisitions waiting for the same
        limits with the same key in each (engine.sql: limits_acquire_group's replace)."""
        requests = sorted({e["request"] for e in self.entries if e["group_size"] > 1})
        found: dict[tuple[str, dt.datetime], set[tuple[int, str]]] = {}
        for start in range(0, len(requests), 500):
            rows = QueueEntry.objects.filter(request__in=requests[start : start + 500]).values_list(
                "request", "enqueued_at", "limit_id", "key"
            )
            for request, at, limit_id, key in rows:
                found.setdefault((request, at), set()).add((limit_id, key))
        return {round_: frozenset(limits) for round_, limits in found.items()}
