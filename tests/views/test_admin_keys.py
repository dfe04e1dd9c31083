"""The admin for keys (SPEC 9.4): a limit's pool size per key and a key's own pool are edited
through services.set_per_key (audited; a raise grants at once); the keys' counters are read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from limits import services
from limits.models import AuditEvent, Limit, LimitKey
from tests.factories import assert_counters_match_rows, declare, holders, queue
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


@pytest.fixture
def keyed(clock) -> Limit:
    """partner-api, capacity 6, 2 per key: acme holds 2 and a third acme run waits."""
    declare(partner_api={"capacity": 6, "max_hold": "10m", "per_key": 2})
    for run_id, key in [("a-1", "acme"), ("a-2", "acme"), ("g-1", "globex"), ("a-3", "acme")]:
        services.acquire("partner-api", run_id=run_id, key=key)
        clock.advance(seconds=1)
    return Limit.objects.get(name="partner-api")


def _change_limit(client: Client, limit: Limit, **data: str) -> Any:
    return client.post(
        f"/admin/limits/limit/{limit.id}/change/", {"capacity": "", "max_hold": "", "per_key": ""} | data
    )


def _change_key(client: Client, row: LimitKey, pool: str) -> Any:
    return client.post(f"/admin/limits/limitkey/{row.id}/change/", {"pool": pool})


def test_the_limit_list_shows_per_key_and_its_override(keyed, admin_client) -> None:
    services.set_per_key("partner-api", 3, actor="user:root")
    page = admin_client.get("/admin/limits/limit/").content.decode()
    assert "per key (declared 2)" in page
    response = admin_client.get("/admin/limits/limit/?overridden=per_key")
    assert [limit.name for limit in response.context["cl"].result_list] == ["partner-api"]


def test_the_limit_form_shows_the_declared_pool_size_per_key(keyed, admin_client) -> None:
    page = admin_client.get(f"/admin/limits/limit/{keyed.id}/change/").content.decode()
    assert "Declared per key" in page and 'name="per_key"' in page


def test_the_pool_size_per_key_is_set_and_reset_through_the_service(keyed, admin_client) -> None:
    assert _change_limit(admin_client, keyed, per_key="3").status_code == 302
    keyed.refresh_from_db()
    assert keyed.per_key_override == 3
    assert ("a-3", "reserved") in holders("partner-api")  # the raise granted acme's waiting run
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.key, event.old_value, event.new_value) == ("user:root", "", "2", "3")
    assert_counters_match_rows("partner-api")
    _change_limit(admin_client, keyed)
    keyed.refresh_from_db()
    assert keyed.per_key_override is None
    assert AuditEvent.objects.filter(action="per_key").count() == 2


def test_a_lower_capacity_and_a_lower_per_key_are_saved_together(keyed, admin_client) -> None:
    services.set_per_key("partner-api", 5, actor="user:root")
    assert _change_limit(admin_client, keyed, capacity="4", per_key="3").status_code == 302
    keyed.refresh_from_db()
    assert (keyed.capacity_override, keyed.per_key_override) == (4, 3)


def test_a_higher_capacity_and_a_higher_per_key_are_saved_together(keyed, admin_client) -> None:
    assert _change_limit(admin_client, keyed, capacity="10", per_key="8").status_code == 302
    keyed.refresh_from_db()
    assert (keyed.capacity_override, keyed.per_key_override) == (10, 8)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"per_key": "0"}, "must be at least 1, not 0"),
        ({"per_key": "7"}, "must be at most capacity (6)"),
        ({"per_key": "abc"}, "not &#x27;abc&#x27;"),
        ({"per_key": "5", "capacity": "4"}, "must be at most capacity (4)"),
    ],
)
def test_a_bad_pool_size_per_key_in_the_admin_changes_nothing(keyed, admin_client, data, message: str) -> None:
    response = _change_limit(admin_client, keyed, **data)
    assert response.status_code == 200
    assert "per_key" in response.context["adminform"].form.errors
    assert message in response.content.decode()
    keyed.refresh_from_db()
    assert (keyed.capacity_override, keyed.per_key_override) == (None, None)
    assert not AuditEvent.objects.filter(action__in=["per_key", "capacity"]).exists()


def test_the_keys_list_shows_counters_and_pools_and_searches_by_key(keyed, admin_client) -> None:
    services.set_per_key("partner-api", 1, key="globex", actor="user:root")
    response = admin_client.get("/admin/limits/limitkey/")
    assert response.status_code == 200
    rows = {row.key: row for row in response.context["cl"].result_list}
    assert (rows["acme"].busy_count, rows["acme"].waiting_count) == (2, 1)
    page = response.content.decode()
    assert "1 (the key&#x27;s own)" in page and "2 (the limit&#x27;s per key)" in page
    found = admin_client.get("/admin/limits/limitkey/?q=GLOB").context["cl"].result_list
    assert [row.key for row in found] == ["globex"]


def test_the_keys_list_heads_the_pool_size_in_force_and_says_when_there_is_none(clock, admin_client) -> None:
    declare(partner_api={"capacity": 6, "max_hold": "10m"})  # no pool size per key: only the total
    services.acquire("partner-api", run_id="a-1", key="acme")
    page = admin_client.get("/admin/limits/limitkey/").content.decode()
    assert "Pool size in force" in page and "Own pool size" in page
    assert "— (no pool size: only the limit&#x27;s total applies)" in page


def test_a_key_pool_is_set_and_reset_through_the_service(keyed, admin_client) -> None:
    acme = LimitKey.objects.get(limit=keyed, key="acme")
    page = admin_client.get(f"/admin/limits/limitkey/{acme.id}/change/").content.decode()
    assert 'name="pool"' in page and 'name="busy_count"' not in page
    assert _change_key(admin_client, acme, "3").status_code == 302
    acme.refresh_from_db()
    assert acme.pool_override == 3
    assert ("a-3", "reserved") in holders("partner-api") and queue("partner-api") == []
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.key, event.old_value, event.new_value) == ("user:root", "acme", "2", "3")
    _change_key(admin_client, acme, "")
    acme.refresh_from_db()
    assert acme.pool_override is None
    assert_counters_match_rows("partner-api")


@pytest.mark.parametrize(
    ("pool", "message"), [("0", "at least 1, not 0"), ("7", "at most capacity (6)"), ("x", "not &#x27;x&#x27;")]
)
def test_a_bad_key_pool_in_the_admin_changes_nothing(keyed, admin_client, pool: str, message: str) -> None:
    acme = LimitKey.objects.get(limit=keyed, key="acme")
    response = _change_key(admin_client, acme, pool)
    assert response.status_code == 200 and message in response.content.decode()
    acme.refresh_from_db()
    assert acme.pool_override is None and not AuditEvent.objects.filter(action="per_key").exists()


def test_key_counters_cannot_be_edited_added_or_deleted(keyed, admin_client) -> None:
    acme = LimitKey.objects.get(limit=keyed, key="acme")
    admin_client.post(f"/admin/limits/limitkey/{acme.id}/change/", {"pool": "", "busy_count": "0", "key": "x"})
    acme.refresh_from_db()
    assert (acme.key, acme.busy_count) == ("acme", 2)
    assert admin_client.get("/admin/limits/limitkey/add/").status_code == 403
    assert admin_client.post(f"/admin/limits/limitkey/{acme.id}/delete/").status_code == 403


def test_staff_without_the_operate_permission_cannot_change_pools(keyed) -> None:
    client = Client()
    client.force_login(
        make_user("eve", "limits.view_limitkey", "limits.change_limitkey", "limits.change_limit", staff=True)
    )
    acme = LimitKey.objects.get(limit=keyed, key="acme")
    assert client.get("/admin/limits/limitkey/").status_code == 200
    assert _change_key(client, acme, "3").status_code == 403
    assert _change_limit(client, keyed, per_key="3").status_code == 403
    acme.refresh_from_db()
    keyed.refresh_from_db()
    assert (acme.pool_override, keyed.per_key_override) == (None, None)


def test_an_operator_with_staff_status_sees_the_keys(keyed) -> None:
    client = Client()
    client.force_login(make_user("ops", "limits.operate_limit", staff=True))
    assert client.get("/admin/limits/limitkey/").status_code == 200


def test_slots_queue_and_audit_show_the_key(keyed, admin_client) -> None:
    services.set_per_key("partner-api", 1, key="globex", actor="user:root")
    assert "acme" in admin_client.get("/admin/limits/slot/?q=acme").content.decode()
    assert [e.run_id for e in admin_client.get("/admin/limits/queueentry/?q=acme").context["cl"].result_list] == ["a-3"]
    assert "globex" in admin_client.get("/admin/limits/auditevent/?q=globex").content.decode()
