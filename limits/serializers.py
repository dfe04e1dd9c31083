"""Rows as the JSON the API answers and the CLI prints: one shape for both, so
`stackbone limits ... --json` reads the same locally and through `--agent`.

The summaries run no queries: each turns rows already loaded into plain dicts. The few reads at
the end (a limit's keys, one key's slots and queue, the limits of a group acquisition) are the
ones the CLI and the API share and limits.selectors does not offer; each is a constant number of
queries whatever the size of the limit.

No key is `null` in JSON (the rows store it as ""): `key` is null on a slot or queue entry taken
without a key, and on the `no_key` pool of `keys`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from limits.engine.results import Reason
from limits.models import ForgottenLimit, Limit, LimitKey, QueueEntry, Slot
from limits.models import pool_size as pool_in_force
from limits.selectors import fair_share, fair_weights, turns

Groups = Mapping[str, list[str]]


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def limit_summary(limit: Limit, *, box_base: int | None = None) -> dict[str, object]:
    """A limit as the CLI and the API print it. `kind` is "limit" (declared in the workspace) or
    "workflow" (a workflow's own bound, SPEC 11.5: its capacity is the workflow's total, and it
    has no max hold, so `max_hold_ms` and `declared_max_hold_ms` are null). The three figures of
    SPEC 6.5, as everywhere: `busy` the confirmed slots, `reserved` the slots handed to a run and
    not yet confirmed, `in_use` both (what counts against capacity). `per_key` is each key's
    pool size in force, null when only the total applies. `paused` is true while an operator has
    paused the limit (SPEC 5.6: it grants nothing until resumed), `paused_at` since when (null
    while it runs). `on_full` ("wait", "skip" or "replace"), `max_waiting` and `max_waiting_per_key` (null:
    no cap) are in force, each with its declared value and whether an operator overrode it (SPEC
    14.1, 14.6); `skipped_count` and `refused_count` count the acquisitions answered at once
    instead of queued: skipped, or refused at a queue's cap (SPEC 14.2, 14.5); `replaced_count` the
    entries of its queue a newer acquisition of their key replaced (SPEC 14.3).

    The box's run concurrency (SPEC 12, `kind` "box") has `capacity` its ceiling, floor(base x
    burst), and also `base` (no workflow executes more runs at once; its per_key), `burst`, their
    declared values and whether an operator overrode them. A workflow's own bound also has
    `in_force`, the runs of it that execute at once, and `capped_by_box`: true when `box_base`
    (the declared box's base, selectors.box_base) is below its total (SPEC 12.3, "capped by the
    box's base"). Under a box, any other limit has `whole_runs_in_force` (at most that many runs
    hold it for their whole run at once: its capacity, or the base below it) and `capped_by_box`;
    its slots taken in bodies still have the whole capacity."""
    bound = limit.is_workflow_bound
    no_hold = bound or limit.is_box  # a run holds its slot of either until it ends (or suspends)
    summary: dict[str, object] = {
        "name": limit.name,
        "kind": limit.kind,
        "capacity": limit.capacity,
        "declared_capacity": limit.declared_capacity,
        "max_hold_ms": None if no_hold else limit.max_hold_ms,
        "declared_max_hold_ms": None if no_hold else limit.declared_max_hold_ms,
        "busy": limit.busy_count,
        "reserved": limit.reserved_count,
        "in_use": limit.in_use,
        "waiting": limit.waiting_count,
        "capacity_overridden": limit.capacity_overridden,
        "max_hold_overridden": limit.max_hold_overridden,
        "declared": limit.declared,
        "per_key": limit.per_key,
        "declared_per_key": limit.declared_per_key,
        "per_key_overridden": limit.per_key_overridden,
        "paused": limit.paused,
        "paused_at": _iso(limit.paused_at),
        "share": limit.share,
        "declared_share": limit.declared_share,
        "share_overridden": bool(limit.share_override),
        "on_full": limit.on_full,
        "declared_on_full": limit.declared_on_full,
        "on_full_overridden": bool(limit.on_full_override),
        "max_waiting": limit.max_waiting,
        "declared_max_waiting": limit.declared_max_waiting,
        "max_waiting_overridden": limit.max_waiting_override is not None,
        "max_waiting_per_key": limit.max_waiting_per_key,
        "declared_max_waiting_per_key": limit.declared_max_waiting_per_key,
        "max_waiting_per_key_overridden": limit.max_waiting_per_key_override is not None,
        "skipped_count": limit.skipped_count,
        "refused_count": limit.refused_count,
        "replaced_count": limit.replaced_count,
        "cancelled_count": limit.cancelled_count,
    }
    if limit.is_box:
        summary |= box_fields(limit)
    elif bound or box_base is not None:
        capped = box_base is not None and box_base < limit.capacity
        in_force = box_base if capped and box_base is not None else limit.capacity
        summary |= {"whole_runs_in_force": in_force, "capped_by_box": capped}
        if bound:
            summary["in_force"] = in_force
    return summary


def box_fields(limit: Limit) -> dict[str, object]:
    """The box bound's base and burst (SPEC 12.1, 12.5): in force, declared, overridden."""
    return {
        "base": limit.per_key,
        "declared_base": limit.declared_per_key,
        "base_overridden": limit.per_key_override is not None,
        "burst": limit.burst,
        "declared_burst": limit.declared_burst,
        "burst_overridden": limit.burst_override is not None,
    }


def _group(request: str, group_size: int, groups: Groups | None) -> list[str] | None:
    if group_size <= 1:
        return None
    return list((groups or {}).get(request, []))


def slot_summary(slot: Slot, groups: Groups | None = None, *, bound: bool = False) -> dict[str, object]:
    """A slot as the CLI and the API print it (times in ISO 8601). `reserved_until` is set while
    the slot waits for its run to confirm. `group` names the limits of its acquisition when it
    took several (`group_size` > 1), from `groups` (slot_groups). A slot of a workflow's own
    bound (`bound`) lasts as long as its run: its `expires_at` is null."""
    return {
        "id": slot.id,
        "state": slot.state,
        "run": slot.run_id,
        "label": slot.label,
        "key": slot.key or None,
        "group_size": slot.group_size,
        "group": _group(slot.request, slot.group_size, groups),
        "granted_at": _iso(slot.granted_at),
        "expires_at": None if bound else _iso(slot.expires_at),
        "reserved_until": _iso(slot.reserved_until) if slot.state == Slot.State.RESERVED else None,
    }


def queue_entry_summary(
    entry: QueueEntry,
    position: int,
    groups: Groups | None = None,
    *,
    eta_seconds: int | None = None,
    reason: Reason | None = None,
    estimated: bool = False,
) -> dict[str, object]:
    """A waiting run as the CLI and the API print it; `position` is 1 for the head of the queue
    (of the key's queue, when the list is filtered by key): on a fair limit the queue is in the
    order the grant will serve it (SPEC 13.7), and `position_estimated` is true past the runs
    walked exactly (limits.selectors.fair_queue_rows). `group` names the limits the run
    waits for together (from entry_groups) when it waits for several. `eta_seconds` is its
    estimated wait in this limit's queue (limits.selectors.queue_etas, the rule in limits.eta),
    null when unknown (the limit granted nothing in the last 10 minutes). `reason` says why it
    waits (SPEC 6.5, limits.services.why_waiting): {code, text, limit[, key][, owed_run]}."""
    return {
        "position": position,
        "position_estimated": estimated,
        "run": entry.run_id,
        "label": entry.label,
        "key": entry.key or None,
        "group_size": entry.group_size,
        "group": _group(entry.request, entry.group_size, groups),
        "waiting_since": _iso(entry.enqueued_at),
        "deadline": _iso(entry.deadline),
        "eta_seconds": eta_seconds,
        "reason": None if reason is None else reason.as_json(),
    }


def forgotten_summary(record: ForgottenLimit) -> dict[str, object]:
    """A forgotten limit's record (limits.forget) as `forget --json` and the API answer it:
    `removed` counts the rows of its history that went, by kind."""
    return {
        "forgotten": True,
        "limit": record.name,
        "kind": record.kind,
        "at": _iso(record.at),
        "actor": record.actor,
        "removed": dict(record.removed),
    }


def pool_size(limit: Limit, pool_override: int | None) -> int | None:
    """A key's pool size: its own override, else the limit's per_key, else None (only the total
    applies)."""
    return pool_in_force(pool_override, limit.per_key)


def key_summary(limit: Limit, key: LimitKey, weights: int | None = None) -> dict[str, object]:
    """One key's pool under a limit: `busy`, `reserved` and `in_use` as a limit's; its `weight`
    and `min` (SPEC 13.1) and, on a fair limit, its `fair_share` of the capacity given `weights`
    (selectors.fair_weights; null on a fifo limit or for a key neither holding nor waiting) and
    its `pass`, its place in the limit's turns (SPEC 13.2), in turns to two decimals
    (selectors.turns; null where `fair_share` is)."""
    active = key.in_use > 0 or key.waiting_count > 0
    return {
        "key": key.key,
        "busy": key.busy_count,
        "reserved": key.reserved_count,
        "in_use": key.in_use,
        "waiting": key.waiting_count,
        "pool": pool_size(limit, key.pool_override),
        "pool_override": key.pool_override,
        "pool_overridden": key.pool_override is not None,
        "weight": key.weight,
        "min": key.minimum,
        "fair_share": fair_share(limit, weight=key.weight, active=active, weights=weights),
        "pass": turns(key.fair_pass) if weights is not None and active else None,
    }


def unused_key_summary(limit: Limit, key: str) -> dict[str, object]:
    """A key no run has used and no operator has sized yet: an empty pool of the limit's per_key."""
    return key_summary(limit, LimitKey(limit=limit, key=key))


def no_key_summary(limit: Limit, weights: int | None = None) -> dict[str, object]:
    """The pool of runs that acquire without a key: the limit's counters minus the keyed part.
    On a fair limit it shares as a key of weight 1 and min 0 (not settable)."""
    reserved = max(limit.reserved_count - limit.keyed_reserved_count, 0)
    busy = max(limit.busy_count - limit.keyed_busy_count, 0)
    waiting = max(limit.waiting_count - limit.keyed_waiting_count, 0)
    return {
        "key": None,
        "busy": busy,
        "reserved": reserved,
        "in_use": busy + reserved,
        "waiting": waiting,
        "pool": limit.per_key,
        "pool_override": None,
        "pool_overridden": False,
        "weight": 1,
        "min": 0,
        "fair_share": fair_share(limit, weight=1, active=busy + reserved + waiting > 0, weights=weights),
        "pass": turns(limit.nokey_fair_pass) if weights is not None and busy + reserved + waiting > 0 else None,
    }


# --- shared reads (CLI and API) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rows[T]:
    """Rows from an offset, and how many there are in all (from counters where there are)."""

    items: list[T]
    total: int


def keys(limit: Limit, *, key: str | None = None, search: str = "") -> QuerySet[LimitKey]:
    """A limit's keys, busiest first (by busy slots, then by key, along the limitkey_busiest
    index): the one named `key` (exact), or those whose key contains `search` (any case, as
    Studio's filter)."""
    rows = LimitKey.objects.filter(limit=limit).order_by("-busy_count", "key")
    if key is not None:
        rows = rows.filter(key=key)
    return rows.filter(key__icontains=search) if search else rows


def keys_rows(limit: Limit, *, key: str | None, search: str = "", offset: int, size: int) -> Rows[LimitKey]:
    """A page of keys(limit, key, search): two queries (a count of the limit's keys, then the
    rows), none more whatever the number of slots."""
    rows = keys(limit, key=key, search=search)
    total = rows.count()
    return Rows(list(rows[offset : offset + size]) if offset < total else [], total)


def get_key(limit: Limit, key: str) -> LimitKey | None:
    return LimitKey.objects.filter(limit=limit, key=key).first()


def key_row(limit: Limit, key: str) -> dict[str, object]:
    """One key's row as `keys` shows it (key_summary, with its fair share on a fair limit), also
    for a key no run has used yet: at most two queries."""
    row = get_key(limit, key)
    if row is None:
        return unused_key_summary(limit, key)
    return key_summary(limit, row, fair_weights(limit))


def key_slots_rows(limit: Limit, key: str, *, offset: int, size: int) -> Rows[Slot]:
    """One key's busy slots, then its reserved ones, each in grant order: split by the key's
    counters like selectors.live_slots_page, so each part follows the slot_live_by_key index."""
    counters = get_key(limit, key)
    if counters is None:
        return Rows([], 0)
    live = Slot.objects.filter(limit=limit, key=key).order_by("granted_at", "id")
    rows: list[Slot] = []
    if offset < counters.busy_count:
        rows = list(live.filter(state=Slot.State.BUSY)[offset : offset + size])
    if len(rows) < size and counters.reserved_count:
        start = max(offset - counters.busy_count, 0)
        reserved = live.filter(state=Slot.State.RESERVED).order_by("granted_at", "queue_entry_id", "id")
        rows += list(reserved[start : start + size - len(rows)])
    return Rows(rows, counters.in_use)


def key_queue_rows(limit: Limit, key: str, *, offset: int, size: int) -> Rows[QueueEntry]:
    """One key's waiting runs in queue order (a row's position in the key's queue is its offset
    + 1, + 2, ...)."""
    counters = get_key(limit, key)
    if counters is None:
        return Rows([], 0)
    waiting = QueueEntry.objects.filter(limit=limit, key=key, state=QueueEntry.State.WAITING).order_by("position")
    return Rows(list(waiting[offset : offset + size]), counters.waiting_count)


def slot_groups(slots: Iterable[Slot]) -> dict[str, list[str]]:
    """The limits of each group acquisition among `slots` (request → limit names, sorted): one
    query, and none when no slot belongs to a group."""
    requests = {slot.request for slot in slots if slot.group_size > 1}
    if not requests:
        return {}
    return _names_by_request(Slot.objects.filter(request__in=requests).values_list("request", "limit__name"))


def entry_groups(entries: Iterable[QueueEntry]) -> dict[str, list[str]]:
    """The limits each group among `entries` waits for together (request → limit names, sorted):
    one query, and none when no entry belongs to a group."""
    requests = {entry.request for entry in entries if entry.group_size > 1}
    if not requests:
        return {}
    pairs = QueueEntry.objects.filter(request__in=requests, state=QueueEntry.State.WAITING).values_list(
        "request", "limit__name"
    )
    return _names_by_request(pairs)


def _names_by_request(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    names: dict[str, set[str]] = {}
    for request, name in pairs:
        names.setdefault(request, set()).add(name)
    return {request: sorted(found) for request, found in names.items()}
