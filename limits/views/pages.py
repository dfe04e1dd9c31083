"""The Limits screen's pages: the list (with its Workers panel) and a limit's page, whose live
region polls this same view with htmx (`limits/limit_detail.html#live`)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from limits import selectors, workers
from limits.models import Limit
from limits.views.regions import Pager, _edit_context, _limit_or_404, _live_context, _page_number
from stackbone.plumbing import clock as box_clock
from stackbone.plumbing.access import HtmxHttpRequest, studio_login_required

LIMITS_PER_PAGE = 100
SEARCH_MAX_LENGTH = 64

# The kind filter of the list: (value of ?kind=, what the select shows).
KIND_CHOICES = (
    ("", "All kinds"),
    (Limit.Kind.LIMIT.value, "Limits"),
    (Limit.Kind.WORKFLOW.value, "Workflow bounds"),
    (Limit.Kind.BOX.value, "The box"),
)


@require_GET
@studio_login_required
def workers_panel(request: HtmxHttpRequest) -> HttpResponse:
    """The Limits list's Workers panel (limits.workers): the Celery workers alive, the runs
    waiting for one, and the limits the workers bound. Loaded by htmx after the page and every
    10 s, so the list never waits for the workers' answer (kept 10 s per web process)."""
    found = workers.alive()
    bounded = workers.bounded_by_workers(found.concurrency)
    context = {
        "workers": found,
        "pending": workers.pending(box_clock.display_now()),
        "bounded": bounded[: workers.BOUNDED_SHOWN],
        "more_bounded": len(bounded) > workers.BOUNDED_SHOWN,
    }
    return render(request, "limits/limit_list.html#workers-panel", context)


@require_GET
@vary_on_headers("HX-Request")
@studio_login_required
def limit_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every limit, LIMITS_PER_PAGE a page, optionally those whose name contains ?q= and those of
    one ?kind= ("limit": declared in the workspace; "workflow": a workflow's own bound)."""
    search, kind = _search(request.GET), _kind(request.GET)
    number = _page_number(request.GET, "page")
    page = selectors.limits_page(search=search, kind=kind, number=number, size=LIMITS_PER_PAGE)
    context = {
        "search": search,
        "kind": kind,
        "kinds": KIND_CHOICES,
        "box_base": selectors.box_base(page.items),  # "capped by the box's base" on workflow bounds
        "declared_limits": [limit for limit in page.items if limit.declared],
        "undeclared_limits": [limit for limit in page.items if not limit.declared],
        "list_url": _list_url(search, page.number, kind),
        "pager": Pager(page, "Pages of limits", "#limits-table", lambda number: _list_url(search, number, kind)),
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


# --- helpers ------------------------------------------------------------------------------------


def _search(params: QueryDict) -> str:
    """?q= as a limit name fragment: names are lowercase, at most 64 characters. (A NUL never
    gets here: stackbone.plumbing.middleware answers 400 first.)"""
    return params.get("q", "").strip().lower()[:SEARCH_MAX_LENGTH]


def _kind(params: QueryDict) -> str:
    """?kind= as one of the kinds, or "" (every kind) for anything else: a filter, not a form."""
    value = params.get("kind", "")
    return value if value in selectors.KINDS else ""


def _list_url(search: str, number: int, kind: str = "") -> str:
    query: dict[str, str | int] = {"q": search} if search else {}
    if kind:
        query["kind"] = kind
    query["page"] = number
    return f"{reverse('limits:list')}?{urlencode(query)}"
