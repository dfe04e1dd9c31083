"""The JSON API behind `stackbone limits --agent`, mounted at /api/limits/.

Auth is a bearer token only (`Authorization: Bearer <token>`, limits.tokens): session cookies
are never read, so a browser cannot be tricked into a write (no CSRF hole) and the views are
exempt from the CSRF middleware. Reads need a valid token of an active user; writes also need the
`limits.operate_limit` permission. Answers are JSON; errors are `{"error": ..., "field": ...}`
with 400 (bad value, `field` names it), 401 (no or bad token), 403 (no permission), 404
(unknown limit or slot, or no such path), 409 (forget refused as things stand), 413 (a body
over DATA_UPLOAD_MAX_MEMORY_SIZE) or 415 (a write whose body is not labelled application/json).
Writes go through limits.services with the actor `api:<username>`.

    GET  /api/limits/?kind=limit|workflow|box       {"limits": [limit, ...]}; kind: only the workspace's limits,
         only the workflows' own bounds (SPEC 11.5) or only the box; another kind is a 400 with field "kind"
    GET  /api/limits/<name>/                        limit
    GET  /api/limits/<name>/slots/?page=1&size=100  {"limit", "key", "slots", "page", "size", "total", "has_next",
         "now"}
    GET  /api/limits/<name>/queue/?page=1&size=100  {"limit", "key", "order", "queue", "page", ...}; positions
         count from 1 (both take &key=K: only that key's rows; queue positions then count within the key's
         queue); each row's eta_seconds is its estimated wait (limits.eta), null when unknown. On a fair
         limit ("order": "fair", else "arrival") the queue is in the order the grant will serve it (SPEC
         13.7): exact for the first `size` runs, estimated past them (each row's "position_estimated")
    GET  /api/limits/<name>/keys/?page=1&size=100   {"limit", "per_key", "key", "search", "keys", "no_key",
         "page", ...}; busiest first; &key=K: only that key; &search=S: keys containing S (any case)
    GET  /api/limits/slots/<slot_id>/               slot, with its "limit"
    POST /api/limits/slots/<slot_id>/release/       {"released": bool, "slot": slot as it was}
    POST /api/limits/<name>/capacity/  {"capacity": 30 | null}    {"old": 20, "limit": limit}
    POST /api/limits/<name>/max-hold/  {"max_hold": "1h" | 3600000 | null}  {"old": ms, "limit": limit}
    POST /api/limits/<name>/per-key/   {"value": 3 | null, "key": "tenant-1" (optional)}
         {"old": 3 | null, "limit": limit, "key": key | null}; without "key" the limit's per_key,
         with it that key's pool size; a bad value is a 400 with field "value"
    POST /api/limits/<name>/share/     {"value": "fifo" | "fair" | null}   {"old": "fifo", "limit": limit}:
         first come, first served or fair shares between keys (SPEC 13.5); null resets to the declared share
    POST /api/limits/<name>/on-full/   {"value": "wait" | "skip" | "replace" | null}   {"old": "wait", "limit": limit}:
         what an acquisition that cannot be granted at once does (SPEC 14.1); null resets to the declared one
    POST /api/limits/<name>/max-waiting/   {"value": 1-1000000 | null, "per_key": false | true}
         {"old": n | null, "limit": limit}: the queue's cap, or with per_key each key's (SPEC 14.5); null
         resets it to the declared one; a bad value is a 400 with field "value", a bad per_key "per_key"
    POST /api/limits/<name>/weight/    {"value": 1-100 | null, "key": "tenant-1"}
    POST /api/limits/<name>/min/       {"value": 0-capacity | null, "key": "tenant-1"}
         {"old": 1, "limit": limit, "key": key}: one key's weight or min on a fair limit (null resets:
         weight 1, min 0); a bad value is a 400 with field "value", a bad or missing key field "key"
    POST /api/limits/<name>/pause/     {} (or no body)   {"old": "running" | "paused", "limit": limit}: the
         limit grants nothing until resumed (SPEC 5.6); pausing a paused limit changes nothing
    POST /api/limits/<name>/resume/    {} (or no body)   {"old": "paused" | "running", "limit": limit}: its
         free capacity goes to the queue at once; resuming a running limit changes nothing
    POST /api/limits/<name>/forget/    {} (or no body)
         {"forgotten": true, "limit", "kind", "at", "actor", "removed": {...}}: a limit that left the
         config, with no slot in use and no run waiting, removed with its history (limits.forget);
         still declared, in use or waited for: 409 with field "limit", nothing changed
    GET  /api/limits/-/box/                         the box's run concurrency (SPEC 12): its limit row, with
         "base", "burst" and their declared values; 404 with field "limit" when none is declared
    POST /api/limits/-/box/   {"base": 12 | null, "burst": 1.5 | null} (either or both)
         {"old": {"base", "burst", "ceiling"}, "limit": the box}: overrides or resets (null) the base and
         burst (SPEC 12.5); a bad value is a 400 naming the field ("base", "burst"), nothing changed
    GET  /api/limits/-/workers/                     the Celery workers alive, the runs pending for one and
         the limits the workers bound (limits.workers.report, the keys of `stackbone workers --json`);
         under "-/" as in Studio: "<name>/" never takes a slash, so no limit's path is this one

A `limit` is serializers.limit_summary (the keys of `stackbone limits list --json`; its `kind` is
"limit", "workflow" or "box", and a workflow's bound and the box have null max hold; the box also
has `base` and `burst`, a workflow's bound `in_force` and `capped_by_box`; `paused` and
`paused_at` say whether and since when an operator paused it; `on_full`, `max_waiting`,
`max_waiting_per_key` with their declared values, and `skipped_count`, `refused_count`), a `key`
serializers.key_summary.
No key is null in JSON.

The package (issue 48: it was one module of 638 lines) holds the API's request handling, shared
with /api/runs/ (limits.api.requests: token, errors, bodies, paging), its reads (limits.api.reads)
and its writes (limits.api.writes); every name the module had is handed on here.
"""

from __future__ import annotations

from limits.api.reads import (
    BAD_KIND,
    BAD_SEARCH,
    limit_detail,
    limit_keys,
    limit_list,
    limit_queue,
    limit_slots,
    slot_detail,
    workers_report,
)
from limits.api.requests import (
    BAD_BODY,
    BAD_CONTENT_TYPE,
    BAD_PAGE,
    BODY_TOO_LARGE,
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MISSING_FIELD,
    NO_PERMISSION,
    NO_TOKEN,
    OPERATE_PERMISSION,
    UNKNOWN_PATH,
    UNKNOWN_SLOT,
    ApiError,
    ApiRequest,
    actor,
    body_field,
    checked_key,
    error_response,
    json_body,
    key_param,
    limit_named,
    page_answer,
    page_params,
    token_auth,
    unknown_path,
)
from limits.api.writes import (
    BAD_PER_KEY_FLAG,
    KEY_REQUIRED,
    MAX_WAITING_HELP,
    MIN_HELP,
    NO_BOX_FIELD,
    ON_FULL_HELP,
    PER_KEY_HELP,
    SHARE_HELP,
    UNKNOWN_BOX_FIELD,
    WEIGHT_HELP,
    _set_box,
    _set_key_field,
    _show_box,
    box,
    forget,
    pause,
    paused_word,
    release_slot,
    resume,
    set_capacity,
    set_max_hold,
    set_max_waiting,
    set_min,
    set_on_full,
    set_per_key,
    set_share,
    set_weight,
)

# The module's private helpers by their old names (limits.runs.api used _json_body).
_limit = limit_named
_page_params = page_params
_key_param = key_param
_checked_key = checked_key
_json_body = json_body
_body = body_field
_page_answer = page_answer

__all__ = [
    "ApiError",
    "ApiRequest",
    "BAD_BODY",
    "BAD_CONTENT_TYPE",
    "BAD_KIND",
    "BAD_PAGE",
    "BAD_PER_KEY_FLAG",
    "BAD_SEARCH",
    "BODY_TOO_LARGE",
    "DEFAULT_PAGE_SIZE",
    "KEY_REQUIRED",
    "MAX_PAGE_SIZE",
    "MAX_WAITING_HELP",
    "MIN_HELP",
    "MISSING_FIELD",
    "NO_BOX_FIELD",
    "NO_PERMISSION",
    "NO_TOKEN",
    "ON_FULL_HELP",
    "OPERATE_PERMISSION",
    "PER_KEY_HELP",
    "SHARE_HELP",
    "UNKNOWN_BOX_FIELD",
    "UNKNOWN_PATH",
    "UNKNOWN_SLOT",
    "WEIGHT_HELP",
    "_body",
    "_checked_key",
    "_json_body",
    "_key_param",
    "_limit",
    "_page_answer",
    "_page_params",
    "_set_box",
    "_set_key_field",
    "_show_box",
    "actor",
    "body_field",
    "box",
    "checked_key",
    "error_response",
    "forget",
    "json_body",
    "key_param",
    "limit_detail",
    "limit_keys",
    "limit_list",
    "limit_named",
    "limit_queue",
    "limit_slots",
    "page_answer",
    "page_params",
    "pause",
    "paused_word",
    "release_slot",
    "resume",
    "set_capacity",
    "set_max_hold",
    "set_max_waiting",
    "set_min",
    "set_on_full",
    "set_per_key",
    "set_share",
    "set_weight",
    "slot_detail",
    "token_auth",
    "unknown_path",
    "workers_report",
]
