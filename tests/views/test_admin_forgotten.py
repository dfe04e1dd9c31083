"""Issue 30: the record of `stackbone limits forget` (ForgottenLimit) in the Django admin, read-only
like the audit rows it stands in for: an operator who forgot a limit finds who forgot it, when,
what it declared and how many rows went; nobody adds, changes or deletes a record there; the
actor's text is shown escaped (limits.printable), as every user-supplied text in the admin."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from limits.forget import forget_limit
from limits.models import ForgottenLimit
from limits.services import acquire, release
from tests.cli.conftest import run_cli
from tests.factories import declare
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db

LIST = "/admin/limits/forgottenlimit/"
ACTIVE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def forgotten() -> ForgottenLimit:
    """old-calls (capacity 3, max hold 45m) held a slot, left the config and was forgotten."""
    declare(old_calls={"capacity": 3, "max_hold": "45m"}, voice_calls={"capacity": 1, "max_hold": "1h"})
    release(acquire("old-calls", run_id="r1").slot_id)
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})
    assert run_cli("forget", "old-calls", "--yes").code == 0
    return ForgottenLimit.objects.get()


@pytest.mark.parametrize("who", ["superuser", "operator"])
def test_a_forgotten_limit_is_listed_with_who_when_and_what_went(forgotten, who) -> None:
    if who == "superuser":
        user = User.objects.create_superuser("root", "root@example.com", "a-long-password")
    else:
        user = make_user("ada", "limits.operate_limit", staff=True)
    client = signed_in(user)

    index = client.get("/admin/").content.decode()
    assert 'href="/admin/limits/forgottenlimit/"' in index
    page = client.get(LIST).content.decode()
    cells = dict(re.findall(r'<td class="field-(\w+)">(.*?)</td>', page))
    removed = json.loads(html.unescape(cells.pop("removed_escaped")))  # PostgreSQL's jsonb orders keys its own way
    assert cells == {
        "name_escaped": "old-calls",
        "kind_escaped": "limit",
        "actor_escaped": forgotten.actor,
        "declared_capacity": "3",
        "declared_max_hold": "45m",
    }
    assert removed == {
        "slots": 1,
        "queue_entries": 0,
        "keys": 0,
        "audit_events": 1,
        "minutes": 0,
        "key_spans": 0,
        "totals": 0,
    }
    detail = client.get(f"{LIST}{forgotten.pk}/change/")
    assert detail.status_code == 200
    body = detail.content.decode()
    assert "old-calls forgotten by" in body and "45m" in body and "&quot;audit_events&quot;" in body


def test_a_workflow_bounds_record_shows_no_max_hold(db) -> None:
    ForgottenLimit.objects.create(
        name="workflow.sync_tenant",
        kind="workflow",
        at="2026-12-01T10:00:00Z",
        actor="cli:ada",
        declared_capacity=4,
        declared_max_hold_ms=None,
        removed={"slots": 0},
    )
    client = signed_in(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    page = client.get(LIST).content.decode()
    assert re.search(r'<td class="field-declared_max_hold">—</td>', page), page


def test_records_cannot_be_added_changed_or_deleted_in_the_admin(forgotten) -> None:
    client = signed_in(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    url = f"{LIST}{forgotten.pk}/"
    assert client.get(f"{LIST}add/").status_code == 403
    assert client.post(f"{LIST}add/", {"name": "x", "kind": "limit"}).status_code == 403
    client.post(f"{url}change/", {"name": "renamed", "actor": "nobody"})
    assert client.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    record = ForgottenLimit.objects.get()
    assert (record.name, record.actor) == ("old-calls", forgotten.actor)
    form = client.get(f"{url}change/").content.decode().partition('id="forgottenlimit_form"')[2].partition("</form>")[0]
    assert not re.search(r'<(input(?! type="hidden")|textarea|select)', form), form


def test_staff_without_a_permission_do_not_see_the_records(forgotten) -> None:
    client = signed_in(make_user("eve", staff=True))
    assert client.get(LIST).status_code == 403


def test_a_hostile_actor_is_shown_escaped(db) -> None:
    declare(old_calls={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 1, "max_hold": "1h"})
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})
    record = forget_limit("old-calls", actor="cli:\u202eevil\x1b[31m")
    client = signed_in(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    for url in (LIST, f"{LIST}?q=evil", f"{LIST}{record.pk}/change/"):
        page = client.get(url).content.decode()
        assert not ACTIVE.search(page), (url, ACTIVE.search(page))
        assert "cli:\\u202eevil\\x1b[31m" in page, url
