"""Reads of a limit's keys panel (SPEC 9, 13): each key's pool from its counter row (KeyPool), a
page at a time, the pool of the runs without a key, and a fair limit's shares and turns."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from django.db.models import Q, QuerySet, Sum

from limits.engine import keys as engine_keys
from limits.models import Limit, LimitKey, pool_size
from limits.selectors.pages import Page, clamp_page


@dataclass(frozen=True, slots=True)
class KeyPool:
    """One key's pool on a limit, from its LimitKey counters ("" is the no-key pool, whose
    figures are the limit's counters minus the keyed ones)."""

    key: str
    busy: int
    reserved: int
    waiting: int
    size: int | None  # the pool size in force; None: only the limit's total applies
    override: int | None  # this key's own pool size, set by an operator
    weight: int = 1  # SPEC 13.1: its weight on a fair limit
    minimum: int = 0  # SPEC 13.1: its min on a fair limit
    fair_share: float | None = None  # SPEC 13.5 (fair_share); None on a fifo limit or while idle
    turns: float | None = None  # SPEC 13.2: its pass, in turns (`turns`); None where fair_share is

    @property
    def in_use(self) -> int:
        return self.busy + self.reserved

    @property
    def overridden(self) -> bool:
        return self.override is not None

    @property
    def full(self) -> bool:
        return self.size is not None and self.in_use >= self.size

    @property
    def fair_fields(self) -> tuple[tuple[str, int, str, int], ...]:
        """The settable fields of a fair limit's row, for the template's loop: (form field,
        value, label, the value an empty field resets to)."""
        return (("weight", self.weight, "Weight", 1), ("min", self.minimum, "Min", 0))

    @property
    def dom_id(self) -> str:
        """A stable HTML id for the key's row and field, whatever characters the key holds (htmx
        puts the focus back on the field with the same id after a refresh)."""
        return "key-" + hashlib.blake2s(self.key.encode(), digest_size=8).hexdigest()


def key_pools(limit: Limit, search: str = "") -> QuerySet[LimitKey]:
    """The keys of a limit, busiest first (then by key), those whose key contains `search` (any
    case). Ordered along the limitkey_busiest index: a page never sorts every key."""
    rows = LimitKey.objects.filter(limit=limit).order_by("-busy_count", "key")
    return rows.filter(key__icontains=search) if search else rows


def key_pools_page(limit: Limit, *, search: str, number: int, size: int, weights: int | None = None) -> Page[KeyPool]:
    """A page of key_pools(limit, search) in one or two queries: the first page of a limit with
    fewer keys than a page is its one read; otherwise the keys are counted first, from their own
    rows (one per key, along the index), never from slots or queue entries. `weights`
    (fair_weights, read once by the caller) gives each key its fair share on a fair limit."""
    rows = key_pools(limit, search)
    if number <= 1:
        first = list(rows[:size])
        total = len(first) if len(first) < size else rows.count()
        return Page([_key_pool(limit, row, weights) for row in first], 1, size, total)
    total = rows.count()
    number = clamp_page(number, total=total, size=size)
    offset = (number - 1) * size
    return Page([_key_pool(limit, row, weights) for row in rows[offset : offset + size]], number, size, total)


def no_key_pool(limit: Limit, weights: int | None = None) -> KeyPool | None:
    """The pool shared by runs that acquire without a key, while the limit has per_key in force
    (SPEC 9.1), or on a fair limit (`weights` given) while it holds or waits (it shares as a key
    of weight 1); None otherwise (the no-key runs then count only against the total)."""
    pool = KeyPool(
        key="",
        busy=limit.busy_count - limit.keyed_busy_count,
        reserved=limit.reserved_count - limit.keyed_reserved_count,
        waiting=limit.waiting_count - limit.keyed_waiting_count,
        size=limit.per_key,
        override=None,
    )
    active = pool.in_use > 0 or pool.waiting > 0
    if limit.per_key is None and not (weights is not None and active):
        return None
    passed = turns(limit.nokey_fair_pass) if weights is not None and active else None
    return replace(pool, fair_share=fair_share(limit, weight=1, active=active, weights=weights), turns=passed)


def _key_pool(limit: Limit, row: LimitKey, weights: int | None = None) -> KeyPool:
    active = row.in_use > 0 or row.waiting_count > 0
    return KeyPool(
        key=row.key,
        busy=row.busy_count,
        reserved=row.reserved_count,
        waiting=row.waiting_count,
        size=pool_size(row.pool_override, limit.per_key),
        override=row.pool_override,
        weight=row.weight,
        minimum=row.minimum,
        fair_share=fair_share(limit, weight=row.weight, active=active, weights=weights),
        turns=turns(row.fair_pass) if weights is not None and active else None,
    )


def fair_weights(limit: Limit) -> int | None:
    """On a fair limit (SPEC 13.5), the sum of the weights of the keys holding or waiting, the
    pool of runs without a key counting as a key of weight 1 when it holds or waits: one
    aggregate query, whatever the number of keys. None on a fifo limit (no query)."""
    if not limit.is_fair:
        return None
    active = Q(busy_count__gt=0) | Q(reserved_count__gt=0) | Q(waiting_count__gt=0)
    total = LimitKey.objects.filter(active, limit=limit).aggregate(total=Sum("weight"))["total"] or 0
    no_key = (limit.busy_count + limit.reserved_count + limit.waiting_count) - (
        limit.keyed_busy_count + limit.keyed_reserved_count + limit.keyed_waiting_count
    )
    return total + (1 if no_key > 0 else 0)


def fair_share(limit: Limit, *, weight: int, active: bool, weights: int | None) -> float | None:
    """A key's fair share of the capacity (SPEC 13.5): capacity x weight / `weights` (from
    fair_weights), to two decimals. None on a fifo limit, and for a key neither holding nor
    waiting (it shares in nothing until it does)."""
    if weights is None or not active or weights <= 0:
        return None
    return round(limit.capacity * weight / weights, 2)


def turns(fair_pass: int) -> float:
    """A key's pass in turns (one turn: engine_keys.PASS_STRIDE, each grant adds 1 / weight of
    one, SPEC 13.2), to two decimals, as Studio, the CLI and the API show it."""
    return round(fair_pass / engine_keys.PASS_STRIDE, 2)
