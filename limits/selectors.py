"""Reads for pages, the CLI and the API: querysets already ordered, figures from the counters.

The JSON shapes of these rows (for the API and the CLI) are limits.serializers.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, IntegerField, QuerySet, Value, When

from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, QueueEntry, Slot, is_storable_text


def limits(search: str = "") -> QuerySet[Limit]:
    """Every limit (whose name contains `search`), declared first, by name. Counters are on the
    rows: no joins, no counts."""
    rows = Limit.objects.order_by("-declared", "name")
    return rows.filter(name__contains=search) if search else rows


def limits_page(*, search: str, number: int, size: int) -> Page[Limit]:
    """A page of limits(search): two queries (a count of the limits table, then the page)."""
    rows = limits(search)
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
