"""/api/runs/...: the JSON API for runs (limits.runs.api). A run id never holds a slash, so
"<run_id>/cancel/" is never a run's own path."""

from __future__ import annotations

from django.urls import path, re_path

from limits.api.requests import unknown_path
from limits.runs import api

app_name = "runs_api"

urlpatterns = [
    path("", api.runs, name="list"),
    path("<str:run_id>/", api.run_detail, name="run"),
    path("<str:run_id>/cancel/", api.cancel, name="cancel"),
    # Last: any other path under /api/runs/ answers a JSON 404 (limits.api's), not Django's HTML page.
    re_path(r"^.*/$", unknown_path, name="unknown"),
]
