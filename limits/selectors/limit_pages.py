"""Reads of the Limits list and of a limit's page (Studio, the CLI and the API): the limits, their
slots and queue a page at a time, the activity feed, and the rows as the page lists them (SlotRow,
QueueRow: the other limits of a group's acquisition, why a run waits)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, IntegerField, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce

from limits.config import BOX_NAME
from limits.engine import keys as engine_keys
from limits.engine import waiting as engine_waiting
from limits.engine.results import Reason
from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, QueueEntry, Slot, is_storable_text
from limits.selectors.fair import fair_queue_rows
from limits.selectors.pages import Page, clamp_page
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


def held_capacity(limit: Limit) -> int:
    """Free capacity the limit holds for an owed run (SPEC 10.4): no query unless runs of
    several limits wait on it, then one."""
    if limit.group_waiting_count == 0:
        return 0
    return engine_keys.held(limit, box_clock.now())


# --- the rows of a limit's page (Studio) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotRow:
    """A live slot as a limit's page lists it: the slot, and the names of the other limits of its
    acquisition when it acquired several at once (`partners`, SPEC 10; empty otherwise)."""

    slot: Slot
    partners: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A waiting run as a limit's page lists it: its queue entry, why it is not granted now
    (`reason`, SPEC 6.5) and the names of the other limits of its acquisition (`partners`, SPEC
    10; empty when it acquires this limit alone)."""

    entry: QueueEntry
    reason: Reason | None
    partners: tuple[str, ...]


def slot_rows(limit: Limit, page: Page[Slot]) -> Page[SlotRow]:
    """A page of the limit's live slots (live_slots_page) as its page lists them: one query for
    the partners of the whole page, none when no slot on it belongs to a group."""
    partners = group_partners(limit, page.items)
    return page.with_items([SlotRow(slot, partners.get(slot.request, ())) for slot in page.items])


def queue_rows(limit: Limit, page: Page[QueueEntry]) -> Page[QueueRow]:
    """A page of the limit's queue (queue_page) as its page lists it: why each run is not granted
    now, by the grant's own rules (limits.engine.waiting.why_waiting: no query for a limit without
    room or without keys and groups waiting, a few otherwise, whatever the size of the page; on a
    fair limit the key next is the page's walk's, SPEC 13.7: its first row's), and its partners
    (group_partners)."""
    entries = page.items
    walked = {limit.id: page.next_key} if page.estimated_after is not None else None
    reasons = engine_waiting.why_waiting(entries, limits=[limit], next_keys=walked)
    partners = group_partners(limit, entries)
    rows = [QueueRow(entry, reasons.get(entry.id), partners.get(entry.request, ())) for entry in entries]
    return page.with_items(rows)


def group_partners[Row: (Slot, QueueEntry)](limit: Limit, rows: Sequence[Row]) -> dict[str, tuple[str, ...]]:
    """For the rows (live slots, or waiting entries, of `limit`) of acquisitions of several limits
    (group_size > 1), by request: the names of the other limits of the acquisition, from the live
    slots (or waiting entries) that share its request. One query for the whole page, none when no
    row on it belongs to a group."""
    grouped = list(dict.fromkeys(row.request for row in rows if row.group_size > 1))
    if not grouped:
        return {}
    if isinstance(rows[0], Slot):
        others = Slot.objects.filter(state__in=LIVE_SLOT_STATES).values_list("request", "limit__name")
    else:
        others = QueueEntry.objects.filter(state=QueueEntry.State.WAITING).values_list("request", "limit__name")
    names: dict[str, set[str]] = {}
    for request, name in others.filter(request__in=grouped).exclude(limit=limit):
        names.setdefault(request, set()).add(name)
    return {request: tuple(sorted(names.get(request, ()))) for request in grouped}


# --- a run's hold on limits (Studio run page) ----------------------------------------------------


def live_slots_of_run(run_id: str) -> list[Slot]:
    """The busy and reserved slots a run holds, on any limit, oldest grant first."""
    return list(
        Slot.objects.filter(run_id=run_id, state__in=LIVE_SLOT_STATES)
        .select_related("limit")
        .order_by("granted_at", "id")
    )


# --- the CLI and the JSON API (issue 5) ----------------------------------------------------------


def get_slot(slot_id: str) -> Slot | None:
    if not is_storable_text(slot_id):
        return None
    return Slot.objects.select_related("limit").filter(id=slot_id).first()


@dataclass(frozen=True, slots=True)
class RunEndEvent:
    """One line of a limit's activity feed from a run this limit ended before it started (SPEC
    14.6): `run_skipped` (its reason: the limit full, or its queue at its cap), `run_replaced`
    (by `caused_by`), or `run_cancelled` (a workflow's own bound's cancel_running, 14.4: by
    `caused_by`, once its work has stopped). Shown as a slot event is (a run's line)."""

    at: datetime
    action: str
    run_id: str
    key: str
    reason: str  # the sentence of its reason code (limits.engine.results.REASONS)
    caused_by: str
    slot_id: str = ""
    label: str = ""

    is_slot_event = True


def run_endings(limit: Limit, *, size: int) -> list[RunEndEvent]:
    """The newest `size` runs this limit skipped, replaced or cancelled (cancel_running), newest
    first: one query along the partial index run_ended_by_limit (only runs ended so have an
    end_limit); a cancelled run still stopping (no finished_at yet) is not listed."""
    from limits.engine.results import REASONS
    from stackbone.runs.models import Run

    rows = (
        Run.objects.filter(end_limit=limit.name, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", "status", "id", "concurrency_key", "end_reason", "caused_by")[:size]
    )
    return [
        RunEndEvent(at, f"run_{status}", run_id, key, REASONS.get(reason or "", reason or ""), caused_by or "")
        for at, status, run_id, key, reason, caused_by in rows
        if at is not None
    ]
