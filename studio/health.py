"""/healthz: is this box able to work? Database and broker reachable, static files servable, and
how long ago the sweep ran."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from limits.models import SweepState
from studio.celery import app
from studio.checks import static_files_problem

SWEEP_STALE_SECONDS = 60


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker answer and this process can serve static files (no
    missing manifest: studio.checks), 503 otherwise. `last_sweep_age_s` is null until beat ran
    the first sweep; above 60 s the status is 'degraded' (is beat running?)."""
    body: dict[str, object] = {"database": "ok", "broker": "ok", "static": "ok", "last_sweep_age_s": None}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        last = SweepState.objects.filter(id=1).values_list("last_run_at", flat=True).first()
        if last is not None:
            body["last_sweep_age_s"] = round((timezone.now() - last).total_seconds(), 1)
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
