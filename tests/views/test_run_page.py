"""A run's page: status, input/output, steps in order (SPEC 3.2's wait is visible), cancel."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from django.utils.html import escape

from limits import services
from stackbone.models import Run, Step
from stackbone.plumbing.access import NEEDS_CANCEL_RUN
from tests.factories import holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting_run(busy_limit) -> Run:
    """A running run whose body took one step, then queued on voice-calls (3rd in line)."""
    now = timezone.now()
    run = Run.objects.create(
        workflow="place_call",
        input={"to": "+34 600 000 000"},
        status=Run.Status.RUNNING,
        suspended=True,
        waiting_for="slot:voice-calls",
        created_at=now,
        started_at=now,
        updated_at=now,
    )
    Step.objects.create(
        run=run, seq=2, name="Esperando hueco · voice-calls", kind="hook", status="waiting", started_at=now
    )
    Step.objects.create(
        run=run, seq=1, name="lookup_number", status="completed", result={"ok": True}, started_at=now, finished_at=now
    )
    services.acquire("voice-calls", run_id=run.id, label="order-77")
    return run


def test_the_run_page_shows_status_input_and_steps_in_order(waiting_run, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{waiting_run.id}/").content.decode()
    assert "place_call" in page and 'id="run-status">running<' in page
    assert escape('"to": "+34 600 000 000"') in page
    names = re.findall(r'<span class="step-name">(.*?)</span>', page, re.S)
    assert names[0] == "lookup_number"
    assert names[1] == 'Esperando hueco · <a href="/studio/limits/voice-calls/">voice-calls</a>'
    assert "<strong>4th of 4</strong> in the queue" in page and "order-77" in page


def test_a_running_run_polls_and_offers_cancel(waiting_run, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{waiting_run.id}/").content.decode()
    assert f'hx-get="/studio/runs/{waiting_run.id}/"' in page
    assert f'hx-post="/studio/runs/{waiting_run.id}/cancel/"' in page and "hx-confirm=" in page


def test_a_finished_run_neither_polls_nor_offers_cancel(db, operator_client) -> None:
    now = timezone.now()
    run = Run.objects.create(
        workflow="report", status="completed", output={"rows": 3}, created_at=now, finished_at=now, updated_at=now
    )
    page = operator_client.get(f"/studio/runs/{run.id}/").content.decode()
    assert "hx-trigger" not in re.search(r'<div id="run-live"[^>]*>', page, re.S)[0]
    assert "Cancel run" not in page
    assert escape('"rows": 3') in page


def test_an_htmx_poll_gets_only_the_run(waiting_run, operator_client, htmx) -> None:
    response = operator_client.get(f"/studio/runs/{waiting_run.id}/", headers=htmx)
    assert response.content.decode().lstrip().startswith('<div id="run-live"')
    assert "HX-Request" in response["Vary"]


def test_an_unknown_run_is_a_404(db, operator_client) -> None:
    assert operator_client.get("/studio/runs/run_nope/").status_code == 404


def test_a_run_id_holding_a_nul_is_refused_not_an_error(db, operator_client) -> None:
    assert operator_client.get("/studio/runs/run%00x/").status_code in (400, 404)


def test_cancelling_a_waiting_run_takes_it_out_of_the_queue(waiting_run, operator_client, htmx) -> None:
    response = operator_client.post(f"/studio/runs/{waiting_run.id}/cancel/", headers=htmx)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="run-status">cancelled<' in body and "Cancelled." in body
    waiting_run.refresh_from_db()
    assert waiting_run.status == "cancelled"
    assert waiting_run.id not in queue("voice-calls")
    assert holders("voice-calls") == [("run-0", "busy"), ("run-1", "busy")]


def test_cancelling_a_finished_run_changes_nothing(waiting_run, operator_client, htmx) -> None:
    operator_client.post(f"/studio/runs/{waiting_run.id}/cancel/", headers=htmx)
    response = operator_client.post(f"/studio/runs/{waiting_run.id}/cancel/", headers=htmx)
    assert "already finished: nothing changed" in response.content.decode()


def test_cancelling_needs_the_permission(waiting_run, viewer_client, htmx) -> None:
    page = viewer_client.get(f"/studio/runs/{waiting_run.id}/").content.decode()
    assert "Cancel run" not in page
    response = viewer_client.post(f"/studio/runs/{waiting_run.id}/cancel/", headers=htmx)
    assert response.status_code == 403
    assert escape(NEEDS_CANCEL_RUN) in response.content.decode()
    waiting_run.refresh_from_db()
    assert waiting_run.status == "running" and waiting_run.id in queue("voice-calls")


def test_cancel_rejects_get(waiting_run, operator_client) -> None:
    assert operator_client.get(f"/studio/runs/{waiting_run.id}/cancel/").status_code == 405
