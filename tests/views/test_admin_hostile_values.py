"""The Django admin shows user-supplied text (keys, labels, run ids, actors, a run's input, output
and errors) with control and bidirectional-override characters escaped, as Studio and the CLI do
(limits.printable): in changelists, search results, change pages and their titles."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote  # ids like slot_24ab...: the admin reads _24 as '$'
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from limits import services
from limits.models import LimitKey, QueueEntry, Slot
from stackbone.models import Run, Step
from tests.factories import declare

pytestmark = pytest.mark.django_db

ACTIVE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
KEY = "acme\u202elive"  # a key may hold a bidirectional override (check_key refuses controls)
LABEL = "order\u202e77-lave \x1b[31mred"
RUN_ID = "run-\u202ex"


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


@pytest.fixture
def hostile(clock) -> None:
    """partner-api, 1 per key: KEY holds a slot (LABEL) and a second run of KEY waits (LABEL)."""
    declare(partner_api={"capacity": 5, "max_hold": "10m", "per_key": 1})
    services.acquire("partner-api", run_id=RUN_ID, key=KEY, label=LABEL)
    services.acquire("partner-api", run_id=RUN_ID + "2", key=KEY, label=LABEL)
    services.set_per_key("partner-api", 1, key=KEY, actor="user:root")  # an audit row naming the key


def shown(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    page = response.content.decode()
    assert not ACTIVE.search(page), (url, ACTIVE.search(page))
    return page


def test_slots_show_keys_labels_and_run_ids_escaped(admin_client, hostile) -> None:
    slot = Slot.objects.get(run_id=RUN_ID)
    for url in ("/admin/limits/slot/", "/admin/limits/slot/?q=order", f"/admin/limits/slot/{quote(slot.id)}/change/"):
        page = shown(admin_client, url)
        assert "acme\\u202elive" in page, url
        assert "order\\u202e77-lave \\x1b[31mred" in page, url
        assert "run-\\u202ex" in page, url


def test_queue_entries_show_keys_labels_and_run_ids_escaped(admin_client, hostile) -> None:
    entry = QueueEntry.objects.get()
    for url in (
        "/admin/limits/queueentry/",
        "/admin/limits/queueentry/?q=order",
        f"/admin/limits/queueentry/{entry.id}/change/",
    ):
        page = shown(admin_client, url)
        assert "acme\\u202elive" in page, url
        assert "order\\u202e77-lave \\x1b[31mred" in page, url
        assert "run-\\u202ex2" in page, url


def test_keys_show_escaped_in_the_list_and_on_the_change_page_and_its_title(admin_client, hostile) -> None:
    row = LimitKey.objects.get(key=KEY)
    for url in (
        "/admin/limits/limitkey/",
        "/admin/limits/limitkey/?q=acme",
        f"/admin/limits/limitkey/{row.id}/change/",
    ):
        page = shown(admin_client, url)
        assert "acme\\u202elive" in page, url
    # Sorting by the key still sorts by the stored key.
    assert re.search(r'<th scope="col" class="sortable column-key', shown(admin_client, "/admin/limits/limitkey/"))


def test_audit_events_show_keys_escaped(admin_client, hostile) -> None:
    assert "acme\\u202elive" in shown(admin_client, "/admin/limits/auditevent/")


def test_runs_show_input_output_errors_and_keys_escaped(admin_client) -> None:
    now = timezone.now()
    run = Run.objects.create(
        workflow="place_call",
        input={"to": "\u202e000 000 006 43+"},
        output={"note": "\u2066isolated\u2069"},
        status=Run.Status.FAILED,
        error="Traceback\n  \x1b[31mboom\x1b[0m \u202eevil",
        concurrency_key=KEY,
        waiting_for="Esperando \u202e hueco",
        created_at=now,
        updated_at=now,
    )
    Step.objects.create(run=run, seq=1, name="dial", status="failed", error="\u202estep\nfailed", started_at=now)
    page = shown(admin_client, "/admin/studio/run/")
    assert run.id in page
    page = shown(admin_client, f"/admin/studio/run/{quote(run.id)}/change/")
    assert "\\u202e000 000 006 43+" in page
    assert "\\u2066isolated\\u2069" in page
    assert "\\x1b[31mboom\\x1b[0m \\u202eevil" in page
    assert "\\u202estep" in page
    assert "acme\\u202elive" in page
    assert "Esperando \\u202e hueco" in page
