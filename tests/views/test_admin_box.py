"""SPEC 12.5 in the Django admin: the box's row shows its base and burst, and its change form
overrides or resets them through services.set_box (audited as the admin user; raising starts
waiting runs), as the admin does capacity. A bad value is refused next to its field and nothing
changes; a user without limits.operate_limit cannot change it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from limits import services
from limits.config import define_workspace
from limits.models import AuditEvent, Limit
from studio.workflows import start_run, step, workflow
from tests.factories import holders, queue
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/limits/limit/"


@step
def work(label: str) -> str:
    return label


@workflow(name="admin_box_one")
def one(input: dict) -> str:
    return work(input["label"])


@pytest.fixture
def box(no_worker) -> Limit:
    """Base 1, burst 1 (ceiling 1): one run executes, a second waits for the box."""
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 1, "burst": 1.0}))
    start_run(one, {"label": "a"})
    start_run(one, {"label": "b"})
    return Limit.objects.get(name="box")


@pytest.fixture
def admin_client(transactional_db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


def change_url(limit: Limit) -> str:
    return f"{CHANGELIST}{limit.pk}/change/"


def values() -> tuple[int | None, float | None, int, int | None, float | None]:
    box = Limit.objects.get(name="box")
    return box.per_key, box.burst, box.capacity, box.per_key_override, box.burst_override


def test_the_box_row_shows_base_and_burst(box, admin_client) -> None:
    page = admin_client.get(CHANGELIST).content.decode()
    row = page.split(f'href="{change_url(box)}"')[1].split("</tr>")[0]
    assert "base 1 per workflow" in row
    assert "the box&#x27;s run concurrency: base 1, burst 1" in row


def test_the_change_form_sets_base_and_burst_through_the_service_audited(box, admin_client) -> None:
    form = admin_client.get(change_url(box)).content.decode()
    assert 'name="base"' in form and 'name="burst"' in form
    assert 'name="capacity"' not in form and 'name="max_hold"' not in form and 'name="per_key"' not in form
    response = admin_client.post(change_url(box), {"base": "2", "burst": ""})
    assert response.status_code == 302
    assert values() == (2, 1.0, 2, 2, None)  # burst left empty: the declared one
    assert queue("box") == [] and [state for _, state in holders("box")] == ["busy", "reserved"]
    events = AuditEvent.objects.filter(action="box").values_list("actor", "new_value")
    assert list(events) == [("user:root", "base 2, burst 1, ceiling 2")]
    admin_client.post(change_url(box), {"base": "", "burst": ""})  # both reset
    assert values() == (1, 1.0, 1, None, None)
    assert AuditEvent.objects.filter(action="box").count() == 2


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"base": "0", "burst": ""}, "base", "Base must be a whole number from 1 to 100000, not 0."),
        ({"base": "", "burst": "10.5"}, "burst", "Burst must be from 1.0 to 10.0, not 10.5."),
        ({"base": "", "burst": "quick"}, "burst", "Burst must be from 1.0 to 10.0, not &#x27;quick&#x27;."),
        ({"base": "90000", "burst": "2"}, "base", "Base x burst must be at most 100000, not 180000."),
    ],
)
def test_a_bad_value_is_refused_next_to_its_field_and_nothing_changes(box, admin_client, data, field, message) -> None:
    response = admin_client.post(change_url(box), data)
    assert response.status_code == 200
    page = response.content.decode()
    assert message in page.split(f'name="{field}"')[0].rsplit("field-" + field, 1)[1]
    assert values() == (1, 1.0, 1, None, None)
    assert not AuditEvent.objects.filter(action="box").exists()


def test_staff_without_the_permission_cannot_change_the_box(box) -> None:
    client = Client()
    client.force_login(make_user("eve", staff=True))
    client.post(change_url(box), {"base": "5", "burst": ""})
    assert values() == (1, 1.0, 1, None, None)
