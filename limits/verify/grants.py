"""Checks b, c and g of `limits verify` (limits/verify/__init__.py): each grant as it was made.
From the queue in position order, at once only with no run waiting (b); one grant per acquire
call (c); a group's slots on all its limits in one instant (g)."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from limits.engine.results import WHOLE_RUN_SUFFIX
from limits.models import Limit, QueueEntry, Slot
from limits.verify.history import FOREVER, HistoryRows, _iso


class GrantChecks(HistoryRows):
    __slots__ = ()

    # --- b. queue order ---------------------------------------------------------------------

    def queue_jumps(self, cutoff: dt.datetime) -> list[str]:
        """Grants from the queue in position order, and grants at once only with no run waiting.

        1. Entry E granted at t (its slot's granted_at, equal to E's finished_at): every entry F
           with a smaller position had left the queue by t, or its deadline had passed by t.
           F was queued before E (positions are handed out under the lock, in order). F leaving
           at t itself is fine: the grant times out stale waits in the same transaction.
        2. A slot with no queue entry (granted at once, SPEC 2.2): no entry was waiting then.
        """
        name = self.limit.name
        granted_at = {slot["queue_entry_id"]: slot["granted_at"] for slot in self.slots if slot["queue_entry_id"]}
        violations: list[str] = []
        blocking: dt.datetime | None = None  # the latest instant until which an earlier entry blocked
        culprit: Mapping[str, Any] | None = None
        # With keys, strict order holds within each key (f): an older entry of another key may
        # wait because its pool is full. Group entries may wait for another limit (g).
        keyed = any(entry["key"] for entry in self.entries) or self.limit.per_key is not None
        # Under the box, a run's start may wait for the base of whole runs on this limit (12.3),
        # as a key's run waits for its pool: it is not passed over then.
        whole_runs_capped = any(e["request"].endswith(WHOLE_RUN_SUFFIX) for e in self.entries) and (
            Limit.objects.filter(kind=Limit.Kind.BOX).exists()
        )
        blocking_by_key: dict[str, tuple[dt.datetime, Mapping[str, Any]]] = {}
        group_blocking: list[Mapping[str, Any]] = []
        for entry in self.entries:
            if entry["state"] == QueueEntry.State.GRANTED:
                at = granted_at.get(entry["id"])
                if at is None or at != entry["finished_at"]:
                    if entry["finished_at"] is None or entry["finished_at"] >= cutoff:
                        violations.append(f"{name}: entry #{entry['position']} granted without a slot at its finish")
                elif blocking is not None and culprit is not None and blocking > at:
                    violations.append(
                        f"{name}: #{entry['position']} ({entry['run_id']}) granted at {_iso(at)} while "
                        f"#{culprit['position']} ({culprit['run_id']}) waited with its deadline to come"
                    )
                elif entry["key"] in blocking_by_key and blocking_by_key[entry["key"]][0] > at:
                    other = blocking_by_key[entry["key"]][1]
                    violations.append(
                        f"{name}: #{entry['position']} ({entry['run_id']}) granted at {_iso(at)} while "
                        f"#{other['position']} ({other['run_id']}) of the same key waited"
                    )
                passed = [e for e in group_blocking if at is not None and _unmarked_before(e, entry, at)]
                if at is not None and passed and entry["group_size"] == 1 and not keyed:
                    violations.append(
                        f"{name}: #{entry['position']} granted at {_iso(at)} passed group entry "
                        f"#{passed[0]['position']} over without marking it passed over"
                    )
            blocks_until = min(entry["finished_at"] or FOREVER, entry["deadline"])
            if entry["group_size"] > 1:
                # It may wait for another of its limits (g), or a whole run's start for the base.
                if not (whole_runs_capped and entry["request"].endswith(WHOLE_RUN_SUFFIX)):
                    group_blocking.append(entry)
            elif keyed:
                held = blocking_by_key.get(entry["key"])
                if held is None or blocks_until > held[0]:
                    blocking_by_key[entry["key"]] = (blocks_until, entry)
            elif blocking is None or blocks_until > blocking:
                blocking, culprit = blocks_until, entry

        waits: list[tuple[dt.datetime, int]] = []
        for entry in self.entries:
            if entry["finished_at"] == entry["enqueued_at"]:
                continue  # queued and served in one instant: it never stood in anyone's way
            waits.append((entry["enqueued_at"], 2))
            if entry["finished_at"] is not None:
                waits.append((entry["finished_at"], 0))
        waits.extend((slot["granted_at"], 1) for slot in self.slots if slot["queue_entry_id"] is None)
        waits.sort()
        waiting = 0
        for at, kind in waits:
            if kind == 2:
                waiting += 1
            elif kind == 0:
                waiting -= 1
            elif waiting > 0:
                violations.append(f"{name}: a slot granted at once at {_iso(at)} while {waiting} run(s) waited")
        return violations

    # --- c. one grant per request -----------------------------------------------------------

    def request_histories(self, cutoff: dt.datetime) -> list[str]:
        """Per acquire call (request): its queue entries, in position order, are all granted but
        the last (it queues again only after its reservation lapsed or was released); its slots,
        in grant order, never overlap; every slot but the last was a reservation freed
        unconfirmed (lapsed or released), so at most one was ever confirmed."""
        name = self.limit.name
        violations: list[str] = []
        entries: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for entry in self.entries:
            entries[entry["request"]].append(entry)
        slots: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        positions = {entry["id"]: entry["position"] for entry in self.entries}
        for slot in sorted(self.slots, key=lambda s: (s["granted_at"], positions.get(s["queue_entry_id"], 0))):
            slots[slot["request"]].append(slot)
        for request, history in entries.items():
            if any(entry["state"] != QueueEntry.State.GRANTED for entry in history[:-1]):
                states = ", ".join(entry["state"] for entry in history)
                violations.append(f"{name}: request {request} queued again after an entry not granted ({states})")
        for request, history in slots.items():
            for earlier, later in zip(history, history[1:], strict=False):
                if earlier["freed_at"] is None or earlier["freed_at"] > later["granted_at"]:
                    violations.append(
                        f"{name}: request {request} had two live slots at once: {earlier['id']}, {later['id']}"
                    )
                if earlier["confirmed_at"] is not None or earlier["state"] not in (
                    Slot.State.LAPSED,
                    Slot.State.RELEASED,
                ):
                    violations.append(
                        f"{name}: request {request}: slot {earlier['id']} ({earlier['state']}) "
                        "was followed by another grant"
                    )
            if sum(slot["confirmed_at"] is not None for slot in history) > 1:
                violations.append(f"{name}: request {request} was confirmed twice")
            direct = [slot for slot in history if slot["queue_entry_id"] is None]
            if direct and (len(history) > 1 or request in entries):
                violations.append(f"{name}: request {request} was granted at once and also through the queue")
            trimmed = any((entry["finished_at"] or FOREVER) < cutoff for entry in entries.get(request, [])) or any(
                (slot["freed_at"] or FOREVER) < cutoff for slot in history
            )
            granted = sum(entry["state"] == QueueEntry.State.GRANTED for entry in entries.get(request, []))
            if granted != len(history) - len(direct) and not trimmed:
                violations.append(
                    f"{name}: request {request}: {granted} granted entries but {len(history) - len(direct)} queue slots"
                )
        return violations

    # --- g. groups ----------------------------------------------------------------------------

    def partial_groups(self, cutoff: dt.datetime) -> list[str]:
        """Each grant of a group gave one slot of every limit of the acquisition in one instant.
        At one instant a group may be granted, sent back (an operator's release of its
        reservation) and granted again: then every limit of it has the same number of slots."""
        grants = {(slot["request"], slot["granted_at"]) for slot in self.slots if slot["group_size"] > 1}
        if not grants:
            return []
        sizes = {(slot["request"], slot["granted_at"]): slot["group_size"] for slot in self.slots}
        found: dict[tuple[str, dt.datetime], Counter[int]] = defaultdict(Counter)
        for request, granted_at, limit_id in Slot.objects.filter(request__in={r for r, _ in grants}).values_list(
            "request", "granted_at", "limit_id"
        ):
            found[(request, granted_at)][limit_id] += 1
        violations = []
        for request, at in sorted(grants):
            per_limit = found[(request, at)]
            whole = len(per_limit) == sizes[(request, at)] and len(set(per_limit.values())) == 1
            if not whole and at >= cutoff:
                violations.append(
                    f"{self.limit.name}: group {request} was granted {sum(per_limit.values())} slots on "
                    f"{len(per_limit)} of its {sizes[(request, at)]} limits at {_iso(at)}"
                )
        return violations


def _unmarked_before(group_entry: Mapping[str, Any], granted: Mapping[str, Any], at: dt.datetime) -> bool:
    """An older group entry still waiting at `at`, not yet marked passed over (10.4)."""
    still_waiting = min(group_entry["finished_at"] or FOREVER, group_entry["deadline"]) > at
    unmarked = group_entry["passed_over_at"] is None or group_entry["passed_over_at"] > at
    return bool(group_entry["position"] < granted["position"] and still_waiting and unmarked)
