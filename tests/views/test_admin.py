"""The admin: figures and filters for limits; overrides through the services; slots, the queue
and the audit log read-only; a release action that goes through the service."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.utils import quote as admin_quote
from django.contrib.auth.models import User
from django.test import Client

from limits import services
from limits.config import define_workspace
from limits.models import AuditEvent, Limit, Slot
from tests.factories import assert_counters_match_rows, holders, queue
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


@pytest.fixture
def staff_viewer_client(db) -> Client:
    """Staff who may look at everything in the admin but not operate limits."""
    user = make_user(
        "eve", "limits.view_limit", "limits.change_limit", "limits.view_slot", "limits.view_queueentry", staff=True
    )
    client = Client()
    client.force_login(user)
    return client


def _change(client: Client, limit: Limit, **data: str) -> Any:
    return client.post(f"/admin/limits/limit/{limit.id}/change/", {"capacity": "", "max_hold": ""} | data)


def test_the_limit_list_shows_figures_and_overrides(busy_limit, admin_client) -> None:
    services.set_capacity("voice-calls", 3, actor="user:root")
    page = admin_client.get("/admin/limits/limit/").content.decode()
    assert "3 / 3" in page and "capacity (declared 2)" in page and "45m" in page


def test_the_limit_list_filters_overridden_and_undeclared_and_searches(busy_limit, admin_client) -> None:
    services.sync_workspace(
        define_workspace(
            limits={
                "voice-calls": {"capacity": 2, "max_hold": "45m"},
                "partner-api": {"capacity": 5, "max_hold": "10m"},
            }
        )
    )
    services.set_max_hold("partner-api", "1h", actor="user:root")

    def names(query: str) -> set[str]:
        response = admin_client.get(f"/admin/limits/limit/?{query}")
        return {limit.name for limit in response.context["cl"].result_list}

    assert names("overridden=any") == {"partner-api"}
    assert names("overridden=capacity") == set()
    assert "voice-calls" in names("overridden=none")
    assert names("declared=no") == {"report-exports"}
    assert names("q=voice") == {"voice-calls"}


def test_raising_capacity_in_the_admin_goes_through_the_service(busy_limit, admin_client) -> None:
    response = _change(admin_client, busy_limit, capacity="3")
    assert response.status_code == 302
    busy_limit.refresh_from_db()
    assert busy_limit.capacity_override == 3
    assert holders("voice-calls")[-1] == ("run-2", "reserved")  # the raise granted the head at once
    event = AuditEvent.objects.get(action="capacity")
    assert (event.actor, event.old_value, event.new_value) == ("user:root", "2", "3")
    assert_counters_match_rows("voice-calls")


def test_the_admin_edits_max_hold_and_resets_both_by_emptying_the_fields(busy_limit, admin_client) -> None:
    _change(admin_client, busy_limit, capacity="4", max_hold="2h")
    busy_limit.refresh_from_db()
    assert (busy_limit.capacity_override, busy_limit.max_hold_override_ms) == (4, 7_200_000)
    page = admin_client.get(f"/admin/limits/limit/{busy_limit.id}/change/").content.decode()
    assert 'value="4"' in page and 'value="2h"' in page
    _change(admin_client, busy_limit)
    busy_limit.refresh_from_db()
    assert (busy_limit.capacity_override, busy_limit.max_hold_override_ms) == (None, None)
    assert AuditEvent.objects.filter(actor="user:root").count() == 4


@pytest.mark.parametrize(
    ("field", "value"),
    [("capacity", "0"), ("capacity", "100001"), ("capacity", "abc"), ("max_hold", "45x"), ("max_hold", "31d")],
)
def test_a_bad_override_in_the_admin_is_rejected_and_changes_nothing(
    busy_limit, admin_client, field: str, value: str
) -> None:
    response = _change(admin_client, busy_limit, **{field: value})
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    busy_limit.refresh_from_db()
    assert (busy_limit.capacity_override, busy_limit.max_hold_override_ms) == (None, None)
    assert not AuditEvent.objects.filter(action__in=["capacity", "max_hold"]).exists()


def test_counters_cannot_be_edited_in_the_admin(busy_limit, admin_client) -> None:
    _change(admin_client, busy_limit, busy_count="0", waiting_count="0", capacity_override="1")
    busy_limit.refresh_from_db()
    assert (busy_limit.busy_count, busy_limit.waiting_count, busy_limit.capacity_override) == (2, 3, None)
    assert admin_client.get("/admin/limits/limit/add/").status_code == 403
    assert admin_client.post(f"/admin/limits/limit/{busy_limit.id}/delete/").status_code == 403


def test_slots_queue_and_audit_are_read_only(busy_limit, admin_client) -> None:
    slot = Slot.objects.filter(state="busy").first()
    # The admin's own quoting: a slot id is 'slot_' + hex, and '_40' unquoted is '@' (CI once drew
    # 'slot_4080…', and the unquoted URL named a slot that does not exist).
    pk = admin_quote(slot.pk)
    for url in ["/admin/limits/slot/", "/admin/limits/queueentry/", "/admin/limits/auditevent/", "/admin/studio/run/"]:
        assert admin_client.get(url).status_code == 200
    assert admin_client.get(f"/admin/limits/slot/{pk}/change/").status_code == 200
    admin_client.post(f"/admin/limits/slot/{pk}/change/", {"state": "released"})
    slot.refresh_from_db()
    assert slot.state == "busy"
    for url in ["/admin/limits/slot/add/", "/admin/limits/queueentry/add/", "/admin/limits/auditevent/add/"]:
        assert admin_client.get(url).status_code == 403
    assert admin_client.post(f"/admin/limits/slot/{pk}/delete/").status_code == 403


def test_the_release_action_goes_through_the_service(busy_limit, admin_client) -> None:
    slots = list(Slot.objects.filter(state="busy").values_list("id", flat=True))
    response = admin_client.post(
        "/admin/limits/slot/", {"action": "release_selected", "_selected_action": [*slots, "slot_gone"]}, follow=True
    )
    assert "Released 2 slot(s)." in response.content.decode()
    assert holders("voice-calls") == [("run-2", "reserved"), ("run-3", "reserved")]
    assert queue("voice-calls") == ["run-4"]
    assert AuditEvent.objects.filter(action="release", actor="user:root").count() == 2
    assert_counters_match_rows("voice-calls")
    again = admin_client.post(
        "/admin/limits/slot/", {"action": "release_selected", "_selected_action": slots}, follow=True
    )
    assert "2 slot(s) were already free" in again.content.decode()


def test_staff_without_the_operate_permission_can_neither_release_nor_edit(busy_limit, staff_viewer_client) -> None:
    page = staff_viewer_client.get("/admin/limits/slot/")
    assert page.status_code == 200
    assert "release_selected" not in page.content.decode()
    slots = list(Slot.objects.filter(state="busy").values_list("id", flat=True))
    staff_viewer_client.post("/admin/limits/slot/", {"action": "release_selected", "_selected_action": slots})
    assert len(holders("voice-calls")) == 2 and not AuditEvent.objects.filter(action="release").exists()
    assert _change(staff_viewer_client, busy_limit, capacity="9").status_code == 403
    busy_limit.refresh_from_db()
    assert busy_limit.capacity_override is None
