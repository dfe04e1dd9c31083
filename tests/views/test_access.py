"""SPEC 6.4: only signed-in users see Studio; only operators release or edit; every change is a
POST that carries the CSRF token."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client, RequestFactory
from django.utils.html import escape

from limits.models import AuditEvent, Limit, Slot
from stackbone.plumbing.access import NEEDS_OPERATE_LIMIT, OPERATE_LIMIT, holds_permission
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db

PAGES = ["/studio/limits/", "/studio/limits/voice-calls/", "/studio/runs/run-0/"]
ACTIONS = [
    ("/studio/limits/voice-calls/release/", {"slot": "placeholder"}),
    ("/studio/limits/voice-calls/capacity/", {"capacity": "7"}),
    ("/studio/limits/voice-calls/max-hold/", {"max_hold": "10m"}),
    ("/studio/limits/voice-calls/reset/", {"field": "capacity"}),
    ("/studio/limits/voice-calls/per-key/", {"per_key": "1"}),
    ("/studio/limits/voice-calls/reset/", {"field": "per_key"}),
    ("/studio/limits/voice-calls/key-pool/", {"key": "acme", "pool": "1"}),
    ("/studio/limits/voice-calls/key-pool/reset/", {"key": "acme"}),
]


def _with_slot(data: dict[str, str], limit: Limit) -> dict[str, str]:
    if "slot" in data:
        return {"slot": Slot.objects.filter(limit=limit, state="busy").order_by("granted_at").first().id}
    return data


def _state(limit: Limit) -> tuple[object, ...]:
    limit.refresh_from_db()
    return (
        limit.capacity_override,
        limit.max_hold_override_ms,
        limit.per_key_override,
        list(limit.keys.values_list("key", "pool_override")),
        limit.busy_count,
        limit.reserved_count,
        limit.waiting_count,
        AuditEvent.objects.count(),
    )


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_users_are_sent_to_sign_in(busy_limit, url: str) -> None:
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


def test_an_htmx_poll_after_the_session_ended_redirects_the_whole_page(busy_limit, htmx) -> None:
    response = Client().get(
        "/studio/limits/", headers=htmx | {"HX-Current-URL": "http://testserver/studio/limits/?x=1"}
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/studio/limits/%3Fx%3D1"


@pytest.mark.parametrize(("url", "data"), ACTIONS)
def test_anonymous_posts_change_nothing(busy_limit, url: str, data: dict[str, str]) -> None:
    before = _state(busy_limit)
    response = Client().post(url, _with_slot(data, busy_limit))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert _state(busy_limit) == before


@pytest.mark.parametrize(("url", "data"), ACTIONS)
def test_users_without_the_permission_get_a_403_that_says_why(
    busy_limit, viewer_client, htmx, url: str, data: dict[str, str]
) -> None:
    before = _state(busy_limit)
    response = viewer_client.post(url, _with_slot(data, busy_limit), headers=htmx)
    assert response.status_code == 403
    assert escape(NEEDS_OPERATE_LIMIT) in response.content.decode()
    assert 'id="reason"' in response.content.decode()
    assert _state(busy_limit) == before


def test_a_user_without_the_permission_sees_no_release_button_or_edit_form(busy_limit, viewer_client) -> None:
    page = viewer_client.get("/studio/limits/voice-calls/").content.decode()
    assert "run-0" in page
    assert ">Release</button>" not in page
    assert 'name="capacity"' not in page
    assert "You can watch this limit" in page


@pytest.mark.parametrize(("url", "data"), ACTIONS)
def test_it_rejects_get_on_actions(busy_limit, operator_client, url: str, data: dict[str, str]) -> None:
    assert operator_client.get(url).status_code == 405


@pytest.mark.parametrize("url", PAGES[:2])
def test_it_rejects_post_on_pages(busy_limit, operator_client, url: str) -> None:
    assert operator_client.post(url).status_code == 405


def test_a_post_without_the_csrf_header_is_refused(busy_limit, operator) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    client.get("/studio/limits/voice-calls/")
    before = _state(busy_limit)
    response = client.post("/studio/limits/voice-calls/capacity/", {"capacity": "7"}, headers={"HX-Request": "true"})
    assert response.status_code == 403
    assert _state(busy_limit) == before


def test_the_csrf_header_htmx_sends_from_body_is_accepted(busy_limit, operator) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    page = client.get("/studio/limits/voice-calls/").content.decode()
    token = client.cookies["csrftoken"].value
    assert page.count("x-csrftoken") == 1
    assert '<body hx-headers=\'{"x-csrftoken": "' in page
    response = client.post(
        "/studio/limits/voice-calls/capacity/",
        {"capacity": "7"},
        headers={"HX-Request": "true", "X-CSRFToken": token},
    )
    assert response.status_code == 200
    busy_limit.refresh_from_db()
    assert busy_limit.capacity == 7


def test_sign_in_leads_to_the_limits_screen(busy_limit, operator) -> None:
    client = Client()
    page = client.get("/accounts/login/?next=/studio/limits/")
    assert page.status_code == 200
    assert "Sign in to Studio" in page.content.decode()
    response = client.post(
        "/accounts/login/", {"username": "ada", "password": "a-long-password", "next": "/studio/limits/"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/studio/limits/"
    assert client.get("/studio/limits/").status_code == 200


def test_a_wrong_password_says_so(busy_limit, operator) -> None:
    response = Client().post("/accounts/login/", {"username": "ada", "password": "nope"})
    assert response.status_code == 200
    assert "enter a correct username and password" in response.content.decode()


def test_the_front_door_leads_to_limits(db) -> None:
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/studio/limits/"


def test_the_one_query_permission_check_answers_as_django_does() -> None:
    """holds_permission (the limit page's query budget) must give has_perm's answer for every kind
    of holder: direct, through a group, a superuser, an inactive user, nobody."""
    operate = Permission.objects.get(content_type__app_label="limits", codename="operate_limit")
    group = Group.objects.create(name="ops")
    group.permissions.add(operate)
    direct = make_user("direct", OPERATE_LIMIT)
    grouped = make_user("grouped")
    grouped.groups.add(group)
    inactive = make_user("inactive", OPERATE_LIMIT)
    inactive.is_active = False
    inactive.save()
    root = User.objects.create_superuser("root", password="a-long-password")
    nobody = make_user("nobody", "limits.view_slot")
    answers = {}
    for user in [direct, grouped, inactive, root, nobody]:
        user = User.objects.get(pk=user.pk)  # no permission cache
        request = RequestFactory().get("/")
        request.user = user
        answers[user.username] = holds_permission(request, OPERATE_LIMIT)
        assert answers[user.username] == User.objects.get(pk=user.pk).has_perm(OPERATE_LIMIT), user.username
    assert answers == {"direct": True, "grouped": True, "inactive": False, "root": True, "nobody": False}
