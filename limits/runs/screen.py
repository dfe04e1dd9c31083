"""The Studio Runs screen (/studio/runs/): every run, newest first, filtered by status, workflow,
key and the limit it waits for, searched by run id or label, refreshed live; a Start run form (with
each workflow's docstring as its hint, keeping the workflow and key after a start) and a Cancel
button for users who may operate runs (studio.change_run, the run page's permission).

Reads go through limits.runs.listing (keyset pages: a constant number of queries at any number of
runs); starting is limits.runs.start_run and cancelling the run page's cancel_or_404, both
through limits.runs.listing, the same code `stackbone runs` and /api/runs/ use."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

from django import forms
from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from limits.config import check_key
from limits.runs import listing, pages, views
from stackbone.plumbing.access import CANCEL_RUN, HtmxHttpRequest, permission_required, studio_login_required

OPERATE_RUN = CANCEL_RUN  # one permission starts and cancels runs: "Can change run"
NEEDS_OPERATE_RUN = (
    "Starting and cancelling runs needs the permission “Can change run” (studio.change_run). "
    "Ask an administrator to grant it to you or to a group you belong to."
)
RUNS_CHANGED_EVENT = "runs-changed"
STARTED = "Started {run_id} ({workflow}): {status}."
CANCELLED = "Cancelled {run_id}. It left every queue and freed any reservation; busy slots it holds stay busy."
NOT_CANCELLED = "{run_id} had already finished ({status}): nothing changed."
WORKFLOW_REQUIRED = "Choose a workflow to start."
INPUT_HELP = 'A JSON object, e.g. {"call_id": "c-1"}; empty means {}.'

operator_required = permission_required(OPERATE_RUN, NEEDS_OPERATE_RUN)


class StartRunForm(forms.Form):
    """What the browser sent; the rules (known workflow, JSON object, key) are listing's, whose
    RunsError lands next to its field. No `maxlength`: a long key is refused, never cut."""

    workflow = forms.CharField(error_messages={"required": WORKFLOW_REQUIRED})
    input = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 4}))
    key = forms.CharField(required=False, strip=False)

    def clean_input(self) -> dict[str, Any]:
        try:
            return listing.parse_input(self.cleaned_data.get("input", ""))
        except listing.RunsError as error:
            raise forms.ValidationError(error.message) from None


# --- the list -----------------------------------------------------------------------------------


@require_GET
@vary_on_headers("HX-Request")
@studio_login_required
def run_list_view(request: HtmxHttpRequest) -> HttpResponse:
    template = "studio/runs/run_list.html#runs-table" if request.htmx else "studio/runs/run_list.html"
    return render(request, template, _context(request, request.GET))


@require_POST
@operator_required
def start_run(request: HtmxHttpRequest) -> HttpResponse:
    """Start a run; a refusal shows the form again (422) with the message by its field, and
    creates nothing."""
    form = StartRunForm(request.POST)
    run = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            run = listing.start(data["workflow"], data["input"], data["key"] or None)
        except listing.RunsError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
    if run is None:
        if request.htmx:
            return render(request, "studio/runs/run_list.html#start-form", _form_context(request, form), status=422)
        return render(request, "studio/runs/run_list.html", _context(request, QueryDict(), start_form=form), status=422)
    text = STARTED.format(run_id=run.id, workflow=run.workflow, status=run.status)
    if not request.htmx:
        messages.success(request, text)
        return redirect(_list_url(_list_params(request)))
    notice = {"level": "success", "text": text, "run_id": run.id}
    # The next run is often of the same workflow and key (a tenant's): keep them, not the input.
    again = StartRunForm(initial={"workflow": run.workflow, "key": form.cleaned_data["key"], "input": "{}"})
    response = render(request, "studio/runs/run_list.html#start-form", _form_context(request, again, notice))
    return trigger_client_event(response, RUNS_CHANGED_EVENT)


@require_POST
@operator_required
def cancel_run(request: HtmxHttpRequest) -> HttpResponse:
    """Cancel the run named by the form's `run` as a run's page does (views.cancel_or_404); answer
    the list as it is now, with what happened."""
    cancelled, run = views.cancel_or_404(request.POST.get("run", ""))
    text = (CANCELLED if cancelled else NOT_CANCELLED).format(run_id=run.id, status=run.status)
    params = _list_params(request)
    if not request.htmx:
        (messages.success if cancelled else messages.info)(request, text)
        return redirect(_list_url(params))
    notice = {"level": "success" if cancelled else "info", "text": text}
    return render(request, "studio/runs/run_list.html#runs-table", _context(request, params, notice=notice))


# --- helpers ------------------------------------------------------------------------------------


FILTER_KEYS = ("status", "workflow", "waiting", "q", "key")


def _filter(params: QueryDict) -> listing.RunFilter:
    """The list's filters from the query: a value that is not one (an unknown status) means no
    filter, as in the Limits list: a link, not a form."""
    status = params.get("status", "")
    key = params.get("key", "")
    try:
        check_key(key)
    except ValueError:
        key = ""  # not a key (too long, a control character): no filter
    return listing.RunFilter(
        status=status if status in listing.STATUSES else "",
        workflow=params.get("workflow", "")[:200],
        waiting_for=params.get("waiting", "")[:64],
        search=params.get("q", "").strip()[: listing.SEARCH_MAX_LENGTH],
        key=key,
    )


def _list_params(request: HtmxHttpRequest) -> QueryDict:
    """For a POST: the filters and page of the list the operator is on (htmx sends its URL),
    so the answer shows the same list."""
    current = request.htmx.current_url if request.htmx else None
    if current and urlsplit(current).path == reverse("runs"):
        return QueryDict(urlsplit(current).query)
    return QueryDict()


def _query(run_filter: listing.RunFilter, **page: str) -> dict[str, str]:
    values = {
        "status": run_filter.status,
        "workflow": run_filter.workflow,
        "waiting": run_filter.waiting_for,
        "q": run_filter.search,
        "key": run_filter.key,
        **page,
    }
    return {key: value for key, value in values.items() if value}


def _list_url(params: QueryDict) -> str:
    run_filter = _filter(params)
    page = {key: params.get(key, "") for key in ("older", "newer") if listing.Cursor.decode(params.get(key))}
    query = urlencode(_query(run_filter, **page))
    return reverse("runs") + (f"?{query}" if query else "")


def _context(
    request: HtmxHttpRequest,
    params: QueryDict,
    *,
    start_form: StartRunForm | None = None,
    notice: dict[str, str] | None = None,
) -> dict[str, Any]:
    run_filter = _filter(params)
    older, newer = listing.Cursor.decode(params.get("older")), listing.Cursor.decode(params.get("newer"))
    page = listing.runs_page(run_filter, older_than=older, newer_than=newer if older is None else None)
    base = reverse("runs")

    def link(**cursor: str) -> str:
        query = urlencode(_query(run_filter, **cursor))
        return base + (f"?{query}" if query else "")

    here = {"older": params.get("older", "")} if older else {"newer": params.get("newer", "")} if newer else {}
    return {
        "page": page,
        "filter": run_filter,
        "statuses": listing.STATUSES,
        "limits": listing.limit_names(),
        "search_matches": f"{pages.SEARCH_MATCHES:,}",
        "list_url": link(**here),
        "newest_url": link(),
        "newer_url": link(newer=page.newer.encode()) if page.newer else "",
        "older_url": link(older=page.older.encode()) if page.older else "",
        **_form_context(request, start_form, notice),
    }


def _form_context(
    request: HtmxHttpRequest, start_form: StartRunForm | None, notice: dict[str, str] | None = None
) -> dict[str, Any]:
    form = start_form or StartRunForm(initial={"input": "{}"})
    workflows = listing.workflow_names()
    selected = form["workflow"].value() or (workflows[0] if workflows else "")
    return {
        "workflows": workflows,
        "hints": listing.workflow_hints(),
        "selected_workflow": selected,
        "can_operate": request.user.has_perm(OPERATE_RUN),
        "start_form": form,
        # Folded on a fresh page (at phone width the list comes first); open once used.
        "start_open": start_form is not None or notice is not None,
        "input_help": INPUT_HELP,
        "notice": notice,
    }
