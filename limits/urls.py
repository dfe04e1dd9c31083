from __future__ import annotations

from django.urls import path

from limits import insights_views, views

app_name = "limits"

urlpatterns = [
    path("", views.limit_list, name="list"),
    # Under "-/": "<str:name>/" never takes a slash, so no limit's page can be this one.
    path("-/workers/", views.workers_panel, name="workers"),
    path("-/box/", views.set_box, name="box"),
    path("<str:name>/", views.limit_detail, name="detail"),
    path("<str:name>/release/", views.release_slot, name="release"),
    path("<str:name>/capacity/", views.set_capacity, name="capacity"),
    path("<str:name>/max-hold/", views.set_max_hold, name="max-hold"),
    path("<str:name>/per-key/", views.set_per_key, name="per-key"),
    path("<str:name>/reset/", views.reset_limit, name="reset"),
    path("<str:name>/pause/", views.pause_limit, name="pause"),
    path("<str:name>/resume/", views.resume_limit, name="resume"),
    path("<str:name>/insights/", insights_views.limit_insights, name="insights"),
    path("<str:name>/key-pool/", views.set_key_pool, name="key-pool"),
    path("<str:name>/key-pool/reset/", views.reset_key_pool, name="key-pool-reset"),
    path("<str:name>/share/", views.set_share, name="share"),
    path("<str:name>/when-full/", views.set_when_full, name="when-full"),
    path("<str:name>/key-weight/", views.set_key_weight, name="key-weight"),
    path("<str:name>/key-min/", views.set_key_min, name="key-min"),
]
