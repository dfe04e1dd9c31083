"""Reads for pages, the CLI and the API: querysets already ordered, figures from the counters.

The JSON shapes of these rows (for the API and the CLI) are limits.serializers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import connection
from django.db.models import Case, F, Func, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce

from limits import eta, insights
from limits.config import BOX_NAME
from limits.engine import keys as engine_keys
from limits.engine import waiting as engine_waiting
from limits.models import (
    LIVE_SLOT_STATES,
    AuditEvent,
    Limit,
    LimitKey,
    QueueEntry,
    Slot,
    is_storable_text,
    pool_size,
)
from stackbone.plumbing import clock as box_clock

KINDS = tuple(Limit.Kind.values)  # ("limit", "workflow", "box"): the values of a kind filter
BOX_FIRST = Case(When(kind=Limit.Kind.BOX, then=Value(0)), default=Value(1), output_field=IntegerField())


def limits(search: str = "", kind: str = "") -> QuerySet[Limit]:
    """Every limit (whose name contains `search`; of `kind`, "limit", "workflow" or "box", if
    given), declared first, the box's run concurrency at the top (SPEC 12.6), then by name.
    Counters are on the rows: no joins, no counts."""
    rows = Limit.objects.alias(box_first=BOX_FIRST).order_by("-declared", "box_first", "name")
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


def box() -> Limit | None:
    """The box's run concurrency (SPEC 12): the limit 'box' of kind box, declared or not; None
    when the workspace never declared run_concurrency."""
    return Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX).first()


def box_base(limits: Iterable[Limit] = ()) -> int | None:
    """The declared box's base: no single workflow executes more runs at once (SPEC 12.3); None
    without a declared box. Read from `limits` when the box is among them, else one query."""
    for limit in limits:
        if limit.is_box:
            return limit.per_key if limit.declared else None
    found = (
        Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True)
        .values_list("declared_per_key", "per_key_override")
        .first()
    )
    if found is None:
        return None
    declared, override = found
    return override if override is not None else declared


def get_limit(name: str) -> Limit | None:
    """The limit named so, with `box_base` (the declared box's base, SPEC 12.3, or None) read in
    the same query: a limit's page shows what the base caps without one more round trip."""
    if not is_storable_text(name):
        return None  # no limit has that name, and the database could not even compare it
    base = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).values(
        base=Coalesce("per_key_override", "declared_per_key")
    )[:1]
    return Limit.objects.filter(name=name).annotate(box_base=Subquery(base)).first()


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
class Numbered[T]:
    """A row of a page with its place in the whole list (1-based), and whether that place is an
    estimate (a fair limit's queue past the runs walked exactly, SPEC 13.7)."""

    place: int
    estimated: bool
    item: T


@dataclass(frozen=True, slots=True)
class Page[T]:
    """One page of a long list whose total comes from a counter, never from COUNT(*).
    `estimated_after`: places past it are estimates (a fair limit's queue: fair_queue_rows);
    None when every place is exact."""

    items: list[T]
    number: int
    size: int
    total: int
    estimated_after: int | None = None
    next_key: str | None = None  # a fair queue's (fair_queue_rows): the key its next freed slot goes to

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

    @property
    def numbered(self) -> list[Numbered[T]]:
        """The rows with their places: first_index, + 1, ..."""
        after = self.estimated_after
        return [
            Numbered(place, after is not None and place > after, item)
            for place, item in enumerate(self.items, start=self.first_index)
        ]


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
    """A page of the queue in order; a row's position is page.first_index + its index. On a fair
    limit the order the grant serves it (fair_queue_rows: the first `size` runs exact, deeper ones
    estimated: `Page.estimated_after`)."""
    total = limit.waiting_count
    number = clamp_page(number, total=total, size=size)
    offset = (number - 1) * size
    if limit.is_fair and total:
        fair = fair_queue_rows(limit, exact=size, offset=offset, size=size)
        return Page(fair.items, number, size, total, estimated_after=fair.exact, next_key=fair.next_key)
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
    # One arm per live state, each the newest `size` along slot_live_by_limit (limit, state,
    # granted_at) read backwards: with `state IN (...)` the planner read every live slot of the
    # limit and sorted them (40 ms at 100,000 busy slots). Subqueries in FROM, so SQLite takes
    # their ORDER BY and LIMIT too.
    table = Slot._meta.db_table
    arm = (
        f"SELECT * FROM (SELECT * FROM {table} WHERE limit_id = %s AND state = %s"
        " ORDER BY granted_at DESC, id DESC LIMIT %s) newest"
    )
    live = Slot.objects.raw(
        f"{arm} UNION ALL {arm}", [limit.pk, Slot.State.BUSY, size, limit.pk, Slot.State.RESERVED, size]
    )
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


def held_capacity(limit: Limit) -> int:
    """Free capacity the limit holds for an owed run (SPEC 10.4): no query unless runs of
    several limits wait on it, then one."""
    if limit.group_waiting_count == 0:
        return 0
    return engine_keys.held(limit, box_clock.now())


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


def with_reasons(limit: Limit, page: Page[QueueEntry]) -> Sequence[QueueEntry]:
    """Give each waiting entry of a page of `limit`'s queue `reason`: why it is not granted now
    (SPEC 6.5), by the grant's own rules (limits.engine.waiting.why_waiting): no query for a limit
    without room or without keys and groups waiting, a few otherwise, whatever the size of the
    page. On a fair limit the key next is the page's walk's (SPEC 13.7: its first row's)."""
    entries = page.items
    walked = {limit.id: page.next_key} if page.estimated_after is not None else None
    reasons = engine_waiting.why_waiting(entries, limits=[limit], next_keys=walked)
    for entry in entries:
        entry.reason = reasons.get(entry.id)  # type: ignore[attr-defined]  # for the template, not a field
    return entries


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

# A place is counted exactly up to this many runs from the head or from the tail of a queue;
# deeper than that from both ends it is an estimate from the tickets (queue_place).
EXACT_PLACES = 10_000


class CappedCount(Subquery):
    """How many rows a subquery has, counting at most as many as its slice: `(SELECT COUNT(*)
    FROM (... LIMIT n))`, so the count stops after n index entries."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) AS capped_rows)"


def _capped(rows: QuerySet[QueueEntry], cap: int) -> CappedCount:
    return CappedCount(rows.values("position")[:cap], output_field=IntegerField())


@dataclass(frozen=True, slots=True)
class Place:
    """A run's place in a queue: 1-based, exact unless `approximate` (queue_place)."""

    number: int
    approximate: bool = False


def queue_place(
    *, ahead: int, behind: int, waiting: int | None, position: int, head: int, tail: int, cap: int
) -> Place:
    """The rule of a waiting run's place, from what one query read of its queue (waits_of_run):

    - `ahead` and `behind`: the waiting runs before and after it, each counted up to `cap`
      (EXACT_PLACES) and no further, so a place never costs more than 2 x cap index entries;
    - `waiting`: the queue's counter (the limit's waiting_count, a key's LimitKey.waiting_count;
      None when the key has no row), read in the same statement;
    - `position`, `head`, `tail`: its ticket and the first and last waiting tickets.

    Fewer than cap ahead: the place is ahead + 1, exact. Else fewer than cap behind: it is
    waiting - behind, exact (counted from the tail). Else it is deeper than cap from both ends,
    and the place is estimated from the tickets: its share of the way from the head's ticket to
    the tail's, times the queue's length, rounded to cap / 10 and kept deeper than cap from
    both ends (`approximate`: shown as "about 500,000th"). Tickets of runs that left leave gaps,
    so the estimate is off by the gaps' unevenness, never by more than the queue's length."""
    if ahead < cap:
        return Place(ahead + 1)
    total = max(waiting or 0, ahead + behind + 1)
    if behind < cap:
        return Place(max(total - behind, cap + 1))
    share = (position - head) / (tail - head) if tail > head else 0.5
    unit = max(cap // 10, 1)
    estimate = round((1 + share * (total - 1)) / unit) * unit
    return Place(min(max(estimate, cap + 1), max(total - cap, cap + 1)), approximate=True)


def waits_of_run(run_id: str) -> list[QueueEntry]:
    """The queues a run waits in (oldest wait first), in two queries whatever the length of the
    queues and the number of waits (a run waits for a few limits at most):

    1. its waiting entries, each annotated with what queue_place needs of the limit's whole queue
       and, for an entry with a key, of its key's queue: the runs ahead and behind it, each a
       COUNT capped at EXACT_PLACES along the partial index queue_waiting_order (or
       queue_waiting_by_key), and the first and last tickets; and the key's counter row. So a
       place costs at most 2 x EXACT_PLACES index entries, at any depth (docs/performance.md);
    2. the recent grant rate of those limits (recent_grant_rates).

    Each entry gets `place` (1-based, in the limit's whole queue; on a fair limit in the order the
    grant will serve it, `fair_queue`: fair_places, a few queries more) and `place_approximate`
    (queue_place); for an entry with a key whose pool applies (the limit's per_key, or the key's
    own pool size) `key_place` and `key_place_approximate` (else None and False) and
    `key_waiting`; and `eta_seconds` (limits.eta.eta_seconds of `place`, unknown: None).
    """
    cap = EXACT_PLACES
    waiting = QueueEntry.objects.filter(limit=OuterRef("limit"), state=QueueEntry.State.WAITING).order_by()
    keyed = waiting.filter(key=OuterRef("key")).exclude(key="")  # exclude: the partial index's condition
    key_row = LimitKey.objects.filter(limit=OuterRef("limit"), key=OuterRef("key"))

    def ends(rows: QuerySet[QueueEntry], prefix: str) -> dict[str, Subquery]:
        return {
            f"{prefix}head": Subquery(rows.order_by("position").values("position")[:1]),
            f"{prefix}tail": Subquery(rows.order_by("-position").values("position")[:1]),
            f"{prefix}ahead": _capped(rows.filter(position__lt=OuterRef("position")).order_by("position"), cap),
        }

    def behind(rows: QuerySet[QueueEntry], prefix: str) -> dict[str, Case]:
        # Only counted when there can be cap runs ahead (tickets are unique, so no more runs are
        # ahead than tickets between the head's and its own): near the head it costs nothing.
        count = _capped(rows.filter(position__gt=OuterRef("position")).order_by("-position"), cap)
        deep = When(position__gte=F(f"{prefix}head") + cap, then=count)
        return {f"{prefix}behind": Case(deep, default=Value(0), output_field=IntegerField())}

    rows = list(
        QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING)
        .select_related("limit")
        .annotate(
            **ends(waiting, ""),
            **ends(keyed, "key_"),
            key_waiting=Subquery(key_row.values("waiting_count")[:1]),
            key_pool_override=Subquery(key_row.values("pool_override")[:1]),
        )
        .annotate(**behind(waiting, ""), **behind(keyed, "key_"))
        .order_by("enqueued_at", "id")
    )
    rates = recent_grant_rates({row.limit_id for row in rows}) if rows else {}
    fair = _fair_places_of_run(rows)
    for row in rows:  # for the template, not fields
        place = fair.get(row.id) or _place_of(row, "", row.limit.waiting_count, cap)
        row.fair_queue = row.id in fair  # type: ignore[attr-defined]
        row.place, row.place_approximate = place.number, place.approximate  # type: ignore[attr-defined]
        pooled = row.key and (row.limit.per_key is not None or row.key_pool_override is not None)
        key_place = _place_of(row, "key_", row.key_waiting, cap) if pooled else None
        row.key_place = key_place.number if key_place else None  # type: ignore[attr-defined]
        row.key_place_approximate = bool(key_place and key_place.approximate)  # type: ignore[attr-defined]
        row.eta_seconds = eta.eta_seconds(place.number, rates.get(row.limit_id))  # type: ignore[attr-defined]
    entries: list[QueueEntry] = [*rows]
    return entries


def _fair_places_of_run(rows: Sequence[QueueEntry]) -> dict[int, Place]:
    """The places of a run's waits on fair limits, in the order the grant will serve each queue
    (SPEC 13.7, fair_places): a few queries per fair limit it waits for, none for the others. A
    run's runs of its key ahead of it come from waits_of_run's counts (for a run without a key,
    one more count)."""
    found: dict[int, Place] = {}
    for row in rows:
        if not row.limit.is_fair:
            continue
        if row.key:
            ahead = int(row.key_ahead or 0)  # type: ignore[attr-defined]
        else:
            older = QueueEntry.objects.filter(
                limit_id=row.limit_id, state=QueueEntry.State.WAITING, key="", position__lt=row.position
            )
            ahead = older.order_by("position")[:EXACT_PLACES].count()
        found |= fair_places(row.limit, [(row, ahead)])
    return found


def _place_of(row: QueueEntry, prefix: str, waiting: int | None, cap: int) -> Place:
    def value(name: str) -> int:
        found = getattr(row, prefix + name)
        return row.position if found is None else int(found)  # head/tail: the run itself at least

    return queue_place(
        ahead=int(getattr(row, prefix + "ahead") or 0),
        behind=int(getattr(row, prefix + "behind") or 0),
        waiting=waiting,
        position=row.position,
        head=value("head"),
        tail=value("tail"),
        cap=cap,
    )


def queue_etas(
    limit: Limit, entries: Sequence[QueueEntry], *, first_place: int | None, key_offset: int = 0
) -> list[int | None]:
    """eta_seconds (limits.eta) of a page of a limit's queue, in the rows' order: the same figure
    the run page shows for the same entry. `first_place` is the place of entries[0] when the rows
    follow each other in the limit's queue (a page of it: the places are first_place, + 1, ...);
    None when they are one key's rows, in key order (`key_offset` of its runs before them), whose
    places in the limit's whole queue are then read in one query (limit_places). At most two
    queries (the rate, then the places); none for an empty page, one when the limit granted
    nothing recently (every row is unknown). On a fair limit the places are in the order the grant
    will serve the queue (SPEC 13.7): a page's are its own (fair_queue_rows); one key's rows are
    placed by fair_places (a few queries more)."""
    if not entries:
        return []
    rate = recent_grant_rates([limit.id]).get(limit.id)
    if rate is None:
        return [None] * len(entries)
    if limit.is_fair:
        if first_place is not None:
            return [eta.eta_seconds(first_place + index, rate) for index in range(len(entries))]
        fair = fair_places(limit, [(entry, key_offset + index) for index, entry in enumerate(entries)])
        return [eta.eta_seconds(fair[entry.id].number, rate) for entry in entries]
    if first_place is not None:
        places = [first_place + index for index in range(len(entries))]
    else:
        found = limit_places(limit, entries)
        places = [found[entry.id] for entry in entries]
    shown = places_as_shown(limit, entries, places)
    return [eta.eta_seconds(place.number, rate) for place in shown]


def places_as_shown(limit: Limit, entries: Sequence[QueueEntry], places: Sequence[int]) -> list[Place]:
    """Exact places of a page of the limit's queue as the run page shows them (queue_place), so a
    run's estimated wait is the same figure on its page, in the CLI and in the API: a place
    deeper than EXACT_PLACES from both ends becomes the run page's estimate (one more query, for
    the first and last tickets; none when every place is within the cap of an end)."""
    cap, waiting = EXACT_PLACES, limit.waiting_count
    if all(place <= cap or waiting - place < cap for place in places):
        return [Place(place) for place in places]
    tickets = QueueEntry.objects.filter(limit_id=limit.id, state=QueueEntry.State.WAITING).order_by()
    head = tickets.order_by("position").values_list("position", flat=True).first()
    tail = tickets.order_by("-position").values_list("position", flat=True).first()
    return [
        queue_place(
            ahead=min(place - 1, cap),
            behind=min(max(waiting - place, 0), cap),
            waiting=waiting,
            position=entry.position,
            head=entry.position if head is None else head,
            tail=entry.position if tail is None else tail,
            cap=cap,
        )
        for entry, place in zip(entries, places, strict=True)
    ]


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
    """Grants per second of each limit (None: none granted recently): over the last 60 s when
    it granted at least limits.eta.RECENT_MIN_GRANTS then, else over the last 10 complete
    minutes of the sweep's rollup (limits.eta.grant_rate): one query. The one place the ETA
    reads it."""
    return insights.eta_rates(limit_ids)


# --- a fair limit's queue in the order it is served (SPEC 13.7) ----------------------------------

# The runs of a fair limit's queue walked exactly (limits.eta.fair_order) for a place on the run
# page or a key's rows: the first page of Studio's queue (views.QUEUE_PER_PAGE is this), so a run
# on it has the same place on both pages. A listing walks its own first page, at most
# FAIR_EXACT_MAX.
FAIR_EXACT_ROWS = 50
FAIR_EXACT_MAX = 500
FAIR_READ_ROUNDS = 3  # reads of the keys' runs for one walk: the first, then more for a key that ran short
ARMS_PER_QUERY = 200  # per-key reads per statement (SQLite takes at most 500 arms in one UNION)


@dataclass(frozen=True, slots=True)
class FairHead:
    """The first runs of a fair limit's queue in the order the grant will serve them (`entries`,
    exact: limits.eta.fair_order's model), and the walk that found them: each key's pass and runs
    taken after them, from which deeper places are estimated (`_turn_ordered`, fair_places)."""

    entries: list[QueueEntry]
    walk: eta.FairWalk


def fair_head(limit: Limit, rows: int) -> FairHead:
    """The first `rows` runs of a fair limit's queue in the order of SPEC 13.2, walked by
    limits.eta.fair_order from a few reads, whatever the number of keys and runs waiting:

    1. the keys of the slots that free first (the oldest grants; as many as the walk may free);
    2. the keys that can come up in `rows` grants: the first `rows` keys in the fair order whose
       pool has room (each of them is served before any key behind it can be, unless its run is
       served first: the index limitkey_fair_order on PostgreSQL), and the keys of those slots
       (freeing lowers their share); the runs without a key as one more key;
    3. each such key's first waiting runs, in arrival order, as many as it may take (a key that
       runs short is read again, further, at most FAIR_READ_ROUNDS reads in all; the walk stops
       where one still runs short and the rest of the queue is estimated)."""
    over = max(limit.in_use - limit.capacity, 0)
    frees = _free_order(limit, over + rows)
    keys = _fair_keys(limit, frees, rows)
    if not keys or not rows:
        return FairHead([], eta.fair_order({}, room=0, frees=[], rows=0))
    share = -(-rows // len(keys)) + 1
    wanted = {key.key: min(key.waiting, share) for key in keys.values()}
    found: dict[tuple[str, int], QueueEntry] = {}
    for _ in range(FAIR_READ_ROUNDS):
        read = _first_waiting(limit, wanted)
        found = {(entry.key, entry.position): entry for entries in read.values() for entry in entries}
        for name, key in keys.items():
            key.heads = [entry.position for entry in read.get(name, [])]
            key.floor = key.heads[-1] + 1 if key.heads else key.floor
        walk = eta.fair_order(keys, room=limit.capacity - limit.in_use, frees=frees, rows=rows)
        if walk.short is None:
            break
        # More of the key that ran short, and of every key the walk took all that was read of.
        for name, key in walk.keys.items():
            if name == walk.short or (key.taken and key.taken >= len(key.heads)):
                wanted[name] = min(key.waiting, max(rows, 2 * wanted[name]))
    return FairHead([found[place] for place in walk.order], walk)


def _free_order(limit: Limit, count: int) -> list[str]:
    """The keys of the limit's first `count` slots in use, oldest grant first ("" for no key):
    the order the walk frees them in. One statement, an arm per state along slot_live_by_limit."""
    if count <= 0 or not limit.in_use:
        return []
    table = Slot._meta.db_table
    arm = (
        f"SELECT * FROM (SELECT key, granted_at, id FROM {table} WHERE limit_id = %s AND state = %s"
        " ORDER BY granted_at, id LIMIT %s) AS {name}"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"{arm.format(name='busy')} UNION ALL {arm.format(name='reserved')} ORDER BY 2, 3 LIMIT %s",
            [limit.pk, Slot.State.BUSY, count, limit.pk, Slot.State.RESERVED, count, count],
        )
        return [key for key, _, _ in cursor.fetchall()]


def _fair_keys(limit: Limit, frees: Sequence[str], rows: int) -> dict[str, eta.FairKey]:
    """The keys with runs waiting that can come up in the first `rows` grants (fair_head, 2), as
    the walk ranks them: one statement on the key rows, and the no-key runs from the limit's
    counters (weight 1, min 0, the pool per key)."""
    table = LimitKey._meta.db_table
    share = eta.fair_share_sql(connection.vendor)
    freeing = sorted({key for key in frees if key})
    sql = f"""
        SELECT * FROM (
            SELECT * FROM {table}
            WHERE limit_id = %s AND head IS NOT NULL
              AND (COALESCE(pool_override, %s) IS NULL OR busy_count + reserved_count < COALESCE(pool_override, %s))
            ORDER BY limit_id, busy_count + reserved_count >= minimum, {share}, fair_pass, head
            LIMIT %s
        ) AS first_keys"""
    params: list[int | str | None] = [limit.pk, limit.per_key, limit.per_key, rows]
    if freeing:  # an arm of its own: with an OR, PostgreSQL would read every key of the limit
        named = ", ".join(["%s"] * len(freeing))
        sql += f" UNION ALL SELECT * FROM {table} WHERE limit_id = %s AND head IS NOT NULL AND key IN ({named})"
        params += [limit.pk, *freeing]
    keys = {
        row.key: eta.FairKey(
            key=row.key,
            in_use=row.in_use,
            weight=row.weight,
            minimum=row.minimum,
            pool=pool_size(row.pool_override, limit.per_key),
            fair_pass=row.fair_pass,
            stride=engine_keys.stride(row.weight),
            waiting=row.waiting_count,
            floor=row.head or 0,
        )
        for row in LimitKey.objects.raw(sql, params)
    }
    no_key_waiting = limit.waiting_count - limit.keyed_waiting_count
    if no_key_waiting > 0:
        keys[""] = eta.FairKey(
            key="",
            in_use=limit.in_use - limit.keyed_busy_count - limit.keyed_reserved_count,
            weight=1,
            minimum=0,
            pool=limit.per_key,
            fair_pass=limit.nokey_fair_pass,
            stride=engine_keys.stride(1),
            waiting=no_key_waiting,
        )
    return keys


def _first_waiting(limit: Limit, wanted: dict[str, int]) -> dict[str, list[QueueEntry]]:
    """Each key's first `wanted[key]` waiting runs, in arrival order: an arm per key along
    queue_waiting_by_key (queue_waiting_order for the runs without a key), ARMS_PER_QUERY arms a
    statement."""
    table = QueueEntry._meta.db_table
    asked = [(key, count) for key, count in sorted(wanted.items()) if count > 0]
    found: dict[str, list[QueueEntry]] = {}
    for start in range(0, len(asked), ARMS_PER_QUERY):
        arms, params = [], []
        for index, (key, count) in enumerate(asked[start : start + ARMS_PER_QUERY]):
            keyed = "key = %s AND key <> ''" if key else "key = %s"
            arms.append(
                f"SELECT * FROM (SELECT * FROM {table} WHERE limit_id = %s AND state = 'waiting' AND {keyed}"
                f" ORDER BY position LIMIT %s) AS arm_{index}"
            )
            params += [limit.pk, key, count]
        for entry in QueueEntry.objects.raw(" UNION ALL ".join(arms), params):
            found.setdefault(entry.key, []).append(entry)
    for entries in found.values():
        entries.sort(key=lambda entry: entry.position)
    return found


@dataclass(frozen=True, slots=True)
class FairRows:
    """Rows of a fair limit's queue in the order the grant will serve it (fair_queue_rows): places
    up to `exact` are exact, deeper ones estimated; `next_key` is the key whose run the next freed
    slot goes to (the first row's; why_waiting's next_keys), None when none can be served."""

    items: list[QueueEntry]
    exact: int
    next_key: str | None


def fair_queue_rows(limit: Limit, *, exact: int, offset: int, size: int | None) -> FairRows:
    """Rows [offset, offset + size) (size None: to the end) of a fair limit's queue in the order
    the grant will serve it (SPEC 13.7): its first `exact` runs (at most FAIR_EXACT_MAX) walked by
    fair_head, then the others estimated by their turns (`_turn_ordered`). Each page of a listing
    asks with the same `exact` (its page size), so the pages share out the queue without a run
    twice or missing. A constant number of queries: fair_head's, and one more for rows past the
    walked ones."""
    head = fair_head(limit, min(exact, FAIR_EXACT_MAX))
    walked = len(head.entries)
    end = None if size is None else offset + size
    rows = head.entries[offset:end]
    if (end is None or end > walked) and limit.waiting_count > walked:
        more = None if end is None else end - max(offset, walked)
        rows += _turn_ordered(limit, head, offset=max(offset - walked, 0), size=more)
    return FairRows(rows, walked, head.entries[0].key if head.entries else None)


def _turn_ordered(limit: Limit, head: FairHead, *, offset: int, size: int | None) -> list[QueueEntry]:
    """The waiting runs past a fair head, estimated in the order of their turns: the n-th of a
    key's runs left comes at its pass after the head + (n - 1) x its stride (stride scheduling
    with the shares of the moment left out), ties by arrival. One statement, numbering each key's
    runs in arrival order (a window over the limit's queue: read in full, for pages past the
    first only)."""
    table, keys_table = QueueEntry._meta.db_table, LimitKey._meta.db_table
    moved = {name: key.fair_pass for name, key in head.walk.keys.items() if key.taken}
    nokey = head.walk.keys[""].fair_pass if "" in head.walk.keys else limit.nokey_fair_pass
    whens = " ".join(["WHEN %s THEN %s"] * len(moved))
    passes = f"CASE ranked.key {whens} ELSE COALESCE(k.fair_pass, %s) END" if moved else "COALESCE(k.fair_pass, %s)"
    skipped = [entry.id for entry in head.entries]
    skip = f"AND q.id NOT IN ({', '.join(['%s'] * len(skipped))})" if skipped else ""
    window = (
        "LIMIT %s OFFSET %s"
        if size is not None
        else ("LIMIT -1 OFFSET %s" if connection.vendor == "sqlite" else "OFFSET %s")
    )
    sql = f"""
        SELECT ranked.* FROM (
            SELECT q.*, ROW_NUMBER() OVER (PARTITION BY q.key ORDER BY q.position) AS turn
            FROM {table} q WHERE q.limit_id = %s AND q.state = 'waiting' {skip}
        ) AS ranked
        LEFT JOIN {keys_table} k ON k.limit_id = %s AND k.key = ranked.key
        ORDER BY {passes} + (ranked.turn - 1) * ({engine_keys.PASS_STRIDE} / COALESCE(k.weight, 1)), ranked.position
        {window}"""
    params: list[object] = [limit.pk, *skipped, limit.pk]
    for name, value in moved.items():
        params += [name, value]
    params += [nokey, *([size] if size is not None else []), offset]
    return list(QueueEntry.objects.raw(sql, params))


def fair_places(limit: Limit, targets: Sequence[tuple[QueueEntry, int]]) -> dict[int, Place]:
    """The places in a fair limit's queue, in the order the grant will serve it (SPEC 13.7), of
    waiting runs given with how many runs of their key wait ahead of them: exact among the first
    FAIR_EXACT_ROWS (fair_head, as the first page of Studio's queue), else estimated by the turns
    (as `_turn_ordered` lists them): past the walked runs, the runs of each key that come at a
    smaller pass, or at the same one and arrived first (a key's oldest run stands for its others),
    plus its own key's runs left ahead of it. The estimate for the keys the walk did not touch is
    one aggregate over their rows, for every target at once."""
    head = fair_head(limit, FAIR_EXACT_ROWS)
    walked = {entry.id: index + 1 for index, entry in enumerate(head.entries)}
    found = {entry.id: Place(walked[entry.id]) for entry, _ in targets if entry.id in walked}
    deep = [(entry, ahead) for entry, ahead in targets if entry.id not in walked]
    if not deep:
        return found
    keys = head.walk.keys
    untouched = {entry.key for entry, _ in deep if entry.key not in keys}
    rows = {row.key: row for row in LimitKey.objects.filter(limit=limit, key__in=untouched)} if untouched else {}
    turns: list[Turn] = []
    for entry, ahead in deep:
        key, row = keys.get(entry.key), rows.get(entry.key)
        if key is not None:
            fair_pass, stride, taken = key.fair_pass, key.stride, key.taken
            first = key.head if key.head is not None else key.floor
        else:
            fair_pass = row.fair_pass if row is not None else 0
            stride, taken = engine_keys.stride(row.weight if row is not None else 1), 0
            first = row.head if row is not None and row.head is not None else entry.position
        left = max(ahead - taken, 0)
        turns.append(Turn(entry.key, fair_pass + left * stride, entry.position, left, first))
    others = _turns_ahead(limit, set(keys), turns)
    for (entry, _), turn, beyond in zip(deep, turns, others, strict=True):
        walked_ahead = sum(_runs_before(key, turn) for name, key in keys.items() if name != turn.key)
        found[entry.id] = Place(len(head.entries) + 1 + turn.left + beyond + walked_ahead, approximate=True)
    return found


@dataclass(frozen=True, slots=True)
class Turn:
    """A waiting run as fair_places estimates it: its key, the pass its key will be at when its
    turn comes (`at`), its position, its key's runs left ahead of it after the walk (`left`) and
    its key's next run's position (`first`: itself, or older)."""

    key: str
    at: int
    position: int
    left: int
    first: int


def _tie_before(nth: int, position: int | None, head: int, turn: Turn) -> bool:
    """Whether a key's `nth` run left, at the same pass as `turn`, comes first: by its position
    when known (`position`, or the key's head for its first); else by rounds: the runs of each key
    taken in their order, the n-th of one key before the n-th of a key whose runs began later."""
    if position is not None:
        return position < turn.position
    return (nth, head) < (turn.left, turn.first)


def _runs_before(key: eta.FairKey, turn: Turn) -> int:
    """How many of a walked key's runs left come before a run's turn (by the turns: SPEC 13.2's
    order without the shares): those at a smaller pass, and the one at the same pass if it came
    first (_tie_before: by its position if it was read)."""
    left = key.waiting - key.taken
    if left <= 0 or turn.at < key.fair_pass:
        return 0
    gap = turn.at - key.fair_pass
    before = -(-gap // key.stride)
    if gap % key.stride == 0 and before < left:
        index = key.taken + before
        read = key.heads[index] if index < len(key.heads) else None
        before += _tie_before(before, read, key.head if key.head is not None else key.floor, turn)
    return min(before, left)


def _turns_ahead(limit: Limit, walked: set[str], turns: Sequence[Turn]) -> list[int]:
    """_runs_before for the keys with runs waiting that the walk did not touch (from their rows:
    pass, weight, runs waiting, head), summed per run of `turns`, leaving out each one's own key:
    one aggregate statement for all of them. A key's run at the same pass as the run is counted
    before it as _tie_before says (its head's position when it is that run, else by rounds)."""
    table = LimitKey._meta.db_table
    least = "LEAST" if connection.vendor == "postgresql" else "MIN"
    stride = f"({engine_keys.PASS_STRIDE} / k.weight)"
    values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(turns))
    leave_out = f"AND k.key NOT IN ({', '.join(['%s'] * len(walked))})" if walked else ""
    sql = f"""
        WITH t(i, key, turn, pos, round, head) AS (VALUES {values})
        SELECT t.i, SUM(
            CASE WHEN t.turn < k.fair_pass THEN 0 ELSE {least}(
                k.waiting_count,
                (t.turn - k.fair_pass + {stride} - 1) / {stride}
                + CASE WHEN (t.turn - k.fair_pass) %% {stride} <> 0 THEN 0
                       WHEN t.turn = k.fair_pass THEN (CASE WHEN k.head < t.pos THEN 1 ELSE 0 END)
                       WHEN (t.turn - k.fair_pass) / {stride} < t.round THEN 1
                       WHEN (t.turn - k.fair_pass) / {stride} = t.round AND k.head < t.head THEN 1
                       ELSE 0 END
            ) END)
        FROM t JOIN {table} k ON k.limit_id = %s AND k.head IS NOT NULL AND k.key <> t.key {leave_out}
        GROUP BY t.i"""
    params: list[int | str] = []
    for index, turn in enumerate(turns):
        params += [index, turn.key, turn.at, turn.position, turn.left, turn.first]
    params += [limit.pk, *sorted(walked)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        sums = {index: int(total or 0) for index, total in cursor.fetchall()}
    return [sums.get(index, 0) for index in range(len(turns))]


# --- the CLI and the JSON API (issue 5) ----------------------------------------------------------


def get_slot(slot_id: str) -> Slot | None:
    if not is_storable_text(slot_id):
        return None
    return Slot.objects.select_related("limit").filter(id=slot_id).first()
