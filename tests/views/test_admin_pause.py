"""SPEC 5.6 in the admin: the Limits changelist's actions "Pause selected limits" and "Resume
selected limits", for users with limits.operate_limit, through the services (audited as the admin
user; a limit already in that state is left alone, unrecorded); the list shows "paused" and
filters by it. Staff without the permission get no action, and nothing changes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from limits import services
from limits.models import AuditEvent, Limit
from tests.factories import declare, holders, queue
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/limits/limit/"


@pytest.fixture
def two_limits(busy_limit) -> list[Limit]:
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, partner_api={"capacity": 5, "max_hold": "10m"})
    return list(Limit.objects.filter(name__in=["partner-api", "voice-calls"]).order_by("name"))


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


def _act(client: Client, action: str, limits: list[Limit]) -> str:
    data = {"action": action, "_selected_action": [str(limit.pk) for limit in limits]}
    response = client.post(CHANGELIST, data, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def _pauses() -> list[tuple[str, str, str]]:
    rows = AuditEvent.objects.filter(action__in=["pause", "resume"]).order_by("id")
    return list(rows.values_list("action", "limit__name", "actor"))


def test_the_pause_action_pauses_each_selected_limit_audited_as_the_admin_user(two_limits, admin_client) -> None:
    page = admin_client.get(CHANGELIST).content.decode()
    assert "Pause selected limits" in page and "Resume selected limits" in page
    said = _act(admin_client, "pause_selected", two_limits)
    assert "Paused 2 limit(s): partner-api, voice-calls." in said
    paused = Limit.objects.filter(paused_at__isnull=False).values_list("name", flat=True)
    assert set(paused) == {"voice-calls", "partner-api"}
    assert _pauses() == [("pause", "partner-api", "user:root"), ("pause", "voice-calls", "user:root")]
    assert services.acquire("partner-api", run_id="new").state == "waiting"  # paused: grants nothing


def test_the_list_shows_paused_and_filters_by_it(two_limits, admin_client) -> None:
    services.pause_limit("voice-calls", actor="user:root")
    page = admin_client.get(CHANGELIST).content.decode()
    row = page.split(">voice-calls<")[1].split("</tr>")[0]
    assert "paused" in row
    assert "paused" not in page.split(">partner-api<")[1].split("</tr>")[0]
    only_paused = admin_client.get(CHANGELIST, {"paused": "yes"}).content.decode()
    assert ">voice-calls<" in only_paused and ">partner-api<" not in only_paused
    running = admin_client.get(CHANGELIST, {"paused": "no"}).content.decode()
    assert ">voice-calls<" not in running and ">partner-api<" in running


def test_the_resume_action_grants_at_once_and_leaves_running_limits_alone(two_limits, admin_client) -> None:
    services.pause_limit("voice-calls", actor="user:root")
    services.release(services.acquire("partner-api", run_id="x").slot_id)
    services.set_capacity("voice-calls", 3, actor="user:root")  # paused: run-2 still waits
    assert queue("voice-calls") == ["run-2", "run-3", "run-4"]
    said = _act(admin_client, "resume_selected", two_limits)
    assert "Resumed 1 limit(s): voice-calls." in said
    assert "1 limit(s) were already running: nothing changed for them." in said
    assert holders("voice-calls")[-1] == ("run-2", "reserved")
    assert _pauses() == [("pause", "voice-calls", "user:root"), ("resume", "voice-calls", "user:root")]
    again = _act(admin_client, "pause_selected", two_limits[1:])  # voice-calls only
    assert "Paused 1 limit(s): voice-calls." in again
    assert "already paused" in _act(admin_client, "pause_selected", two_limits[1:])
    assert [row[0] for row in _pauses()] == ["pause", "resume", "pause"]


def test_staff_without_the_operate_permission_get_no_action_and_change_nothing(two_limits) -> None:
    client = Client()
    client.force_login(make_user("eve", "limits.view_limit", staff=True))
    page = client.get(CHANGELIST)
    assert page.status_code == 200
    assert "pause_selected" not in page.content.decode()
    response = client.post(
        CHANGELIST, {"action": "pause_selected", "_selected_action": [str(limit.pk) for limit in two_limits]}
    )
    assert response.status_code in (200, 302)
    assert not Limit.objects.filter(paused_at__isnull=False).exists()
    assert _pauses() == []


@pytest.mark.parametrize("selected", ["abc", "1.5", "", "\x1b[31m"])
def test_a_selected_row_that_is_no_limit_id_is_a_400_and_changes_nothing(two_limits, admin_client, selected) -> None:
    """Issue 45: a non-integer `_selected_action` (a hand-made POST) answered 500 from the query;
    it is a 400 naming the value, as Studio's forms answer bad input, for both actions."""
    for action in ("pause_selected", "resume_selected"):
        data = {"action": action, "_selected_action": [str(two_limits[0].pk), selected]}
        response = admin_client.post(CHANGELIST, data)
        assert response.status_code == 400, response.content[:300]
        assert response["Content-Type"].startswith("text/plain")
        assert "is not the id of a limit: nothing done" in response.content.decode()
        assert "\x1b" not in response.content.decode()
    assert not Limit.objects.filter(paused_at__isnull=False).exists()
    assert _pauses() == []
