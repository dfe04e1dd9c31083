"""A page of runs as the Runs screen (limits.runs.screen), `stackbone runs` (limits.cli.runs) and
the JSON API (limits.runs.api, /api/runs/) list them: newest first, filtered and searched in a
constant number of queries at any number of runs (issue 48 moved it here from
limits.runs.listing, which still hands on every name).

Pages are keyset pages ("older than this run", "newer than this run"), never OFFSET and never
COUNT(*): at a million runs both cost a walk over every row before the page. Each filter has an
index that yields its rows in page order (stackbone/migrations/0005_run_list_indexes.py):

    no filter          run_newest          (created_at, id)
    ?status=           run_by_status       (status, created_at, id)
    ?workflow=         run_by_workflow     (workflow, created_at, id)

    ?key=              run_by_key          (concurrency_key, created_at, id), keyed runs only,
                       and runkey_by_key   (key, run_id): the keys runs took slots under
    ?q= (a reference)  run_by_reference    (reference, created_at, id), runs with one only

A page is at most ten queries: with "waiting for", the limit's id and its queue's run ids (two,
see _waiting_for); with a search, whether it is a run's whole id, and if not its matches (three,
search_matches); when those narrow the runs to a known few,
their (created_at, id) keys (one, by primary key); then the page of runs (three with a key,
below), the waits of its runs, the slots they hold (each through a partial index on run_id) and
the keys they took (by run_id).

?key= (a tenant's runs) matches a run whose concurrency key it is, that took a slot under that key
inside its body (with_limit, acquire_slot: kept with the run, stackbone.runs.models.RunKey, issue
45), or that holds a live slot or waits in a queue under that key now. The page reads them apart
and merges them (_key_parts): the runs of that concurrency key from run_by_key, in page order,
stopping after a page; the runs that took the key, through runkey_by_key; and the few with live
work under the key, through the keyed slots' and waiting entries' partial indexes, by primary
key. One OR of them made PostgreSQL walk every run newest first (69 ms at 200,000 runs for a key
with 10 of them; docs/performance.md).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet

from limits.config import check_key
from limits.models import LIVE_SLOT_STATES, Limit, QueueEntry, Slot, is_storable_text
from limits.runs.values import RunsError
from stackbone.plumbing import clock as box_clock
from stackbone.runs.models import FINISHED_STATUSES as FINISHED_STATUSES_OF_RUNS
from stackbone.runs.models import Run, RunKey

RUNS_PER_PAGE = 50
STATUSES: tuple[str, ...] = tuple(status.value for status in Run.Status)
SEARCH_MAX_LENGTH = 128
FINISHED_STATUSES = FINISHED_STATUSES_OF_RUNS  # stackbone.runs.models: skipped and replaced too
WAITING_AS_LIST = 5_000  # a queue at most this long is paged as a list of run ids (runs_page)
SEARCH_MATCHES = 500  # runs a label search can find (the labels of live slots and waiting runs)
SEARCH_SCANNED = 5_000  # matching run ids a label search reads before it pages the runs instead

# Messages (tests assert on them). Each error names its field.
BAD_STATUS = "status must be one of {statuses}, not {value!r}"


@dataclass(frozen=True, slots=True)
class RunFilter:
    """What the list shows: a status, a workflow, a limit the runs wait for, a search (a run's
    whole id, its reference exactly, or part of the label of a slot it holds or of a queue it
    waits in, any case), a key (exact: the run's concurrency key, a key it took a slot under, or
    the key of a slot it holds or a queue it waits in)."""

    status: str = ""
    workflow: str = ""
    waiting_for: str = ""
    search: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        if self.status and self.status not in STATUSES:
            raise RunsError(BAD_STATUS.format(statuses=", ".join(STATUSES), value=self.status), "status")
        if self.key:
            try:
                check_key(self.key)
            except ValueError as error:
                raise RunsError(str(error), "key") from None

    @property
    def active(self) -> bool:
        return bool(self.status or self.workflow or self.waiting_for or self.search or self.key)


@dataclass(frozen=True, slots=True)
class Cursor:
    """A place in the newest-first order: a run's creation time and id."""

    created_at: dt.datetime
    run_id: str

    def encode(self) -> str:
        text = f"{self.created_at.isoformat()}|{self.run_id}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str | None) -> Cursor | None:
        """A cursor from a link, or None for anything that is not one (a filter, not a form)."""
        if not text or len(text) > 200:
            return None
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            moment, _, run_id = raw.partition("|")
            created_at = dt.datetime.fromisoformat(moment)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        if created_at.tzinfo is None or not run_id or "\x00" in run_id:
            return None
        return cls(created_at, run_id)

    @classmethod
    def of(cls, run: Run) -> Cursor:
        return cls(run.created_at, run.id)


@dataclass(slots=True)
class RunRow:
    """A run on a page, with the limits it waits for, the slots it holds and the keys it took."""

    run: Run
    waits: list[QueueEntry] = field(default_factory=list)
    holds: list[Slot] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        labels = [slot.label for slot in self.holds] + [entry.label for entry in self.waits]
        return list(dict.fromkeys(label for label in labels if label))

    @property
    def keys(self) -> list[str]:
        """Its concurrency key, then the keys it took slots under inside its body (with_limit,
        acquire_slot: kept after the slots are freed and the run ends), then those of the slots
        it holds and the queues it waits in now."""
        keys = [self.run.concurrency_key, *self.taken]
        keys += [slot.key for slot in self.holds] + [entry.key for entry in self.waits]
        return list(dict.fromkeys(key for key in keys if key))

    @property
    def duration_ms(self) -> int | None:
        """From its start to its end, or to now while it runs; None before it started."""
        started, finished = self.run.started_at, self.run.finished_at
        if started is None:
            return None
        end = finished if finished is not None else box_clock.display_now()
        return max(int((end - started).total_seconds() * 1000), 0)


@dataclass(slots=True)
class RunPage:
    rows: list[RunRow]
    newer: Cursor | None  # the link to the page before (newer runs), if there are any
    older: Cursor | None  # the link to the page after (older runs), if there are any
    at_start: bool  # this page starts with the newest run that matches
    capped: bool = False  # a search matched more than SEARCH_MATCHES runs: only the newest are listed


def runs(run_filter: RunFilter) -> tuple[QuerySet[Run], list[str] | None]:
    """The runs that match the filter: a query, and when a search or a short queue ("waiting
    for") narrows them to a known few, their ids (at most WAITING_AS_LIST or SEARCH_MATCHES);
    None when they are not narrowed so."""
    query, candidates, _capped = _runs(run_filter)
    return query, candidates


def _runs(run_filter: RunFilter, *, by_key: bool = True) -> tuple[QuerySet[Run], list[str] | None, bool]:
    """runs(), and whether a search's matches were capped (Matches.capped). `by_key=False`
    leaves the key out of the query (runs_page applies it in two parts, _key_parts) unless the
    runs are narrowed to a known few."""
    query = Run.objects.all()
    if run_filter.status:
        query = query.filter(status=run_filter.status)
    if run_filter.workflow:
        query = query.filter(workflow=run_filter.workflow)
    candidates: list[str] | None = None
    capped = False
    if run_filter.waiting_for:
        query, candidates = _waiting_for(query, run_filter)
    if run_filter.search:
        matches = search_matches(run_filter.search)
        found, capped = matches.run_ids, matches.capped
        candidates = found if candidates is None else sorted(set(candidates) & set(found))
    if run_filter.key and (by_key or candidates is not None):
        query = query.filter(_under_key(run_filter.key))
    return query, candidates, capped


def _live_under_key(key: str) -> QuerySet[Any]:
    """The run ids of the live slots and waiting entries under `key` (their partial indexes of
    keyed rows), as one subquery."""
    slots = Slot.objects.filter(state__in=LIVE_SLOT_STATES, key=key).order_by().values("run_id")
    waits = QueueEntry.objects.filter(state=QueueEntry.State.WAITING, key=key).order_by().values("run_id")
    return slots.union(waits, all=True)


def _taken_under_key(key: str) -> QuerySet[Any]:
    """The run ids of the runs that took a slot under `key` (runkey_by_key), as a subquery."""
    return RunKey.objects.filter(key=key).order_by().values("run_id")


def _under_key(key: str) -> Q:
    """Runs of a key: its concurrency key, a key it took a slot under, or a live slot it holds or
    a queue it waits in under that key; no query of its own. For a known few runs; a page of all
    runs reads the parts apart (_key_parts)."""
    return Q(concurrency_key=key) | Q(id__in=_taken_under_key(key)) | Q(id__in=_live_under_key(key))


def _key_parts(query: QuerySet[Run], key: str) -> list[QuerySet[Run]]:
    """The runs of `query` under `key`, in parts that each yield a page in page order without
    walking other runs: those of that concurrency key (run_by_key); the others that took a slot
    under the key (a semi-join with runkey_by_key); and the others holding a live slot or waiting
    under the key now (a semi-join with the few live rows; mostly runs of the second part too,
    which _first lists once). Without a key, the query itself."""
    if not key:
        return [query]
    others = query.exclude(concurrency_key=key)
    return [
        query.filter(concurrency_key=key),
        others.filter(id__in=_taken_under_key(key)),
        others.filter(id__in=_live_under_key(key)),
    ]


def _first(parts: list[QuerySet[Run]], condition: Q, *, newest_first: bool, count: int) -> list[Run]:
    """The first `count` runs of the parts (one query each) that meet `condition`, newest first
    or oldest first by (created_at, id)."""
    order = ("-created_at", "-id") if newest_first else ("created_at", "id")
    found = [run for part in parts for run in part.filter(condition).order_by(*order)[:count]]
    if len(parts) > 1:
        found = list({run.id: run for run in found}.values())  # a run in two parts, once
        found.sort(key=lambda run: (run.created_at, run.id), reverse=newest_first)
    return found[:count]


def _waiting_for(query: QuerySet[Run], run_filter: RunFilter) -> tuple[QuerySet[Run], list[str] | None]:
    """The runs waiting in a limit's queue, in two small queries before the page's:

    1. The limit's id, so the page's query names it as a value (PostgreSQL then estimates the
       queue's size from its statistics instead of guessing).
    2. Up to WAITING_AS_LIST + 1 run ids of its queue (its partial index). A short queue gives
       that list (a page of it is primary-key lookups, runs_page); a long one is a semi-join that
       walks the page's index newest first and stops after a page of waiting runs.

    A finished run waits for nothing (a run that ends leaves every queue), so a finished status
    with this filter is empty without asking."""
    limit_id = Limit.objects.filter(name=run_filter.waiting_for).values_list("id", flat=True).first()
    if limit_id is None or run_filter.status in FINISHED_STATUSES:
        return query.none(), []
    entries = QueueEntry.objects.filter(limit_id=limit_id, state=QueueEntry.State.WAITING).order_by()
    run_ids = list(entries.values_list("run_id", flat=True)[: WAITING_AS_LIST + 1])
    if len(run_ids) <= WAITING_AS_LIST:
        return query, run_ids
    return query.filter(id__in=entries.values("run_id")), None


@dataclass(frozen=True, slots=True)
class Matches:
    """What a search found: run ids, newest first by (created_at, id); `capped` when more runs
    matched than SEARCH_MATCHES and these are only the newest of them."""

    run_ids: list[str]
    capped: bool = False


def search_matches(text: str) -> Matches:
    """The runs a search finds: the run with that whole id, or else the runs whose reference is
    the text (exactly: the value of the input field their workflow names, @workflow(reference=...))
    and those that hold a live slot or wait in a queue whose label contains the text (any case),
    the newest SEARCH_MATCHES of them by (created_at, id), so every request (and every page) sees
    the same matches. Labels of finished work are history and are not searched: a finished run is
    found by its id or its reference.

    An existing run's whole id is one primary-key lookup and no label is scanned (a label that
    contains another run's id is not looked for then). A reference is read from its index
    (run_by_reference), in the same query as the labels. A label search is a scan of the live
    slots and the waiting entries (no index serves "contains"): its cost grows with the queues,
    docs/operations.md gives the figures."""
    text = text.strip()[:SEARCH_MAX_LENGTH]
    if not text or not is_storable_text(text):
        return Matches([])
    if len(text) <= 64 and Run.objects.filter(id=text).exists():
        return Matches([text])
    by_reference = Run.objects.filter(reference=text).order_by().values("id")
    slots = Slot.objects.filter(state__in=LIVE_SLOT_STATES, label__icontains=text).order_by().values("run_id")
    waits = QueueEntry.objects.filter(state=QueueEntry.State.WAITING, label__icontains=text).order_by()
    # First the matching run ids, up to SEARCH_SCANNED (the scan stops there); when that is all
    # of them, the newest are picked from them by primary key. Only a search matching more
    # looks the other way round: the runs newest first, kept while they match (the scan's run
    # ids hashed once), which stops after SEARCH_MATCHES + 1 of them.
    scanned = list(slots.union(waits.values("run_id"), by_reference, all=True)[: SEARCH_SCANNED + 1])
    if len(scanned) <= SEARCH_SCANNED:
        matching = Run.objects.filter(id__in={row["run_id"] for row in scanned})
    else:
        matching = Run.objects.filter(Q(reference=text) | Q(id__in=slots) | Q(id__in=waits.values("run_id")))
    found = list(matching.order_by("-created_at", "-id").values_list("id", flat=True)[: SEARCH_MATCHES + 1])
    return Matches(found[:SEARCH_MATCHES], capped=len(found) > SEARCH_MATCHES)


type Key = tuple[dt.datetime, str]


def runs_page(
    run_filter: RunFilter,
    *,
    older_than: Cursor | None = None,
    newer_than: Cursor | None = None,
    size: int | None = None,
) -> RunPage:
    """One page of the matching runs, newest first: the first page, or the page of runs older
    (newer) than a cursor. One more row than the page is read to know whether there is more.

    Runs narrowed to a known few ids (runs()) are paged from their (created_at, id) keys, read by
    primary key and sorted here, then the page's rows are read by id: an ORDER BY ... LIMIT over
    them would let PostgreSQL walk the newest-first index until it met them, which at a million
    runs is a walk over nearly all of them when the few are old."""
    size = size or RUNS_PER_PAGE
    query, candidates, capped = _runs(run_filter, by_key=False)
    query = query.defer("input", "output", "error")  # a row shows none of them
    if candidates is not None:
        keys = sorted(query.filter(id__in=candidates).order_by().values_list("created_at", "id"), reverse=True)
        window, newer, older, at_start = _window(keys, older_than, newer_than, size)
        by_id = query.in_bulk([run_id for _created_at, run_id in window])
        rows = _with_limits([by_id[run_id] for _created_at, run_id in window])
        return RunPage(rows, newer, older, at_start, capped=capped)
    parts = _key_parts(query, run_filter.key)
    if newer_than is not None:
        # Oldest first from the cursor up, then turned round.
        edge = newer_than.created_at
        after = Q(created_at__gt=edge) | Q(created_at=edge, id__gt=newer_than.run_id)
        found = _first(parts, Q(created_at__gte=edge) & after, newest_first=False, count=size + 1)
        if len(found) > size:
            page = found[:size][::-1]
            return RunPage(_with_limits(page), newer=Cursor.of(page[0]), older=Cursor.of(page[-1]), at_start=False)
        # At most a page of newer runs: the first page, newest first.
        older_than = None
    condition = Q()
    if older_than is not None:
        edge = older_than.created_at
        before = Q(created_at__lt=edge) | Q(created_at=edge, id__lt=older_than.run_id)
        condition = Q(created_at__lte=edge) & before
    found = _first(parts, condition, newest_first=True, count=size + 1)
    page = found[:size]
    older = Cursor.of(page[-1]) if len(found) > size else None
    newer = Cursor.of(page[0]) if page and older_than is not None else None
    return RunPage(_with_limits(page), newer=newer, older=older, at_start=older_than is None)


def _window(
    keys: list[Key], older_than: Cursor | None, newer_than: Cursor | None, size: int
) -> tuple[list[Key], Cursor | None, Cursor | None, bool]:
    """The page of `keys` (newest first) the cursors ask for, as runs_page's SQL path reads it:
    (its keys, the newer cursor, the older cursor, whether it starts with the newest)."""
    if newer_than is not None:
        newer_keys = [key for key in keys if key > (newer_than.created_at, newer_than.run_id)]
        if len(newer_keys) > size:
            window = newer_keys[-size:]
            return window, Cursor(*window[0]), Cursor(*window[-1]), False
        older_than = None
    if older_than is not None:
        keys = [key for key in keys if key < (older_than.created_at, older_than.run_id)]
    window = keys[:size]
    older = Cursor(*window[-1]) if len(keys) > size else None
    newer = Cursor(*window[0]) if window and older_than is not None else None
    return window, newer, older, older_than is None


def _with_limits(page: list[Run]) -> list[RunRow]:
    """The page's runs with their waits, live slots and the keys they took: three queries,
    whatever the page size."""
    rows = {run.id: RunRow(run) for run in page}
    if not rows:
        return []
    for entry in (
        QueueEntry.objects.filter(run_id__in=list(rows), state=QueueEntry.State.WAITING)
        .select_related("limit")
        .order_by("enqueued_at", "id")
    ):
        rows[entry.run_id].waits.append(entry)
    for slot in (
        Slot.objects.filter(run_id__in=list(rows), state__in=LIVE_SLOT_STATES)
        .select_related("limit")
        .order_by("granted_at", "id")
    ):
        rows[slot.run_id].holds.append(slot)
    for run_id, key in RunKey.objects.filter(run_id__in=list(rows)).order_by("id").values_list("run_id", "key"):
        rows[run_id].taken.append(key)
    return list(rows.values())


def limit_names() -> list[str]:
    """The limits a run can wait for, for the "waiting for" filter: one query."""
    return list(Limit.objects.order_by("name").values_list("name", flat=True))


def run_rows(runs: list[Run]) -> list[RunRow]:
    """Runs as a page shows them (their waits, live slots and the keys they took), in three
    queries however many (a batch start's runs)."""
    return _with_limits(runs)


def run_row(run: Run) -> RunRow:
    """One run as a page shows it."""
    return _with_limits([run])[0]
