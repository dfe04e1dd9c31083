"""The Studio Limits screen. Each view parses its input, calls one service (or selector) and
renders one template or one of its partials (`limits/limit_detail.html#live` for htmx)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpResponse, HttpResponseBadRequest, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from limits import selectors, services
from limits.durations import format_duration
from limits.forms import CapacityForm, MaxHoldForm, ReleaseForm, ResetForm, duration_input
from limits.models import Limit
from studio.plumbing.access import (
    NEEDS_OPERATE_LIMIT,
    OPERATE_LIMIT,
    HtmxHttpRequest,
    actor,
    permission_required,
    studio_login_required,
)

LIMITS_PER_PAGE = 100
SEARCH_MAX_LENGTH = 64
SLOTS_PER_PAGE = 50
QUEUE_PER_PAGE = 50
ACTIVITY_SIZE = 20
LIMIT_CHANGED_EVENT = "limit-changed"

RELEASED = "Released {slot}. If runs were waiting, the first one now has it reserved."
ALREADY_FREE = "{slot} is already free (released, taken back by max hold, or unknown): nothing changed."
CAPACITY_SET = "Capacity is now {value} (declared {declared})."
MAX_HOLD_SET = "Max hold is now {value} for slots granted from now on (declared {declared})."
CAPACITY_RESET = "Capacity reset to the declared {value}."
MAX_HOLD_RESET = "Max hold reset to the declared {value} for slots granted from now on."


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


operator_required = permission_required(OPERATE_LIMIT, NEEDS_OPERATE_LIMIT)


# --- pages --------------------------------------------------------------------------------------


@require_GET
@vary_on_headers("HX-Request")
@studio_login_required
def limit_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every limit, LIMITS_PER_PAGE a page, optionally those whose name contains ?q=."""
    search = _search(request.GET)
    page = selectors.limits_page(search=search, number=_page_number(request.GET, "page"), size=LIMITS_PER_PAGE)
    context = {
        "search": search,
        "declared_limits": [limit for limit in page.items if limit.declared],
        "undeclared_limits": [limit for limit in page.items if not limit.declared],
        "list_url": _list_url(search, page.number),
        "pager": Pager(page, "Pages of limits", "#limits-table", lambda number: _list_url(search, number)),
    }
    template = "limits/limit_list.html#limits-table" if request.htmx else "limits/limit_list.html"
    return render(request, template, context)


@require_GET
@vary_on_headers("HX-Request")
@studio_login_required
def limit_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    context = _live_context(request, limit, request.GET)
    if request.htmx:
        return render(request, "limits/limit_detail.html#live", context)
    context |= _edit_context(limit, can_operate=context["can_operate"])
    return render(request, "limits/limit_detail.html", context)


# --- operator actions: each a small POST ----------------------------------------------------------


@require_POST
@operator_required
def release_slot(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = ReleaseForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("slot is required")
    slot_id = form.cleaned_data["slot"]
    released = services.release(slot_id, actor=actor(request))
    notice = (
        Notice("success", RELEASED.format(slot=slot_id))
        if released
        else Notice("info", ALREADY_FREE.format(slot=slot_id))
    )
    if not request.htmx:
        messages.add_message(request, messages.SUCCESS if released else messages.INFO, notice.text)
        return redirect(_detail_url(limit, request.POST))
    limit.refresh_from_db()
    return render(request, "limits/limit_detail.html#live", _live_context(request, limit, request.POST, notice))


@require_POST
@operator_required
def set_capacity(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = CapacityForm(request.POST)
    if form.is_valid():
        try:
            limit = services.set_capacity(limit.name, form.cleaned_data["capacity"], actor=actor(request))
        except services.LimitsError as error:
            form.add_error("capacity" if error.field == "capacity" else None, _sentence(error.message))
        else:
            text = CAPACITY_SET.format(value=limit.capacity, declared=limit.declared_capacity)
            return _edited(request, limit, Notice("success", text))
    return _edit_rejected(request, limit, capacity_form=form)


@require_POST
@operator_required
def set_max_hold(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = MaxHoldForm(request.POST)
    if form.is_valid():
        try:
            limit = services.set_max_hold(limit.name, form.cleaned_data["max_hold"], actor=actor(request))
        except services.LimitsError as error:
            form.add_error("max_hold" if error.field == "max_hold" else None, _sentence(error.message))
        else:
            text = MAX_HOLD_SET.format(
                value=format_duration(limit.max_hold_ms), declared=format_duration(limit.declared_max_hold_ms)
            )
            return _edited(request, limit, Notice("success", text))
    return _edit_rejected(request, limit, max_hold_form=form)


@require_POST
@operator_required
def reset_limit(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = _limit_or_404(name)
    form = ResetForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("field must be 'capacity' or 'max_hold'")
    if form.cleaned_data["field"] == "capacity":
        limit = services.set_capacity(limit.name, None, actor=actor(request))
        text = CAPACITY_RESET.format(value=limit.capacity)
    else:
        limit = services.set_max_hold(limit.name, None, actor=actor(request))
        text = MAX_HOLD_RESET.format(value=format_duration(limit.max_hold_ms))
    return _edited(request, limit, Notice("success", text))


# --- helpers ------------------------------------------------------------------------------------


def _limit_or_404(name: str) -> Limit:
    limit = selectors.get_limit(name)
    if limit is None:
        raise Http404(f"No limit named {name!r}.")
    return limit


def _search(params: QueryDict) -> str:
    """?q= as a limit name fragment: names are lowercase, at most 64 characters. (A NUL never
    gets here: studio.plumbing.middleware answers 400 first.)"""
    return params.get("q", "").strip().lower()[:SEARCH_MAX_LENGTH]


def _list_url(search: str, number: int) -> str:
    query = urlencode({"q": search, "page": number} if search else {"page": number})
    return f"{reverse('limits:list')}?{query}"


def _page_number(params: QueryDict, key: str) -> int:
    value = params.get(key, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else 1


def _live_context(
    request: HtmxHttpRequest, limit: Limit, params: QueryDict, notice: Notice | None = None
) -> dict[str, Any]:
    """The figures, slots, queue and activity of a limit: a constant number of queries, whatever
    the number of slots and queued runs (totals come from the limit's counters)."""
    slots = selectors.live_slots_page(limit, number=_page_number(params, "slots"), size=SLOTS_PER_PAGE)
    queue = selectors.queue_page(limit, number=_page_number(params, "queue"), size=QUEUE_PER_PAGE)
    return {
        "limit": limit,
        "slots": slots,
        "queue": queue,
        "slots_pager": Pager(slots, "Slot pages", "#live", lambda number: _detail_link(limit, number, queue.number)),
        "queue_pager": Pager(queue, "Queue pages", "#live", lambda number: _detail_link(limit, slots.number, number)),
        "activity": selectors.recent_activity(limit, size=ACTIVITY_SIZE),
        "can_operate": request.user.has_perm(OPERATE_LIMIT),
        "notice": notice,
        "live_url": _detail_link(limit, slots.number, queue.number),
    }


def _edit_context(
    limit: Limit,
    *,
    can_operate: bool = True,
    capacity_form: CapacityForm | None = None,
    max_hold_form: MaxHoldForm | None = None,
    edit_notice: Notice | None = None,
) -> dict[str, Any]:
    return {
        "limit": limit,
        "capacity_form": capacity_form or CapacityForm(initial={"capacity": limit.capacity}),
        "max_hold_form": max_hold_form or MaxHoldForm(initial={"max_hold": duration_input(limit.max_hold_ms)}),
        "edit_notice": edit_notice,
        "can_operate": can_operate,
    }


def _edited(request: HtmxHttpRequest, limit: Limit, notice: Notice) -> HttpResponse:
    """A change went through: show the fresh edit panel, and tell the page to refresh its figures,
    slots and queue (raising capacity may just have granted waiting runs)."""
    if not request.htmx:
        messages.success(request, notice.text)
        return redirect(_detail_url(limit, request.POST))
    response = render(request, "limits/limit_detail.html#edit-panel", _edit_context(limit, edit_notice=notice))
    return trigger_client_event(response, LIMIT_CHANGED_EVENT)


def _edit_rejected(
    request: HtmxHttpRequest,
    limit: Limit,
    *,
    capacity_form: CapacityForm | None = None,
    max_hold_form: MaxHoldForm | None = None,
) -> HttpResponse:
    """A bad value: nothing changed; the form comes back with the message next to the field."""
    context = _edit_context(limit, capacity_form=capacity_form, max_hold_form=max_hold_form)
    if request.htmx:
        return render(request, "limits/limit_detail.html#edit-panel", context, status=422)
    context |= _live_context(request, limit, request.POST)
    return render(request, "limits/limit_detail.html", context, status=422)


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


def _detail_url(limit: Limit, params: QueryDict) -> str:
    return _detail_link(limit, _page_number(params, "slots"), _page_number(params, "queue"))


def _detail_link(limit: Limit, slots: int, queue: int) -> str:
    return f"{reverse('limits:detail', args=[limit.name])}?slots={slots}&queue={queue}"
