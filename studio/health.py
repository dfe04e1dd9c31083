"""/healthz: is this box able to work? Database and broker reachable, static files servable, how
long ago the sweep ran, and how far the hosts' clocks are off the database's."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from limits.models import SweepState
from stackbone.plumbing import clock
from studio.celery import app
from studio.checks import static_files_problem

SWEEP_STALE_SECONDS = 60


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker answer and this process can serve static files (no
    missing manifest: studio.checks), 503 otherwise. `last_sweep_age_s` is null until beat ran
    the first sweep; above 60 s the status is 'degraded' (is beat running?). `clock_skew_s`: the
    largest skew of a host's clock against the database's that its workers or beat measured in
    the last 15 minutes (null: none measured), shown, not judged: every rule keeps the database's
    time (stackbone.plumbing.clock)."""
    body: dict[str, object] = {
        "database": "ok",
        "broker": "ok",
        "static": "ok",
        "last_sweep_age_s": None,
        "clock_skew_s": None,
    }
    try:
        now = clock.now()  # the database's: the sweep stamped its pass with it
        last = SweepState.objects.filter(id=1).values_list("last_run_at", flat=True).first()
        if last is not None:
            body["last_sweep_age_s"] = round((now - last).total_seconds(), 1)
        largest = clock.recent_skews().values_list("skew_seconds", flat=True).first()
        if largest is not None:
            body["clock_skew_s"] = largest
    except Exception as error:  # any failure to reach the database is the answer, not a 500
        body["database"] = f"error: {type(error).__name__}"
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as error:  # likewise for the broker
        body["broker"] = f"error: {type(error).__name__}"
    static = static_files_problem(this_process=True)
    if static is not None:
        body["static"] = f"error: {static}"
    healthy = body["database"] == "ok" and body["broker"] == "ok" and body["static"] == "ok"
    age = body["last_sweep_age_s"]
    stale = age is None or (isinstance(age, float) and age > SWEEP_STALE_SECONDS)
    body["status"] = "down" if not healthy else ("degraded" if stale else "ok")
    return JsonResponse(body, status=200 if healthy else 503)
