"""SPEC 13.5 in the Django admin (issue 28): a limit's share is set and reset through
services.set_share, a key's weight and min through set_weight and set_min (audited), as the
admin handles pool sizes; a bad value is refused by its field and changes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from limits import services
from limits.models import AuditEvent, Limit, LimitKey
from tests.factories import declare

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


@pytest.fixture
def fair() -> Limit:
    declare(tenant_jobs={"capacity": 4, "max_hold": "45m", "share": "fair"})
    services.acquire("tenant-jobs", run_id="a-1", key="acme")
    return Limit.objects.get(name="tenant-jobs")


def _change_limit(client: Client, limit: Limit, **data: str):
    return client.post(
        f"/admin/limits/limit/{limit.id}/change/", {"capacity": "", "max_hold": "", "per_key": "", "share": ""} | data
    )


def _change_key(client: Client, row: LimitKey, **data: str):
    return client.post(f"/admin/limits/limitkey/{row.id}/change/", {"pool": "", "weight": "", "min": ""} | data)


def test_the_share_is_set_and_reset_through_the_service(fair, admin_client) -> None:
    page = admin_client.get(f"/admin/limits/limit/{fair.id}/change/").content.decode()
    assert 'name="share"' in page
    assert _change_limit(admin_client, fair, share="fifo").status_code == 302
    assert Limit.objects.get(name="tenant-jobs").share == "fifo"
    _change_limit(admin_client, fair, share="")
    limit = Limit.objects.get(name="tenant-jobs")
    assert (limit.share, limit.share_override) == ("fair", "")
    events = AuditEvent.objects.filter(action="share").order_by("id")
    assert list(events.values_list("actor", "new_value")) == [("user:root", "fifo"), ("user:root", "fair (declared)")]


def test_a_bad_share_is_refused_and_changes_nothing(fair, admin_client) -> None:
    response = _change_limit(admin_client, fair, share="lottery")
    assert response.status_code == 200
    assert "lottery" in response.content.decode()
    assert Limit.objects.get(name="tenant-jobs").share_override == ""
    assert not AuditEvent.objects.filter(action="share").exists()


def test_a_keys_weight_and_min_are_set_through_the_services(fair, admin_client) -> None:
    row = LimitKey.objects.get(key="acme")
    page = admin_client.get(f"/admin/limits/limitkey/{row.id}/change/").content.decode()
    assert 'name="weight" value="1"' in page and 'name="min" value="0"' in page
    assert _change_key(admin_client, row, weight="5", min="2").status_code == 302
    row.refresh_from_db()
    assert (row.weight, row.minimum) == (5, 2)
    assert set(AuditEvent.objects.values_list("action", "key", "actor").filter(action__in=["weight", "min"])) == {
        ("weight", "acme", "user:root"),
        ("min", "acme", "user:root"),
    }
    _change_key(admin_client, row)  # empty: weight 1, min 0
    row.refresh_from_db()
    assert (row.weight, row.minimum) == (1, 0)
    listing = admin_client.get("/admin/limits/limitkey/").content.decode()
    assert "field-weight" in listing and "field-minimum" in listing


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"weight": "0"}, "Weight must be a whole number from 1 to 100, not 0."),
        ({"weight": "many"}, "Weight must be a whole number from 1 to 100"),
        ({"min": "5"}, "Min must be a whole number from 0 to capacity (4), not 5."),
    ],
)
def test_a_bad_weight_or_min_is_refused_by_its_field(fair, admin_client, data, message) -> None:
    row = LimitKey.objects.get(key="acme")
    response = _change_key(admin_client, row, **data)
    assert response.status_code == 200
    assert message in response.content.decode().replace("&#x27;", "'")
    row.refresh_from_db()
    assert (row.weight, row.minimum) == (1, 0)
    assert not AuditEvent.objects.filter(action__in=["weight", "min"]).exists()
