"""Reads for pages, the CLI and the API: querysets already ordered, figures from the counters.

The JSON shapes of these rows (for the API and the CLI) are limits.serializers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, Func, IntegerField, OuterRef, QuerySet, Subquery, Value, When
from django.utils import timezone

from limits import eta, insights
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


# How far back the activity's feed of releases looks: among the box's latest RECENT_FREES_SCANNED
# freed slots (every limit's), those of this limit. The slot_history_age index hands them newest
# first, so a page load reads at most this many index entries whatever the history holds.
RECENT_FREES_SCANNED = 1000


@dataclass(frozen=True, slots=True)
class SlotEvent:
    """One line of a limit's activity feed, from a Slot row (not from the audit log): a grant
    (`granted`, or `handed` when it came from the queue) or a slot freed by its run (`released`),
    by its reservation lapsing (`lapsed`) or by its run ending (`run_ended`)."""

    at: datetime
    action: str
    slot_id: str
    run_id: str
    label: str
    key: str

    is_slot_event = True


def slot_feed(limit: Limit, *, size: int) -> list[SlotEvent]:
    """The newest `size` grants and frees of a limit, newest first, in two bounded queries: the
    grants of its live slots (the slot_live_by_limit index; at most the slots it holds now), and
    its slots among the box's latest RECENT_FREES_SCANNED freed ones (slot_history_age). Frees an
    operator made and max-hold take-backs are left out: the audit log shows them already."""
    live = Slot.objects.filter(limit=limit, state__in=LIVE_SLOT_STATES).order_by("-granted_at", "-id")[:size]
    # The window is a subquery in FROM with its own LIMIT, so no planner can fold the limit's
    # filter into it and read the limit's whole history instead (PostgreSQL did, through the
    # foreign key's index, when the window was an IN (...) subquery).
    freed = Slot.objects.raw(
        f"""
        SELECT * FROM (
            SELECT * FROM {Slot._meta.db_table} WHERE freed_at IS NOT NULL ORDER BY freed_at DESC LIMIT %s
        ) recent
        WHERE limit_id = %s AND state <> %s AND NOT (state = %s AND freed_by <> '')
        ORDER BY freed_at DESC, id DESC
        LIMIT %s
        """,
        [RECENT_FREES_SCANNED, limit.pk, Slot.State.EXPIRED, Slot.State.RELEASED, size],
    )
    events: list[SlotEvent] = []
    for slot in [*live, *freed]:
        granted = "handed" if slot.queue_entry_id is not None else "granted"
        events.append(SlotEvent(slot.granted_at, granted, slot.id, slot.run_id, slot.label, slot.key))
        if slot.freed_at is not None:
            events.append(SlotEvent(slot.freed_at, slot.state, slot.id, slot.run_id, slot.label, slot.key))
    events.sort(key=lambda event: event.at, reverse=True)
    return events[:size]


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


# COUNT(*), not COUNT(id): the count then reads only the index (an index-only scan on PostgreSQL),
# never the rows; a plain Func, not the Count aggregate, so the subquery gets no GROUP BY.
COUNT_ROWS = Func(template="COUNT(*)", output_field=IntegerField())


def waits_of_run(run_id: str) -> list[QueueEntry]:
    """The queues a run waits in (oldest wait first), in two queries whatever the length of the
    queues and the number of waits (a run waits for a few limits at most):

    1. its waiting entries, each annotated with `place` (1-based, in the limit's whole queue),
       and for an entry with a key whose pool applies (the limit's per_key, or the key's own pool
       size), `key_place` (in its key's queue; else None) and `key_waiting` (from the key's
       counter row). Each place is a correlated COUNT of the entries ahead of it, which
       walks the partial index queue_waiting_order (or queue_waiting_by_key) up to the entry: its
       cost grows with the place, not with the table (docs/performance.md);
    2. the recent grant rate of those limits (recent_grant_rates), from which each entry gets
       `eta_seconds` (limits.eta.eta_seconds, unknown: None).
    """
    ahead = QueueEntry.objects.filter(
        limit=OuterRef("limit"), state=QueueEntry.State.WAITING, position__lt=OuterRef("position")
    ).order_by()
    key_ahead = ahead.filter(key=OuterRef("key")).exclude(key="")  # exclude: the partial index's condition
    key_row = LimitKey.objects.filter(limit=OuterRef("limit"), key=OuterRef("key"))
    rows = list(
        QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING)
        .select_related("limit")
        .annotate(
            ahead=Subquery(ahead.annotate(n=COUNT_ROWS).values("n")),
            key_ahead=Subquery(key_ahead.annotate(n=COUNT_ROWS).values("n")),
            key_waiting=Subquery(key_row.values("waiting_count")[:1]),
            key_pool_override=Subquery(key_row.values("pool_override")[:1]),
        )
        .order_by("enqueued_at", "id")
    )
    rates = recent_grant_rates({row.limit_id for row in rows}) if rows else {}
    for row in rows:  # for the template, not fields
        row.place = row.ahead + 1  # type: ignore[attr-defined]
        pooled = row.key and (row.limit.per_key is not None or row.key_pool_override is not None)
        row.key_place = row.key_ahead + 1 if pooled else None  # type: ignore[attr-defined]
        row.eta_seconds = eta.eta_seconds(row.ahead + 1, rates.get(row.limit_id))  # type: ignore[attr-defined]
    entries: list[QueueEntry] = [*rows]
    return entries


def queue_etas(limit: Limit, entries: Sequence[QueueEntry], *, first_place: int | None) -> list[int | None]:
    """eta_seconds (limits.eta) of a page of a limit's queue, in the rows' order: the same figure
    the run page shows for the same entry. `first_place` is the place of entries[0] when the rows
    follow each other in the limit's queue (a page of it: the places are first_place, + 1, ...);
    None when they are one key's rows, in key order, whose places in the limit's whole queue are
    then read in one query (limit_places). At most two queries (the rate, then the places); none
    for an empty page, one when the limit granted nothing recently (every row is unknown)."""
    if not entries:
        return []
    rate = recent_grant_rates([limit.id]).get(limit.id)
    if rate is None:
        return [None] * len(entries)
    if first_place is not None:
        places = [first_place + index for index in range(len(entries))]
    else:
        found = limit_places(limit, entries)
        places = [found[entry.id] for entry in entries]
    return [eta.eta_seconds(place, rate) for place in places]


PLACES_PER_QUERY = 200


def limit_places(limit: Limit, entries: Sequence[QueueEntry]) -> dict[int, int]:
    """The 1-based places in the limit's whole queue of `entries`, one key's rows in position
    order (a page of its queue). One query: a COUNT(*) of the waiting entries before the first,
    then one of those between each row and the next, each a range of the queue_waiting_order
    index, summed up here; so the index is read once from the head to the last row, as far as
    the last row's own place (more than PLACES_PER_QUERY rows: one query per that many)."""
    waiting = QueueEntry.objects.filter(limit_id=limit.id, state=QueueEntry.State.WAITING).order_by()
    positions = [entry.position for entry in entries]
    ahead, places = 0, {}
    for first in range(0, len(positions), PLACES_PER_QUERY):
        chunk = positions[first : first + PLACES_PER_QUERY]
        low = positions[first - 1] if first else None
        counts = {}
        for index, position in enumerate(chunk):
            span = waiting.filter(position__lt=position)
            if low is not None:
                span = span.filter(position__gte=low)
            counts[f"span_{index}"] = Subquery(span.annotate(n=COUNT_ROWS).values("n"))
            low = position
        spans = Limit.objects.filter(id=limit.id).annotate(**counts).values_list(*counts).get()
        for entry, span in zip(entries[first : first + PLACES_PER_QUERY], spans, strict=True):
            ahead += int(span)
            places[entry.id] = ahead + 1
    return places


def recent_grant_rates(limit_ids: Iterable[int]) -> dict[int, float | None]:
    """Grants per second of each limit over the last 10 complete minutes (None: none granted),
    from the per-minute rollup the sweep writes: one query. The one place the ETA reads it."""
    return insights.grant_rates(limit_ids)


# --- the CLI and the JSON API (issue 5) ----------------------------------------------------------


def get_slot(slot_id: str) -> Slot | None:
    if not is_storable_text(slot_id):
        return None
    return Slot.objects.select_related("limit").filter(id=slot_id).first()
