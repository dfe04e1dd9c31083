"""The permission matrix: every Studio, admin and API URL × anonymous / signed-in viewer / operator /
superuser × GET / POST answers exactly what docs/operations.md, docs/api.md and docs/security.md document.

What must never happen: someone without the right permission (or without a CSRF token, or
without a valid bearer token) changes a Limit, Slot, QueueEntry, AuditEvent or Run row. Every cell
compares a snapshot of those rows before and after the request: only the cells marked as writes
may change them.

The people:
- anonymous: no session, no token;
- viewer: signed in (or, for the API, holding a token), no permission, not staff;
- operator: staff (the admin is for staff users) with exactly `limits.operate_limit` and
  `studio.change_run`, none of Django's view permissions;
- superuser: staff and superuser.

In the API rows a person is their bearer token (no session); API calls with a session cookie and
no token, and session writes without a CSRF token, have their own tests below the matrix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import unquote

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote as admin_urlquote
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from limits import services
from limits.config import define_workspace
from limits.models import ApiToken, AuditEvent, ForgottenLimit, Limit, LimitKey, QueueEntry, Slot
from limits.tokens import issue_token
from stackbone.models import Run
from tests.factories import declare
from tests.views.conftest import make_user

# one_database (tests/conftest.py): who may do what is decided before any engine call; the writes
# themselves are proved on both databases by tests/views and tests/api.
pytestmark = [pytest.mark.django_db, pytest.mark.one_database]

PERSONAS = ["anonymous", "viewer", "operator", "superuser"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A status code; for a redirect, where it goes (a login page gets `?next=<the path>`);
    `writes`: the request goes through and changes rows."""

    status: int
    location: str | None = None
    login: bool = False
    writes: bool = False

    def __repr__(self) -> str:
        where = f" to {self.location}{'?next=…' if self.login else ''}" if self.location else ""
        return f"{self.status}{where}{' (writes)' if self.writes else ''}"


OK = Outcome(200)
LOGIN = Outcome(302, "/accounts/login/", login=True)  # Studio's sign-in page
ADMIN_LOGIN = Outcome(302, "/admin/login/", login=True)  # the admin's sign-in page
TO_ADMIN = Outcome(302, "/admin/")
TO_LIMITS = Outcome(302, "/studio/limits/")
NO_TOKEN = Outcome(401)
DENIED = Outcome(403)
NOT_FOUND = Outcome(404)
WRONG_METHOD = Outcome(405)
API_DONE = Outcome(200, writes=True)
API_STARTED = Outcome(201, writes=True)  # POST /api/runs/: a run created


def done(location: str) -> Outcome:
    """A write that went through and redirected."""
    return Outcome(302, location, writes=True)


class Row(NamedTuple):
    method: str
    url: str  # {limit}, {limit_pk}, {slot}, {run}, {entry}, ... filled in per test (World.ids)
    anonymous: Outcome
    viewer: Outcome
    operator: Outcome
    superuser: Outcome


DETAIL = "/studio/limits/{limit}/?slots=1&queue=1"
RESUMED = done("/studio/limits/{paused}/?slots=1&queue=1")  # back to the paused limit's page
RUN = "/studio/runs/{run}/"
BOX_SAVED = done("/studio/limits/box/?slots=1&queue=1")  # back to the box's page
RUNS = "/studio/runs/"
LIMIT_SAVED = done("/admin/limits/limit/")
RELEASED = done("/admin/limits/slot/")
KEY_SAVED = done("/admin/limits/limitkey/")  # the Slots list's action "Release selected slots"

# fmt: off
MATRIX: list[Row] = [
    #   method  url                                       anonymous     viewer        operator            superuser
    # --- outside Studio's sign-in ----------------------------------------------------------------------------------
    Row("GET",  "/healthz",                               OK,           OK,           OK,                 OK),
    Row("POST", "/healthz",                               WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/favicon.ico",                           OK,           OK,           OK,                 OK),
    Row("POST", "/favicon.ico",                           WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    # Prometheus: its own bearer token (tests/insights/test_metrics.py); none set here: not found
    Row("GET",  "/metrics",                               NOT_FOUND,    NOT_FOUND,    NOT_FOUND,          NOT_FOUND),
    Row("POST", "/metrics",                               WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/",                                      TO_LIMITS,    TO_LIMITS,    TO_LIMITS,          TO_LIMITS),
    Row("POST", "/",                                      WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/accounts/login/",                       OK,           OK,           OK,                 OK),
    # a wrong password: the form again
    Row("POST", "/accounts/login/",                       OK,           OK,           OK,                 OK),
    Row("GET",  "/accounts/logout/",                      WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/accounts/logout/",                      OK,           OK,           OK,                 OK),
    Row("GET",  "/accounts/password_change/",             LOGIN,        OK,           OK,                 OK),
    # a wrong old password: the form again
    Row("POST", "/accounts/password_change/",             LOGIN,        OK,           OK,                 OK),
    # --- Studio: watching needs a signed-in user; changing needs the permission --------------------------------------
    Row("GET",  "/studio/limits/",                        LOGIN,        OK,           OK,                 OK),
    Row("POST", "/studio/limits/",                        WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/studio/limits/-/workers/",              LOGIN,        OK,           OK,                 OK),
    Row("POST", "/studio/limits/-/workers/",              WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    # the box's run concurrency (base 2, burst 1.5): its base and burst, from the box's edit panel
    Row("GET",  "/studio/limits/-/box/",                  WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/-/box/",                  LOGIN,        DENIED,       BOX_SAVED,          BOX_SAVED),
    Row("GET",  "/studio/limits/{limit}/",                LOGIN,        OK,           OK,                 OK),
    Row("POST", "/studio/limits/{limit}/",                WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/studio/limits/{limit}/insights/",       LOGIN,        OK,           OK,                 OK),
    Row("POST", "/studio/limits/{limit}/insights/",       WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/studio/limits/{limit}/release/",        WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/release/",        LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/capacity/",       WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/capacity/",       LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/max-hold/",       WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/max-hold/",       LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/per-key/",        WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/per-key/",        LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/key-pool/",       WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/key-pool/",       LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/key-pool/reset/", WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/key-pool/reset/", LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/share/",         WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/share/",         LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/when-full/",     WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/when-full/",     LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/key-weight/",    WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/key-weight/",    LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/key-min/",       WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/key-min/",       LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/reset/",          WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/reset/",          LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{limit}/pause/",          WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{limit}/pause/",          LOGIN,        DENIED,       done(DETAIL),       done(DETAIL)),
    Row("GET",  "/studio/limits/{paused}/resume/",        WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/limits/{paused}/resume/",        LOGIN,        DENIED,       RESUMED,            RESUMED),
    Row("GET",  "/studio/runs/",                          LOGIN,        OK,           OK,                 OK),
    Row("POST", "/studio/runs/",                          WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/studio/runs/-/start/",                  WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/runs/-/start/",                  LOGIN,        DENIED,       done(RUNS),         done(RUNS)),
    Row("GET",  "/studio/runs/-/cancel/",                 WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/runs/-/cancel/",                 LOGIN,        DENIED,       done(RUNS),         done(RUNS)),
    Row("GET",  "/studio/runs/{run}/",                    LOGIN,        OK,           OK,                 OK),
    Row("POST", "/studio/runs/{run}/",                    WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/studio/runs/{run}/cancel/",             WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/studio/runs/{run}/cancel/",             LOGIN,        DENIED,       done(RUN),          done(RUN)),
    # --- the admin: staff only; the operator sees Limits (operate_limit) and Runs (change_run), not the other lists
    Row("GET",  "/admin/",                                ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("POST", "/admin/",                                ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("GET",  "/admin/login/",                          OK,           OK,           TO_ADMIN,           TO_ADMIN),
    # a wrong password: the form again
    Row("POST", "/admin/login/",                          OK,           OK,           OK,                 OK),
    Row("GET",  "/admin/logout/",                         TO_ADMIN,     TO_ADMIN,     WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/admin/logout/",                         TO_ADMIN,     TO_ADMIN,     OK,                 OK),
    Row("GET",  "/admin/limits/limit/",                   ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # the action "Pause selected limits" (operators: limits.operate_limit)
    Row("POST", "/admin/limits/limit/",                   ADMIN_LOGIN,  ADMIN_LOGIN,  LIMIT_SAVED,        LIMIT_SAVED),
    Row("GET",  "/admin/limits/limit/{limit_pk}/change/", ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("POST", "/admin/limits/limit/{limit_pk}/change/", ADMIN_LOGIN,  ADMIN_LOGIN,  LIMIT_SAVED,        LIMIT_SAVED),
    Row("GET",  "/admin/limits/limit/add/",               ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/limit/add/",               ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/limit/{limit_pk}/delete/", ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/limit/{limit_pk}/delete/", ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/slot/",                    ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # the action "Release selected slots" (operators: limits.operate_limit lets them view the list)
    Row("POST", "/admin/limits/slot/",                    ADMIN_LOGIN,  ADMIN_LOGIN,  RELEASED,           RELEASED),
    Row("GET",  "/admin/limits/slot/{admin_slot}/change/",      ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("POST", "/admin/limits/slot/{admin_slot}/change/",      ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/slot/add/",                ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/slot/add/",                ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/slot/{admin_slot}/delete/",      ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/slot/{admin_slot}/delete/",      ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/queueentry/",              ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # a POST without an action (none is offered): the list again
    Row("POST", "/admin/limits/queueentry/",              ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("GET",  "/admin/limits/queueentry/{entry}/change/", ADMIN_LOGIN, ADMIN_LOGIN, OK,                 OK),
    Row("POST", "/admin/limits/queueentry/{entry}/change/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,             DENIED),
    Row("GET",  "/admin/limits/queueentry/add/",          ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/queueentry/add/",          ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/queueentry/{entry}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,             DENIED),
    Row("POST", "/admin/limits/queueentry/{entry}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,             DENIED),
    Row("GET",  "/admin/limits/limitkey/",                ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # a POST without an action (none is offered): the list again
    Row("POST", "/admin/limits/limitkey/",                ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("GET",  "/admin/limits/limitkey/{limitkey_pk}/change/", ADMIN_LOGIN, ADMIN_LOGIN, OK,             OK),
    # the key's pool size, saved through services.set_per_key
    Row("POST", "/admin/limits/limitkey/{limitkey_pk}/change/", ADMIN_LOGIN, ADMIN_LOGIN, KEY_SAVED,      KEY_SAVED),
    Row("GET",  "/admin/limits/limitkey/add/",            ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/limitkey/add/",            ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/limitkey/{limitkey_pk}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,         DENIED),
    Row("POST", "/admin/limits/limitkey/{limitkey_pk}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,         DENIED),
    Row("GET",  "/admin/limits/auditevent/",              ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # a POST without an action (none is offered): the list again
    Row("POST", "/admin/limits/auditevent/",              ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("GET",  "/admin/limits/auditevent/{event}/change/", ADMIN_LOGIN, ADMIN_LOGIN, OK,                 OK),
    Row("POST", "/admin/limits/auditevent/{event}/change/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,             DENIED),
    Row("GET",  "/admin/limits/auditevent/add/",          ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/auditevent/add/",          ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/auditevent/{event}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,             DENIED),
    Row("POST", "/admin/limits/auditevent/{event}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,             DENIED),
    # the record of `limits forget`: read-only, like the audit
    Row("GET",  "/admin/limits/forgottenlimit/",          ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("POST", "/admin/limits/forgottenlimit/",          ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("GET",  "/admin/limits/forgottenlimit/{forgotten}/change/", ADMIN_LOGIN, ADMIN_LOGIN, OK,         OK),
    Row("POST", "/admin/limits/forgottenlimit/{forgotten}/change/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,     DENIED),
    Row("GET",  "/admin/limits/forgottenlimit/add/",      ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/limits/forgottenlimit/add/",      ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/limits/forgottenlimit/{forgotten}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,     DENIED),
    Row("POST", "/admin/limits/forgottenlimit/{forgotten}/delete/", ADMIN_LOGIN, ADMIN_LOGIN, DENIED,     DENIED),
    Row("GET",  "/admin/studio/run/",                     ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # a POST without an action (none is offered): the list again
    Row("POST", "/admin/studio/run/",                     ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    # read-only
    Row("GET",  "/admin/studio/run/{admin_run}/change/",        ADMIN_LOGIN,  ADMIN_LOGIN,  OK,                 OK),
    Row("POST", "/admin/studio/run/{admin_run}/change/",        ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/studio/run/add/",                 ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/studio/run/add/",                 ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("GET",  "/admin/studio/run/{admin_run}/delete/",        ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    Row("POST", "/admin/studio/run/{admin_run}/delete/",        ADMIN_LOGIN,  ADMIN_LOGIN,  DENIED,             DENIED),
    # ApiToken is not in the admin: its URLs are unknown (tokens: `manage.py limits token ...`)
    Row("GET",  "/admin/limits/apitoken/",                ADMIN_LOGIN,  ADMIN_LOGIN,  NOT_FOUND,          NOT_FOUND),
    Row("GET",  "/admin/limits/apitoken/{token_pk}/change/", ADMIN_LOGIN, ADMIN_LOGIN, NOT_FOUND,         NOT_FOUND),
    # --- the JSON API: a person is their bearer token; reads need any active user's, writes an operator's ----------
    Row("GET",  "/api/limits/",                           NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/",                           WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/{limit}/",                   NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/{limit}/",                   WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/{limit}/slots/",             NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/{limit}/slots/",             WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/{limit}/queue/",             NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/{limit}/queue/",             WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/slots/{slot}/",              NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/slots/{slot}/",              WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/slots/{slot}/release/",      WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/slots/{slot}/release/",      NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/capacity/",          WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/capacity/",          NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/max-hold/",          WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/max-hold/",          NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/keys/",              NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/{limit}/keys/",              WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/{limit}/per-key/",           WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/per-key/",           NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/share/",            WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/share/",            NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/on-full/",          WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/on-full/",          NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/max-waiting/",      WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/max-waiting/",      NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/weight/",           WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/weight/",           NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/min/",              WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/min/",              NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/pause/",             WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{limit}/pause/",             NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{paused}/resume/",           WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{paused}/resume/",           NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{old_limit}/forget/",        WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/limits/{old_limit}/forget/",        NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/-/workers/",                 NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/-/workers/",                 WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/limits/-/box/",                     NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/limits/-/box/",                     NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/limits/{limit}/no-such-thing/",     NO_TOKEN,     NOT_FOUND,    NOT_FOUND,          NOT_FOUND),
    Row("POST", "/api/limits/{limit}/no-such-thing/",     NO_TOKEN,     NOT_FOUND,    NOT_FOUND,          NOT_FOUND),
    # --- /api/runs/ (limits.runs.api): reads need any active user's token; starting and cancelling studio.change_run
    Row("GET",  "/api/runs/",                             NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/runs/",                             NO_TOKEN,     DENIED,       API_STARTED,        API_STARTED),
    Row("GET",  "/api/runs/{run}/",                       NO_TOKEN,     OK,           OK,                 OK),
    Row("POST", "/api/runs/{run}/",                       WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("GET",  "/api/runs/{run}/cancel/",                WRONG_METHOD, WRONG_METHOD, WRONG_METHOD,       WRONG_METHOD),
    Row("POST", "/api/runs/{run}/cancel/",                NO_TOKEN,     DENIED,       API_DONE,           API_DONE),
    Row("GET",  "/api/runs/{run}/no-such-thing/",         NO_TOKEN,     NOT_FOUND,    NOT_FOUND,          NOT_FOUND),
    Row("POST", "/api/runs/{run}/no-such-thing/",         NO_TOKEN,     NOT_FOUND,    NOT_FOUND,          NOT_FOUND),
]
# fmt: on

# What each POST sends: the body an operator's request would carry, so a refusal is the
# permission's doing, never a bad value's.
FORMS: dict[str, dict[str, Any]] = {
    "/accounts/login/": {"username": "bob", "password": "not-the-password"},
    "/admin/login/": {"username": "bob", "password": "not-the-password"},
    "/accounts/password_change/": {"old_password": "wrong", "new_password1": "x", "new_password2": "x"},
    "/studio/limits/{limit}/release/": {"slot": "{slot}"},
    "/studio/limits/{limit}/capacity/": {"capacity": "3"},
    "/studio/limits/{limit}/max-hold/": {"max_hold": "1h"},
    "/studio/limits/{limit}/reset/": {"field": "max_hold"},
    "/studio/limits/{limit}/per-key/": {"per_key": "1"},
    "/studio/limits/{limit}/key-pool/": {"key": "acme", "pool": "1"},
    "/studio/limits/{limit}/key-pool/reset/": {"key": "acme"},
    "/studio/limits/{limit}/share/": {"share": "fair"},
    "/studio/limits/{limit}/when-full/": {"on_full": "skip", "max_waiting": "50", "max_waiting_per_key": ""},
    "/studio/limits/{limit}/key-weight/": {"key": "acme", "weight": "2"},
    "/studio/limits/{limit}/key-min/": {"key": "acme", "min": "1"},
    "/studio/limits/-/box/": {"base": "3", "burst": "2"},
    "/studio/runs/-/start/": {"workflow": "export_report", "input": '{{"report_id": "r-1"}}'},  # {{: World.fill
    "/studio/runs/-/cancel/": {"run": "{run}"},
    "/admin/limits/limit/{limit_pk}/change/": {"capacity": "3", "max_hold": ""},
    "/admin/limits/limit/": {"action": "pause_selected", "_selected_action": ["{limit_pk}"]},
    "/admin/limits/slot/": {"action": "release_selected", "_selected_action": ["{slot}"]},
    "/admin/limits/limitkey/{limitkey_pk}/change/": {"pool": "2"},
}
JSON_BODIES: dict[str, dict[str, Any]] = {
    "/api/limits/{limit}/capacity/": {"capacity": 3},
    "/api/limits/{limit}/max-hold/": {"max_hold": "1h"},
    "/api/limits/{limit}/per-key/": {"value": 1},
    "/api/limits/{limit}/share/": {"value": "fair"},
    "/api/limits/{limit}/on-full/": {"value": "skip"},
    "/api/limits/{limit}/max-waiting/": {"value": 5, "per_key": True},
    "/api/limits/{limit}/weight/": {"value": 2, "key": "acme"},
    "/api/limits/{limit}/min/": {"value": 1, "key": "acme"},
    "/api/limits/{old_limit}/forget/": {},
    "/api/limits/{limit}/pause/": {},
    "/api/limits/{paused}/resume/": {},
    "/api/limits/-/box/": {"base": 3},
    "/api/runs/": {"workflow": "export_report", "input": {"report_id": "r-1"}},
    "/api/runs/{run}/cancel/": {},
}


def _row_id(row: Row) -> str:
    return f"{row.method} {row.url}"


# --- the world every cell starts from ---------------------------------------------------------------


@dataclass
class World:
    ids: dict[str, str]
    users: dict[str, User]
    tokens: dict[str, str]

    def fill(self, text: str) -> str:
        return text.format(**self.ids)


@pytest.fixture
def world(clock) -> World:
    """voice-calls (capacity 2, max hold 45m): two busy slots, and a run waiting third in the
    queue (so cancelling it writes); the four people, each with a bearer token."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    for i in range(3):
        services.acquire("voice-calls", run_id=f"run-{i}", label=f"call-{i}")
        clock.advance(seconds=1)
    now = timezone.now()
    run = Run.objects.create(
        id="run_40ab56789abcdef012345678",  # "_40" is what the admin's quote() makes of "@"
        workflow="place_call",
        status=Run.Status.RUNNING,
        suspended=True,
        waiting_for="slot:voice-calls",
        created_at=now,
        started_at=now,
        updated_at=now,
    )
    services.acquire("voice-calls", run_id=run.id, label="order-77")
    services.acquire("voice-calls", run_id="run-keyed", key="acme")  # a key's pool row (waits, third)
    users = {
        "viewer": make_user("bob"),
        "operator": make_user("ada", "limits.operate_limit", "studio.change_run", staff=True),
        "superuser": User.objects.create_superuser("root", "root@example.com", "a-long-password"),
    }
    tokens = {persona: issue_token(user, name=persona)[1] for persona, user in users.items()}
    # old-calls left the config with nothing in use (an operator may forget it); a record of one forgotten;
    # paused-calls is paused (an operator may resume it)
    paused_calls = {"capacity": 1, "max_hold": "1h"}
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, old_calls={"capacity": 1, "max_hold": "1h"})
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, paused_calls=paused_calls)
    services.pause_limit("paused-calls", actor="user:setup")
    box = {"base": 2, "burst": 1.5}  # the box's run concurrency (an operator may change it)
    services.sync_workspace(
        define_workspace(limits={"voice-calls": {"capacity": 2, "max_hold": "45m"}, "paused-calls": paused_calls},
                         run_concurrency=box)
    )  # fmt: skip
    forgotten = ForgottenLimit.objects.create(
        name="older-calls", kind="limit", at=timezone.now(), actor="cli:ada", declared_capacity=1, removed={}
    )
    limit = Limit.objects.get(name="voice-calls")
    if not AuditEvent.objects.exists():
        services.set_max_hold("voice-calls", "1h", actor="user:setup")
    slot = Slot.objects.filter(limit=limit, state="busy").order_by("granted_at").first()
    assert slot is not None
    ids = {
        "limit": limit.name,
        "limit_pk": str(limit.pk),
        "slot": slot.id,
        "admin_slot": admin_urlquote(slot.id),
        "run": run.id,
        # The admin's URLs carry primary keys through admin_urlquote: "run_40…" is not "run@…".
        "admin_run": admin_urlquote(run.id),
        "entry": str(QueueEntry.objects.get(run_id=run.id).pk),
        "event": str(AuditEvent.objects.order_by("id").first().pk),
        "token_pk": str(ApiToken.objects.order_by("id").first().pk),
        "limitkey_pk": str(LimitKey.objects.get(key="acme").pk),
        "old_limit": "old-calls",
        "paused": "paused-calls",
        "forgotten": str(forgotten.pk),
    }
    return World(ids=ids, users=users, tokens=tokens)


def snapshot() -> dict[str, list[Mapping[str, Any]]]:
    """Every row an operator action could write."""
    return {
        model.__name__: list(model.objects.order_by("pk").values())
        for model in (Limit, LimitKey, Slot, QueueEntry, AuditEvent, ForgottenLimit, Run)
    }


def _form(world: World, url: str) -> dict[str, Any]:
    return {
        key: [world.fill(item) for item in value] if isinstance(value, list) else world.fill(value)
        for key, value in FORMS.get(url, {}).items()
    }


def request(client: Client, world: World, row: Row, *, token: str | None = None) -> Any:
    url = world.fill(row.url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if row.method == "GET":
        return client.get(url, headers=headers)
    if row.url in JSON_BODIES:
        return client.post(url, json.dumps(JSON_BODIES[row.url]), content_type="application/json", headers=headers)
    return client.post(url, _form(world, row.url), headers=headers)


def assert_outcome(response: Any, expected: Outcome, world: World, row: Row) -> None:
    path = world.fill(row.url)
    assert response.status_code == expected.status, (response.status_code, response.get("Location"))
    if expected.location is None:
        return
    location = response["Location"]
    if expected.login:
        target, _, query = location.partition("?")
        assert target == expected.location, location
        assert query.startswith("next=") and unquote(query.removeprefix("next=")) == path, location
    else:
        assert location == world.fill(expected.location), location


# --- the matrix ------------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("row", MATRIX, ids=_row_id)
def test_each_cell_answers_as_documented_and_only_permitted_writes_change_rows(
    world: World, row: Row, persona: str
) -> None:
    expected: Outcome = getattr(row, persona)
    client = Client()
    token = None
    if persona != "anonymous":
        if row.url.startswith("/api/"):
            token = world.tokens[persona]  # the API reads the token, never the session
        else:
            client.force_login(world.users[persona])
    before = snapshot()

    response = request(client, world, row, token=token)

    assert_outcome(response, expected, world, row)
    if expected.writes:
        assert snapshot() != before, "the request went through but changed nothing"
    else:
        assert snapshot() == before, "a refused or read-only request changed rows"


# --- writes without their credential ----------------------------------------------------------------

SESSION_POSTS = [row for row in MATRIX if row.method == "POST" and not row.url.startswith("/api/")]
API_ROWS = [row for row in MATRIX if row.url.startswith("/api/")]


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("row", SESSION_POSTS, ids=_row_id)
def test_a_session_post_without_the_csrf_token_is_refused_and_changes_nothing(
    world: World, row: Row, persona: str
) -> None:
    client = Client(enforce_csrf_checks=True)
    if persona != "anonymous":
        client.force_login(world.users[persona])
    before = snapshot()

    response = request(client, world, row)

    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert snapshot() == before


@pytest.mark.parametrize("persona", ["viewer", "operator", "superuser"])
@pytest.mark.parametrize("row", API_ROWS, ids=_row_id)
def test_the_api_ignores_a_session_cookie_without_a_token(world: World, row: Row, persona: str) -> None:
    """Signed in to Studio, with the CSRF checks on: the API still answers 401 (it never reads the
    session, so it needs no CSRF token either), and nothing changes."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users[persona])
    before = snapshot()

    response = request(client, world, row)

    expected = WRONG_METHOD if getattr(row, persona) == WRONG_METHOD else NO_TOKEN
    assert response.status_code == expected.status
    if expected == NO_TOKEN:
        assert response.json()["error"].startswith("missing or invalid token")
        assert response["WWW-Authenticate"] == 'Bearer realm="stackbone"'
    assert snapshot() == before


BAD_CREDENTIALS = {
    "unknown token": "Bearer sbk_not-a-token-anyone-was-given",
    "empty bearer": "Bearer ",
    "another scheme": "Token {operator}",
    "basic auth": "Basic cm9vdDphLWxvbmctcGFzc3dvcmQ=",
    "token with a suffix": "Bearer {operator}x",
    "inactive operator's token": "Bearer {operator}",
}


@pytest.mark.parametrize("credential", list(BAD_CREDENTIALS))
@pytest.mark.parametrize("row", [row for row in API_ROWS if row.superuser != WRONG_METHOD], ids=_row_id)
def test_an_api_call_without_a_valid_bearer_token_is_401_and_changes_nothing(
    world: World, row: Row, credential: str
) -> None:
    if credential == "inactive operator's token":
        User.objects.filter(username="ada").update(is_active=False)
    header = BAD_CREDENTIALS[credential].format(operator=world.tokens["operator"])
    client = Client()
    client.force_login(world.users["superuser"])  # a session of the most powerful user changes nothing
    before = snapshot()
    url = world.fill(row.url)

    if row.method == "GET":
        response = client.get(url, headers={"Authorization": header})
    else:
        body = json.dumps(JSON_BODIES.get(row.url, {}))
        response = client.post(url, body, content_type="application/json", headers={"Authorization": header})

    assert response.status_code == 401
    assert snapshot() == before


# --- the matrix covers every URL --------------------------------------------------------------------


def _route_names(patterns: list[URLPattern | URLResolver], namespace: str = "") -> set[str]:
    names: set[str] = set()
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue  # the admin's URLs are checked per registered model below
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            names |= _route_names(pattern.url_patterns, inner)
        elif pattern.name:
            names.add(f"{namespace}{pattern.name}")
    return names


# Django's stock password-reset pages: public forms that never touch a limit or a run.
OUTSIDE_THE_MATRIX = {
    "password_change_done",
    "password_reset",
    "password_reset_done",
    "password_reset_confirm",
    "password_reset_complete",
}


def test_the_matrix_has_a_get_and_a_post_row_for_every_route(world: World) -> None:
    from django.urls import resolve

    covered: dict[str, set[str]] = {}
    for row in MATRIX:
        match = resolve(world.fill(row.url).partition("?")[0])
        name = f"{match.namespace}:{match.url_name}" if match.namespace else match.url_name
        covered.setdefault(name or "", set()).add(row.method)
    for name in _route_names(get_resolver().url_patterns) - OUTSIDE_THE_MATRIX:
        assert covered.get(name) == {"GET", "POST"}, name
    for model in admin.site._registry:
        app, model_name = model._meta.app_label, model._meta.model_name
        if app not in ("limits", "studio"):
            continue
        for view in ("changelist", "change", "add", "delete"):
            assert covered.get(f"admin:{app}_{model_name}_{view}") == {"GET", "POST"}, (model_name, view)
    assert ApiToken not in admin.site._registry  # hence the two 404 rows
