"""SPEC 5.5: every operator action leaves exactly one audit row naming the actor, on every surface
(Studio, admin, CLI, API); a refused or no-op action leaves none."""

from __future__ import annotations

import getpass

import pytest
from django.contrib.auth.models import User
from django.test import Client

from limits.models import AuditEvent, Limit, Slot
from tests.api.conftest import Api
from tests.api.conftest import operator as api_operator
from tests.cli.conftest import run_cli

pytestmark = pytest.mark.django_db

PAGE = "/studio/limits/voice-calls/"
HTMX = {"HX-Request": "true"}


@pytest.fixture
def busy_slot(calls) -> str:
    return calls[0]


def new_events(before: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.order_by("id")[before:])


def audited(action, expected_action: str, actor: str, **fields: str) -> AuditEvent:
    before = AuditEvent.objects.count()
    action()
    events = new_events(before)
    assert len(events) == 1, [(e.action, e.actor) for e in events]
    event = events[0]
    assert (event.action, event.actor) == (expected_action, actor)
    assert event.limit.name == "voice-calls"
    for name, value in fields.items():
        assert getattr(event, name) == value, (name, getattr(event, name))
    return event


# --- Studio --------------------------------------------------------------------------------------


def test_studio_actions_each_leave_one_row_naming_the_user(busy_slot, operator_client) -> None:
    c = operator_client
    audited(
        lambda: c.post(f"{PAGE}release/", {"slot": busy_slot}, headers=HTMX),
        "release",
        "user:ada",
        slot_id=busy_slot,
        old_value="busy",
    )
    audited(
        lambda: c.post(f"{PAGE}capacity/", {"capacity": "7"}, headers=HTMX),
        "capacity",
        "user:ada",
        old_value="2",
        new_value="7",
    )
    audited(
        lambda: c.post(f"{PAGE}max-hold/", {"max_hold": "1h"}, headers=HTMX),
        "max_hold",
        "user:ada",
        new_value="3600000",
    )
    audited(
        lambda: c.post(f"{PAGE}reset/", {"field": "capacity"}, headers=HTMX),
        "capacity",
        "user:ada",
        new_value="2 (declared)",
    )
    audited(
        lambda: c.post(f"{PAGE}reset/", {"field": "max_hold"}), "max_hold", "user:ada", new_value="2700000 (declared)"
    )


def test_studio_refusals_and_no_ops_leave_no_row(busy_slot, operator_client, viewer_client) -> None:
    before = AuditEvent.objects.count()
    operator_client.post(f"{PAGE}release/", {"slot": busy_slot}, headers=HTMX)
    assert AuditEvent.objects.count() == before + 1
    operator_client.post(f"{PAGE}release/", {"slot": busy_slot}, headers=HTMX)  # already free
    operator_client.post(f"{PAGE}capacity/", {"capacity": "0"}, headers=HTMX)
    viewer_client.post(f"{PAGE}capacity/", {"capacity": "5"}, headers=HTMX)  # 403
    Client(enforce_csrf_checks=True).post(f"{PAGE}capacity/", {"capacity": "5"})  # anonymous
    assert AuditEvent.objects.count() == before + 1


# --- admin ---------------------------------------------------------------------------------------


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="a-long-password"))
    return client


def test_an_admin_override_leaves_one_row_per_changed_value_naming_the_user(calls, root) -> None:
    limit = Limit.objects.get(name="voice-calls")
    url = f"/admin/limits/limit/{limit.pk}/change/"
    audited(lambda: root.post(url, {"capacity": "9", "max_hold": ""}), "capacity", "user:root", new_value="9")
    audited(lambda: root.post(url, {"capacity": "9", "max_hold": "2h"}), "max_hold", "user:root", new_value="7200000")
    audited(
        lambda: root.post(url, {"capacity": "", "max_hold": "2h"}), "capacity", "user:root", new_value="2 (declared)"
    )
    before = AuditEvent.objects.count()
    root.post(url, {"capacity": "", "max_hold": "2h"})  # nothing changed: nothing recorded
    root.post(url, {"capacity": "0", "max_hold": "2h"})  # refused
    assert AuditEvent.objects.count() == before


def test_the_admin_release_action_leaves_one_row_per_released_slot(busy_slot, root) -> None:
    post = {"action": "release_selected", "_selected_action": [busy_slot]}
    audited(lambda: root.post("/admin/limits/slot/", post), "release", "user:root", slot_id=busy_slot)
    before = AuditEvent.objects.count()
    root.post("/admin/limits/slot/", post)  # already free
    assert AuditEvent.objects.count() == before
    assert Slot.objects.get(id=busy_slot).freed_by == "user:root"


# --- CLI -----------------------------------------------------------------------------------------


def test_cli_verbs_each_leave_one_row_naming_the_os_user(busy_slot) -> None:
    me = f"cli:{getpass.getuser()}"
    audited(lambda: run_cli("release", busy_slot, "--yes"), "release", me, slot_id=busy_slot)
    audited(lambda: run_cli("capacity", "voice-calls", "4"), "capacity", me, new_value="4")
    audited(lambda: run_cli("max-hold", "voice-calls", "90s"), "max_hold", me, new_value="90000")
    audited(lambda: run_cli("capacity", "voice-calls", "reset"), "capacity", me, new_value="2 (declared)")
    before = AuditEvent.objects.count()
    assert run_cli("release", busy_slot, "--yes").code == 1  # already free
    assert run_cli("capacity", "voice-calls", "0").code == 2
    assert AuditEvent.objects.count() == before


# --- API -----------------------------------------------------------------------------------------


def test_api_writes_each_leave_one_row_naming_the_tokens_user(busy_slot) -> None:
    api = Api(api_operator("ops")[1])
    audited(lambda: api.post(f"slots/{busy_slot}/release/"), "release", "api:ops", slot_id=busy_slot)
    audited(lambda: api.post("voice-calls/capacity/", {"capacity": 6}), "capacity", "api:ops", new_value="6")
    audited(lambda: api.post("voice-calls/max-hold/", {"max_hold": "2m"}), "max_hold", "api:ops", new_value="120000")
    audited(lambda: api.post("voice-calls/max-hold/", {"max_hold": None}), "max_hold", "api:ops")
    before = AuditEvent.objects.count()
    assert api.post(f"slots/{busy_slot}/release/").json()["released"] is False
    assert api.post("voice-calls/capacity/", {"capacity": 0}).status_code == 400
    assert AuditEvent.objects.count() == before
