"""A waiting run's place in its queues and its estimated wait (limits.eta): one rule for the run
page, the CLI and the API (queue_place), at a bounded cost at any depth of a queue."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Case, F, Func, IntegerField, OuterRef, QuerySet, Subquery, Value, When

from limits import eta, insights
from limits.models import Limit, LimitKey, QueueEntry
from limits.selectors.fair import fair_places
from limits.selectors.pages import Place

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


@dataclass(frozen=True, slots=True)
class Wait:
    """A run's wait in one queue, as waits_of_run reads it: its queue entry (with its limit); its
    place, 1-based, in the limit's whole queue (`place`; on a fair limit in the order the grant
    will serve it, `fair_queue`), exact unless `place_approximate` (queue_place); for an entry
    with a key whose pool applies (the limit's per_key, or the key's own pool size) its place
    among its key's runs (`key_place`, `key_place_approximate`; else None and False); its key's
    runs waiting (`key_waiting`, from the key's row; None without one); and its estimated wait
    (`eta_seconds`, limits.eta.eta_seconds of `place`; None: unknown)."""

    entry: QueueEntry
    place: int
    place_approximate: bool
    fair_queue: bool
    key_place: int | None
    key_place_approximate: bool
    key_waiting: int | None
    eta_seconds: int | None


def waits_of_run(run_id: str) -> list[Wait]:
    """The queues a run waits in (oldest wait first), in two queries whatever the length of the
    queues and the number of waits (a run waits for a few limits at most):

    1. its waiting entries, each annotated with what queue_place needs of the limit's whole queue
       and, for an entry with a key, of its key's queue: the runs ahead and behind it, each a
       COUNT capped at EXACT_PLACES along the partial index queue_waiting_order (or
       queue_waiting_by_key), and the first and last tickets; and the key's counter row. So a
       place costs at most 2 x EXACT_PLACES index entries, at any depth (docs/performance.md);
    2. the recent grant rate of those limits (recent_grant_rates).

    Each wait (Wait) has its place and estimate; on a fair limit its place is fair_places' (a few
    queries more)."""
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
    fair = _fair_places_of_run([(row, _counted(row, "key_ahead")) for row in rows])
    waits = []
    for row in rows:
        place = fair.get(row.id) or _place_of(row, "", row.limit.waiting_count, cap)
        pooled = row.key and (row.limit.per_key is not None or row.key_pool_override is not None)
        key_place = _place_of(row, "key_", row.key_waiting, cap) if pooled else None
        waits.append(
            Wait(
                entry=row,
                place=place.number,
                place_approximate=place.approximate,
                fair_queue=row.id in fair,
                key_place=key_place.number if key_place else None,
                key_place_approximate=bool(key_place and key_place.approximate),
                key_waiting=row.key_waiting,
                eta_seconds=eta.eta_seconds(place.number, rates.get(row.limit_id)),
            )
        )
    return waits


def _fair_places_of_run(rows: Sequence[tuple[QueueEntry, int]]) -> dict[int, Place]:
    """The places of a run's waits on fair limits, in the order the grant will serve each queue
    (SPEC 13.7, fair_places): a few queries per fair limit it waits for, none for the others. A
    run's runs of its key ahead of it come from waits_of_run's counts (given with each row; for a
    run without a key, one more count)."""
    found: dict[int, Place] = {}
    for row, key_ahead in rows:
        if not row.limit.is_fair:
            continue
        if row.key:
            ahead = key_ahead
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
        ahead=_counted(row, prefix + "ahead"),
        behind=_counted(row, prefix + "behind"),
        waiting=waiting,
        position=row.position,
        head=value("head"),
        tail=value("tail"),
        cap=cap,
    )


def _counted(row: QueueEntry, name: str) -> int:
    """A count waits_of_run's query annotated the row with (its names are built: not typed)."""
    return int(getattr(row, name) or 0)


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
