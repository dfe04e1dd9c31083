"""Reads for pages, the CLI and the API: querysets already ordered, figures from the counters.

The JSON shapes of these rows (for the API and the CLI) are limits.serializers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.utils import timezone

from limits.engine import keys as engine_keys
from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, LimitKey, QueueEntry, Slot, is_storable_text

KINDS = tuple(Limit.Kind.values)  # ("limit", "workflow"): the values of a kind filter


def limits(search: str = "", kind: str = "") -> QuerySet[Limit]:
    """Every limit (whose name contains `search`; of `kind`, "limit" or "workflow", if given),
    declared first, by name. Counters are on the rows: no joins, no counts."""
    rows = Limit.objects.order_by("-declared", "name")
    if kind:
        rows = rows.filter(kind=kind)
    return rows.filter(name__contains=search) if search else rows


def limits_page(*, search: str, kind: str = "", number: int, size: int) -> Page[Limit]:
    """A page of limits(search, kind): two queries (a count of the limits table, then the page)."""
    rows = limits(search, kind)
    total = rows.count()
    number = clamp_page(number, total=total, size=size)
    offset = (number - 1) * size
    return Page(list(rows[offset : offset + size]), number, size, total)


def get_limit(name: str) -> Limit | None:
    if not is_storable_text(name):
        return None  # no limit has that name, and the database could not even compare it
    return Limit.objects.filter(name=name).first()


def live_slots(limit: Limit) -> QuerySet[Slot]:
    """Busy slots, then reserved ones, each oldest grant first."""
    return (
        Slot.objects.filter(limit=limit, state__in=LIVE_SLOT_STATES)
        .alias(
            busy_first=Case(When(state=Slot.State.BUSY, then=Value(0)), default=Value(1), output_field=IntegerField())
        )
        .order_by("busy_first", "granted_at", "id")
    )


def waiting_entries(limit: Limit) -> QuerySet[QueueEntry]:
    """The queue in order. A page's positions are its offset + 1, + 2, ..."""
    return QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING).order_by("position")


def activity(limit: Limit) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(limit=limit).order_by("-at", "-id")


# --- pages of a limit (Studio) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Page[T]:
    """One page of a long list whose total comes from a counter, never from COUNT(*)."""

    items: list[T]
    number: int
    size: int
    total: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def pages(self) -> int:
        return max((self.total + self.size - 1) // self.size, 1)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first_index(self) -> int:
        """1-based index of the first row on this page (a queue position)."""
        return self.offset + 1

    @property
    def last_index(self) -> int:
        return self.offset + len(self.items)


def clamp_page(number: int, *, total: int, size: int) -> int:
    return min(max(number, 1), max((total + size - 1) // size, 1))


def live_slots_page(limit: Limit, *, number: int, size: int) -> Page[Slot]:
    """A page of live_slots(limit) in at most two queries that each follow the partial index
    (busy slots by grant, then reserved ones by grant), split by the limit's busy counter, so a
    page deep into 100,000 slots never sorts them all."""
    total = limit.in_use
    number = clamp_page(number, total=total, size=size)
    offset = (number - 1) * size
    live = Slot.objects.filter(limit=limit).order_by("granted_at", "id")
    rows: list[Slot] = []
    if offset < limit.busy_count:
        rows = list(live.filter(state=Slot.State.BUSY)[offset : offset + size])
    if len(rows) < size and limit.reserved_count:
        start = max(offset - limit.busy_count, 0)
        # Reservations granted together are in queue order: entries are created in position order.
        reserved = live.filter(state=Slot.State.RESERVED).order_by("granted_at", "queue_entry_id", "id")
        rows += list(reserved[start : start + size - len(rows)])
    return Page(rows, number, size, total)


def queue_page(limit: Limit, *, number: int, size: int) -> Page[QueueEntry]:
    """A page of the queue in order; a row's position is page.first_index + its index."""
    total = limit.waiting_count
    number = clamp_page(number, total=total, size=size)
    offset = (number - 1) * size
    return Page(list(waiting_entries(limit)[offset : offset + size]), number, size, total)


def recent_activity(limit: Limit, *, size: int) -> list[AuditEvent]:
    return list(activity(limit)[:size])


# --- keys and groups (SPEC 9, 10) -----------------------------------------------------------------


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
    def dom_id(self) -> str:
        """A stable HTML id for the key's row and field, whatever characters the key holds (htmx
        puts the focus back on the field with the same id after a refresh)."""
        return "key-" + hashlib.blake2s(self.key.encode(), digest_size=8).hexdigest()


def key_pools(limit: Limit, search: str = "") -> QuerySet[LimitKey]:
    """The keys of a limit, busiest first (then by key), those whose key contains `search` (any
    case). Ordered along the limitkey_busiest index: a page never sorts every key."""
    rows = LimitKey.objects.filter(limit=limit).order_by("-busy_count", "key")
    return rows.filter(key__icontains=search) if search else rows


def key_pools_page(limit: Limit, *, search: str, number: int, size: int) -> Page[KeyPool]:
    """A page of key_pools(limit, search) in one or two queries: the first page of a limit with
    fewer keys than a page is its one read; otherwise the keys are counted first, from their own
    rows (one per key, along the index), never from slots or queue entries."""
    rows = key_pools(limit, search)
    if number <= 1:
        first = list(rows[:size])
        total = len(first) if len(first) < size else rows.count()
        return Page([_key_pool(limit, row) for row in first], 1, size, total)
    total = rows.count()
    number = clamp_page(number, total=total, size=size)
    offset = (number - 1) * size
    return Page([_key_pool(limit, row) for row in rows[offset : offset + size]], number, size, total)


def no_key_pool(limit: Limit) -> KeyPool | None:
    """The pool shared by runs that acquire without a key, while the limit has per_key in force
    (SPEC 9.1); None otherwise (the no-key runs then count only against the total)."""
    if limit.per_key is None:
        return None
    return KeyPool(
        key="",
        busy=limit.busy_count - limit.keyed_busy_count,
        reserved=limit.reserved_count - limit.keyed_reserved_count,
        waiting=limit.waiting_count - limit.keyed_waiting_count,
        size=limit.per_key,
        override=None,
    )


def _key_pool(limit: Limit, row: LimitKey) -> KeyPool:
    return KeyPool(
        key=row.key,
        busy=row.busy_count,
        reserved=row.reserved_count,
        waiting=row.waiting_count,
        size=row.pool_override if row.pool_override is not None else limit.per_key,
        override=row.pool_override,
    )


def held_capacity(limit: Limit) -> int:
    """Free capacity the limit holds for an owed run (SPEC 10.4): no query unless runs of
    several limits wait on it, then one."""
    if limit.group_waiting_count == 0:
        return 0
    return engine_keys.held(limit, timezone.now())


def with_group_partners[Row: (Slot, QueueEntry)](limit: Limit, rows: Sequence[Row]) -> Sequence[Row]:
    """Give each row of an acquisition of several limits (group_size > 1) the names of the other
    limits of its group, `row.partners`, from the live slots (or waiting entries) that share its
    request: one query for the whole page, none when no row on it belongs to a group."""
    for row in rows:
        row.partners = []  # type: ignore[attr-defined]  # for the template, not a field
    grouped = {row.request: row for row in rows if row.group_size > 1}
    if not grouped:
        return rows
    if isinstance(rows[0], Slot):
        others = Slot.objects.filter(state__in=LIVE_SLOT_STATES).values_list("request", "limit__name")
    else:
        others = QueueEntry.objects.filter(state=QueueEntry.State.WAITING).values_list("request", "limit__name")
    names: dict[str, set[str]] = {}
    for request, name in others.filter(request__in=list(grouped)).exclude(limit=limit):
        names.setdefault(request, set()).add(name)
    for request, row in grouped.items():
        row.partners = sorted(names.get(request, ()))  # type: ignore[attr-defined]
    return rows


# --- a run's hold on limits (Studio run page) ----------------------------------------------------


def live_slots_of_run(run_id: str) -> list[Slot]:
    """The busy and reserved slots a run holds, on any limit, oldest grant first."""
    return list(
        Slot.objects.filter(run_id=run_id, state__in=LIVE_SLOT_STATES)
        .select_related("limit")
        .order_by("granted_at", "id")
    )


def waits_of_run(run_id: str) -> list[QueueEntry]:
    """The queues a run waits in, each with its 1-based position (one query per wait)."""
    entries = list(
        QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING)
        .select_related("limit")
        .order_by("enqueued_at", "id")
    )
    for entry in entries:
        entry.place = (  # type: ignore[attr-defined]  # for the template, not a field
            QueueEntry.objects.filter(
                limit_id=entry.limit_id, state=QueueEntry.State.WAITING, position__lt=entry.position
            ).count()
            + 1
        )
    return entries


# --- the CLI and the JSON API (issue 5) ----------------------------------------------------------


def get_slot(slot_id: str) -> Slot | None:
    if not is_storable_text(slot_id):
        return None
    return Slot.objects.select_related("limit").filter(id=slot_id).first()
