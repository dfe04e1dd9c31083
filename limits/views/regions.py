"""What a limit's page is made of, for the pages that show it and the edits that change it: the
live region (`_live_context`: figures, keys, slots, queue, activity), the edit panel
(`_edit_context`), where the operator is on the page (`Place`), and the values they carry
(`Notice`, `Pager`, `RefusedPool`). The page sizes are read here: a test that changes one
changes it here (monkeypatch.setattr("limits.views.regions.QUEUE_PER_PAGE", 2))."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from django.http import Http404, QueryDict
from django.urls import reverse

from limits import selectors
from limits.forms import (
    BoxForm,
    CapacityForm,
    MaxHoldForm,
    PerKeyForm,
    ShareForm,
    WhenFullForm,
    duration_input,
)
from limits.models import AuditEvent, Limit
from limits.selectors import limit_pages
from stackbone.plumbing.access import OPERATE_LIMIT, HtmxHttpRequest, holds_permission

SLOTS_PER_PAGE = 50
QUEUE_PER_PAGE = selectors.FAIR_EXACT_ROWS  # 50: a fair queue's first page is walked exactly, as the run page's places
KEYS_PER_PAGE = 25
KEY_FILTER_MAX_LENGTH = 128
ACTIVITY_SIZE = 20


@dataclass(frozen=True, slots=True)
class Notice:
    level: str  # "success" | "info" | "error"
    text: str


@dataclass(frozen=True, slots=True)
class Pager:
    """The links around one page of a list (limits/pager.html), loaded into `target` by htmx."""

    page: selectors.Page[Any]
    label: str
    target: str
    url: Callable[[int], str]

    @property
    def first(self) -> str:
        return self.url(1)

    @property
    def previous(self) -> str:
        return self.url(self.page.number - 1)

    @property
    def next(self) -> str:
        return self.url(self.page.number + 1)

    @property
    def last(self) -> str:
        return self.url(self.page.pages)


@dataclass(frozen=True, slots=True)
class RefusedPool:
    """A key's pool size (or weight, or min: `field`) that was refused: shown again in its row,
    with the messages."""

    key: str
    value: str
    errors: list[str]
    field: str = "pool"


def _burst(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _limit_or_404(name: str) -> Limit:
    limit = selectors.get_limit(name)
    if limit is None:
        raise Http404(f"No limit named {name!r}.")
    return limit


def _page_number(params: QueryDict, key: str) -> int:
    value = params.get(key, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else 1


@dataclass(frozen=True, slots=True)
class Place:
    """Where the operator is on a limit's page: the page of each list and the key filter. Every
    link, poll and form of the page carries it, so a refresh or an action keeps it."""

    slots: int = 1
    queue: int = 1
    keys: int = 1
    key_filter: str = ""

    @classmethod
    def of(cls, params: QueryDict) -> Place:
        return cls(
            slots=_page_number(params, "slots"),
            queue=_page_number(params, "queue"),
            keys=_page_number(params, "keys"),
            key_filter=_key_filter(params),
        )

    def link(self, limit: Limit) -> str:
        """The page's address; keys and key_filter only when they are not the default, so the
        address of a limit without keys reads as before."""
        query: dict[str, int | str] = {"slots": self.slots, "queue": self.queue}
        if self.keys != 1:
            query["keys"] = self.keys
        if self.key_filter:
            query["key_filter"] = self.key_filter
        return f"{reverse('limits:detail', args=[limit.name])}?{urlencode(query)}"


def _key_filter(params: QueryDict) -> str:
    """?key_filter= as a part of a key (keys are 1 to 128 characters, without control ones)."""
    value = params.get("key_filter", "").strip()[:KEY_FILTER_MAX_LENGTH]
    return value if value.isprintable() else ""


def _live_context(
    request: HtmxHttpRequest,
    limit: Limit,
    params: QueryDict,
    notice: Notice | None = None,
    refused_pool: RefusedPool | None = None,
) -> dict[str, Any]:
    """The figures, keys, slots, queue and activity of a limit: a constant number of queries,
    whatever the number of keys, slots and queued runs (totals come from the counters)."""
    here = Place.of(params)
    slots = selectors.live_slots_page(limit, number=here.slots, size=SLOTS_PER_PAGE)
    queue = selectors.queue_page(limit, number=here.queue, size=QUEUE_PER_PAGE)
    weights = selectors.fair_weights(limit)  # one aggregate query on a fair limit (SPEC 13.5), none on fifo
    keys = selectors.key_pools_page(
        limit, search=here.key_filter, number=here.keys, size=KEYS_PER_PAGE, weights=weights
    )
    here = replace(here, slots=slots.number, queue=queue.number, keys=keys.number)
    no_key = selectors.no_key_pool(limit, weights) if keys.number == 1 and not here.key_filter else None
    box_base = None if limit.is_box else getattr(limit, "box_base", None)  # read with the limit
    return {
        "limit": limit,
        # Runs hold its slots while they execute (a workflow's bound, the box): runs tables.
        "runs_bound": limit.is_workflow_bound or limit.is_box,
        # SPEC 12.3: a workflow's total, or a limit's capacity, above the box's base acts as the
        # base for whole runs.
        "capped_by_box": box_base if box_base is not None and box_base < limit.capacity else None,
        "here": here,
        "slots": selectors.slot_rows(limit, slots),
        "queue": selectors.queue_rows(limit, queue),
        "keys": keys,
        "no_key": no_key,
        "show_keys": bool(keys.total or here.key_filter or limit.per_key is not None or limit.is_fair),
        "fair": limit.is_fair,
        "held": selectors.held_capacity(limit),
        "slots_pager": Pager(slots, "Slot pages", "#live", lambda number: replace(here, slots=number).link(limit)),
        "queue_pager": Pager(queue, "Queue pages", "#live", lambda number: replace(here, queue=number).link(limit)),
        "keys_pager": Pager(keys, "Key pages", "#live", lambda number: replace(here, keys=number).link(limit)),
        "refused_pool": refused_pool,
        "activity": _activity(limit),
        "frees_scanned": f"{limit_pages.RECENT_FREES_SCANNED:,}",  # what slot_feed reads
        "can_operate": holds_permission(request, OPERATE_LIMIT),
        "notice": notice,
        "live_url": here.link(limit),
    }


def _activity(limit: Limit) -> list[AuditEvent | selectors.SlotEvent | selectors.RunEndEvent]:
    """The audit log (operator actions, deploys, max-hold take-backs), the feed of grants and
    frees from the slots (selectors.slot_feed) and the runs it skipped, replaced or cancelled
    (selectors.run_endings, SPEC 14.6; asked only of a limit that ever skipped, refused, replaced or
    cancelled),
    newest first, ACTIVITY_SIZE in all: three queries, or four, whatever the history holds."""
    events: list[AuditEvent | selectors.SlotEvent | selectors.RunEndEvent] = [
        *selectors.recent_activity(limit, size=ACTIVITY_SIZE),
        *selectors.slot_feed(limit, size=ACTIVITY_SIZE),
    ]
    if limit.skipped_count or limit.refused_count or limit.replaced_count or limit.cancelled_count:
        events += selectors.run_endings(limit, size=ACTIVITY_SIZE)
    return sorted(events, key=lambda event: event.at, reverse=True)[:ACTIVITY_SIZE]


def _edit_context(
    limit: Limit,
    *,
    can_operate: bool = True,
    capacity_form: CapacityForm | None = None,
    max_hold_form: MaxHoldForm | None = None,
    per_key_form: PerKeyForm | None = None,
    share_form: ShareForm | None = None,
    when_full_form: WhenFullForm | None = None,
    box_form: BoxForm | None = None,
    edit_notice: Notice | None = None,
) -> dict[str, Any]:
    if limit.is_box:
        box_form = box_form or BoxForm(initial={"base": limit.per_key, "burst": _burst(limit.burst)})
    return {
        "limit": limit,
        "box_form": box_form,
        "capacity_form": capacity_form or CapacityForm(initial={"capacity": limit.capacity}),
        "max_hold_form": None
        if limit.is_workflow_bound
        else max_hold_form or MaxHoldForm(initial={"max_hold": duration_input(limit.max_hold_ms)}),
        "per_key_form": per_key_form or PerKeyForm(initial={"per_key": "" if limit.per_key is None else limit.per_key}),
        "share_form": share_form or ShareForm(initial={"share": limit.share}),
        "when_full_form": when_full_form
        or WhenFullForm(
            initial={
                "on_full": limit.on_full_override,
                "max_waiting": "" if limit.max_waiting_override is None else limit.max_waiting_override,
                "max_waiting_per_key": ""
                if limit.max_waiting_per_key_override is None
                else limit.max_waiting_per_key_override,
            }
        ),
        "edit_notice": edit_notice,
        "can_operate": can_operate,
    }


def _detail_url(limit: Limit, params: QueryDict) -> str:
    return Place.of(params).link(limit)
