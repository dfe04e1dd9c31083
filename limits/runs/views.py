"""Studio pages outside the Limits screen: the front door and a run's page (with its Cancel, which
cancels as the Runs screen's does: cancel_or_404)."""

from __future__ import annotations

import json
from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from limits import selectors as limit_selectors
from limits.runs import listing, selectors
from stackbone.plumbing.access import (
    CANCEL_RUN,
    NEEDS_CANCEL_RUN,
    HtmxHttpRequest,
    permission_required,
    studio_login_required,
)
from stackbone.runs.models import Run

CANCELLED = "Cancelled. The run left every queue and freed any reservation; busy slots it holds stay busy."
NOT_CANCELLED = "This run had already finished: nothing changed."


@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    return redirect("limits:list")


@require_GET
@vary_on_headers("HX-Request")
@studio_login_required
def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = _run_or_404(run_id)
    template = "studio/run_detail.html#run-live" if request.htmx else "studio/run_detail.html"
    return render(request, template, _run_context(request, run))


@require_POST
@permission_required(CANCEL_RUN, NEEDS_CANCEL_RUN)
def cancel_run(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    cancelled, run = cancel_or_404(run_id)
    if not request.htmx:
        return redirect("run-detail", run_id=run.id)
    notice = {"level": "success" if cancelled else "info", "text": CANCELLED if cancelled else NOT_CANCELLED}
    return render(request, "studio/run_detail.html#run-live", _run_context(request, run, notice))


def cancel_or_404(run_id: str) -> tuple[bool, Run]:
    """Cancel a run for a Studio view, a run's page or the Runs screen (limits.runs.screen): the
    one cancel path (limits.runs.listing.cancel, which `stackbone runs cancel` and the API take
    too); (cancelled?, the run as it is now). An id no run has is a 404, nothing changed."""
    try:
        return listing.cancel(run_id)
    except listing.RunsError:
        raise Http404(f"No run with id {run_id!r}.") from None


def _run_or_404(run_id: str) -> Run:
    run = selectors.get_run(run_id)
    if run is None:
        raise Http404(f"No run with id {run_id!r}.")
    return run


def _run_context(request: HtmxHttpRequest, run: Run, notice: dict[str, str] | None = None) -> dict[str, Any]:
    waits = limit_selectors.waits_of_run(run.id)
    return {
        "run": run,
        "steps": selectors.run_steps(run),
        "held_slots": limit_selectors.live_slots_of_run(run.id),
        "waits": selectors.describe_waits(waits),
        "waits_eta": selectors.run_eta_text(waits),
        "starts_at": selectors.deferred_start(run),
        "outcome": selectors.run_outcome(run),  # SPEC 14.6: skipped, replaced, cancelled by a run
        "input_json": json.dumps(run.input, indent=2, sort_keys=True, ensure_ascii=False),
        "output_json": ""
        if run.output is None
        else json.dumps(run.output, indent=2, sort_keys=True, ensure_ascii=False),
        "can_cancel": request.user.has_perm(CANCEL_RUN) and not run.is_finished,
        "notice": notice,
    }
