"""SPEC 14.6 in the Django admin (issue 47): a limit's on_full and its queue's caps are set and
reset through services.set_on_full and set_max_waiting (audited, kept across a deploy); bad
values are shown by their field and change nothing; the figures say what a full limit does."""

from __future__ import annotations

import pytest

from limits.models import AuditEvent, Limit
from tests.factories import declare

pytestmark = pytest.mark.django_db

EMPTY = {"capacity": "", "max_hold": "", "per_key": "", "share": "", "on_full": "", "max_waiting": ""}


@pytest.fixture
def calls(clock) -> Limit:
    return declare(calls={"capacity": 2, "max_hold": "45m", "max_waiting": 50})["calls"]


def _change(admin_client, limit: Limit, **data: str):
    return admin_client.post(f"/admin/limits/limit/{limit.id}/change/", EMPTY | {"max_waiting_per_key": ""} | data)


def test_on_full_and_the_caps_are_set_and_reset_through_the_services(calls, admin_client) -> None:
    page = admin_client.get(f"/admin/limits/limit/{calls.id}/change/").content.decode()
    assert 'name="on_full"' in page and 'name="max_waiting"' in page and 'name="max_waiting_per_key"' in page
    assert _change(admin_client, calls, on_full="skip", max_waiting="5", max_waiting_per_key="1").status_code == 302
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("skip", 5, 1)
    assert (
        "when full: skip, max waiting 5, per key 1 (0 skipped, 0 refused, 0 replaced)"
        in admin_client.get(f"/admin/limits/limit/{calls.id}/change/").content.decode()
    )
    _change(admin_client, calls)
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("wait", 50, None)
    actions = list(AuditEvent.objects.exclude(action="sync").order_by("id").values_list("action", "new_value"))
    assert actions == [
        ("on_full", "skip"),
        ("max_waiting", "5"),
        ("max_waiting_key", "1"),
        ("on_full", "wait (declared)"),
        ("max_waiting", "50 (declared)"),
        ("max_waiting_key", "none (declared)"),
    ]


def test_bad_values_are_shown_by_their_field_and_change_nothing(calls, admin_client) -> None:
    response = _change(admin_client, calls, on_full="later", max_waiting="0", max_waiting_per_key="many")
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"on_full", "max_waiting", "max_waiting_per_key"}
    assert errors["max_waiting"] == ["Max waiting must be a whole number from 1 to 1,000,000, not 0."]
    limit = Limit.objects.get(name="calls")
    assert (limit.on_full_override, limit.max_waiting_override, limit.max_waiting_per_key_override) == ("", None, None)
    assert not AuditEvent.objects.exclude(action="sync").exists()


def test_replace_is_a_choice_set_through_the_service(calls, admin_client) -> None:
    """SPEC 14.3, 14.6: the admin's When full offers replace, set through set_on_full (audited)."""
    assert (
        "replace: take the place of its key"
        in admin_client.get(f"/admin/limits/limit/{calls.id}/change/").content.decode()
    )
    assert _change(admin_client, calls, on_full="replace").status_code == 302
    assert Limit.objects.get(name="calls").on_full == "replace"
    assert AuditEvent.objects.filter(action="on_full", new_value="replace").exists()
