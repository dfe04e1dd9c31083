"""Studio's screens, for a project to include once (docs/embedding.md)::

    path("studio/", include("limits.studio_urls")),

Limits under limits/ (namespace "limits"), runs under runs/ (the names "runs", "run-detail", ...
that Studio's templates reverse)."""

from __future__ import annotations

from django.urls import include, path

from limits.runs import screen, views

urlpatterns = [
    path("limits/", include("limits.urls")),
    path("runs/", screen.run_list_view, name="runs"),
    # Under "-/": a run id is any text up to 64 characters (new_run_id makes "run_...", but nothing
    # stops a row with another id), and runs/start/ would hide a run whose id is "start".
    # "<run_id>/" never takes a slash, so "-/start/" cannot be a run's page.
    path("runs/-/start/", screen.start_run, name="runs-start"),
    path("runs/-/cancel/", screen.cancel_run, name="runs-cancel"),
    path("runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<str:run_id>/cancel/", views.cancel_run, name="run-cancel"),
]
