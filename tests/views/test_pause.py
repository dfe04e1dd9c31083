"""SPEC 5.6 and 6 in Studio: an operator pauses and resumes a limit from its page (a small POST,
the edit panel as an htmx partial, like the other edits), audited as the signed-in user; the
list row and the limit page say "paused", and the queue's header no longer promises the head
the next free slot. A viewer gets no button and a 403; nothing changes."""

from __future__ import annotations

import pytest
from django.test import Client

from limits import services
from limits.models import AuditEvent, Limit, Slot
from tests.factories import assert_counters_match_rows, holders, queue

pytestmark = pytest.mark.django_db

PAGE = "/studio/limits/voice-calls/"
HEAD_GETS_NEXT = "The head gets the next free slot"


def _pauses() -> list[tuple[str, str, str, str]]:
    rows = AuditEvent.objects.filter(action__in=["pause", "resume"]).order_by("id")
    return list(rows.values_list("action", "actor", "old_value", "new_value"))


def test_an_operator_pauses_from_the_limit_page_and_the_page_says_paused(busy_limit, operator_client, htmx) -> None:
    page = operator_client.get(PAGE).content.decode()
    assert 'id="pause-button"' in page and f'hx-post="{PAGE}pause/"' in page
    assert HEAD_GETS_NEXT in page and 'id="paused-badge"' not in page

    response = operator_client.post(f"{PAGE}pause/", headers=htmx)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="edit-panel"')
    assert "Paused: voice-calls grants nothing until resumed." in body
    assert 'id="resume-button"' in body and 'id="pause-button"' not in body
    assert "limit-changed" in response["HX-Trigger"]  # the live region refreshes itself
    assert Limit.objects.get(name="voice-calls").paused
    assert _pauses() == [("pause", "user:ada", "running", "paused")]

    live = operator_client.get(PAGE, headers=htmx).content.decode()
    assert 'id="paused-badge"' in live and 'id="paused-note"' in live
    assert HEAD_GETS_NEXT not in live
    assert "Paused: nobody gets a slot until the limit is resumed" in live
    assert "paused the limit" in live  # the activity feed
    row = operator_client.get("/studio/limits/").content.decode().split('id="limit-voice-calls"')[1].split("</tr>")[0]
    assert '<span class="badge paused"' in row


def test_a_release_while_paused_grants_nothing_and_resume_grants_at_once(busy_limit, operator_client, htmx) -> None:
    operator_client.post(f"{PAGE}pause/", headers=htmx)
    oldest = Slot.objects.filter(limit=busy_limit, state="busy").order_by("granted_at").first()
    services.release(oldest.id)  # run-0's
    assert queue("voice-calls") == ["run-2", "run-3", "run-4"]
    response = operator_client.post(f"{PAGE}resume/", headers=htmx)
    assert response.status_code == 200
    assert "Resumed: voice-calls grants again" in response.content.decode()
    assert 'id="pause-button"' in response.content.decode()
    assert holders("voice-calls") == [("run-1", "busy"), ("run-2", "reserved")]
    assert _pauses()[-1] == ("resume", "user:ada", "paused", "running")
    live = operator_client.get(PAGE, headers=htmx).content.decode()
    assert 'id="paused-badge"' not in live and HEAD_GETS_NEXT in live
    assert_counters_match_rows("voice-calls")


def test_a_second_pause_says_it_was_already_paused_and_records_nothing(busy_limit, operator_client, htmx) -> None:
    operator_client.post(f"{PAGE}pause/", headers=htmx)
    again = operator_client.post(f"{PAGE}pause/", headers=htmx).content.decode()
    assert "voice-calls was already paused: nothing changed." in again
    running = operator_client.post(f"{PAGE}resume/", headers=htmx)
    assert running.status_code == 200
    assert "voice-calls was already running" not in running.content.decode()
    assert "voice-calls was already running: nothing changed." in (
        operator_client.post(f"{PAGE}resume/", headers=htmx).content.decode()
    )
    assert [row[0] for row in _pauses()] == ["pause", "resume"]


def test_without_htmx_a_pause_redirects_back_with_a_message(busy_limit, operator_client) -> None:
    response = operator_client.post(f"{PAGE}pause/", {"slots": "1", "queue": "1"}, follow=True)
    assert response.redirect_chain == [(f"{PAGE}?slots=1&queue=1", 302)]
    assert "Paused: voice-calls grants nothing until resumed." in response.content.decode()
    assert Limit.objects.get(name="voice-calls").paused


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_viewer_sees_no_button_and_is_refused_and_nothing_changes(busy_limit, viewer_client, htmx, verb) -> None:
    if verb == "resume":
        services.pause_limit("voice-calls", actor="user:ada")
    before = (Limit.objects.get(name="voice-calls").paused_at, _pauses())
    page = viewer_client.get(PAGE).content.decode()
    assert 'id="pause-button"' not in page and 'id="resume-button"' not in page
    assert ("paused" in page) == (verb == "resume")  # the facts say so
    response = viewer_client.post(f"{PAGE}{verb}/", headers=htmx)
    assert response.status_code == 403
    assert "limits.operate_limit" in response.content.decode()
    assert (Limit.objects.get(name="voice-calls").paused_at, _pauses()) == before


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_an_unknown_limit_is_a_404_and_a_get_a_405(busy_limit, operator_client, htmx, verb) -> None:
    assert operator_client.post(f"/studio/limits/nope/{verb}/", headers=htmx).status_code == 404
    assert operator_client.get(f"{PAGE}{verb}/").status_code == 405
    assert _pauses() == []


def test_a_pause_without_the_csrf_token_is_refused(busy_limit, operator) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(f"{PAGE}pause/").status_code == 403
    assert not Limit.objects.get(name="voice-calls").paused
