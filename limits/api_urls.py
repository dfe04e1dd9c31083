"""/api/limits/...: the JSON API (limits.api). Slot ids start with 'slot_', which no route of a
limit's name ends in, so a limit may be named 'slots'."""

from __future__ import annotations

from django.urls import path, re_path

from limits import api

app_name = "limits_api"

urlpatterns = [
    path("", api.limit_list, name="list"),
    # Under "-/" (as Studio's panel): "<str:name>/" never takes a slash, so no limit's path is this.
    path("-/workers/", api.workers_report, name="workers"),
    path("-/box/", api.box, name="box"),
    re_path(r"^slots/(?P<slot_id>slot_[A-Za-z0-9_-]{1,35})/$", api.slot_detail, name="slot"),
    re_path(r"^slots/(?P<slot_id>slot_[A-Za-z0-9_-]{1,35})/release/$", api.release_slot, name="release"),
    path("<str:name>/", api.limit_detail, name="limit"),
    path("<str:name>/slots/", api.limit_slots, name="slots"),
    path("<str:name>/queue/", api.limit_queue, name="queue"),
    path("<str:name>/keys/", api.limit_keys, name="keys"),
    path("<str:name>/capacity/", api.set_capacity, name="capacity"),
    path("<str:name>/max-hold/", api.set_max_hold, name="max-hold"),
    path("<str:name>/per-key/", api.set_per_key, name="per-key"),
    path("<str:name>/share/", api.set_share, name="share"),
    path("<str:name>/on-full/", api.set_on_full, name="on-full"),
    path("<str:name>/max-waiting/", api.set_max_waiting, name="max-waiting"),
    path("<str:name>/weight/", api.set_weight, name="weight"),
    path("<str:name>/min/", api.set_min, name="min"),
    path("<str:name>/pause/", api.pause, name="pause"),
    path("<str:name>/resume/", api.resume, name="resume"),
    path("<str:name>/forget/", api.forget, name="forget"),
    # Last: any other path under /api/limits/ answers a JSON 404, not Django's HTML page. It only
    # takes paths that end in '/', so a path without its slash is still redirected to the right one.
    re_path(r"^.*/$", api.unknown_path, name="unknown"),
]
