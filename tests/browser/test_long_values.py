"""Issue 11: a 10,000-character input made the run page 76,000 px wide. In a real Chromium at
1280 px, no page of a run or a limit is wider than the window, whatever its values hold: long
inputs, outputs and errors wrap, long labels are cut with an ellipsis (whole in their title), and
a right-to-left override is shown as `\\u202e` instead of reversing the text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from limits import services
from limits.models import LABEL_MAX_LENGTH
from studio.models import Run, Step
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH = 1280
LONG = "x" * 10_000


@pytest.fixture
def long_run(transactional_db) -> Run:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    now = timezone.now()
    run = Run.objects.create(
        workflow="place_call",
        input={"call": LONG, "to": "\u202e000 000 006 43+"},
        output={"echo": LONG},
        status=Run.Status.FAILED,
        error="boom: " + LONG,
        created_at=now,
        started_at=now,
        finished_at=now,
        updated_at=now,
    )
    Step.objects.create(run=run, seq=1, name="dial", status="failed", error=LONG, started_at=now, finished_at=now)
    Step.objects.create(
        run=run, seq=2, name="lookup", status="completed", result={"v": LONG}, started_at=now, finished_at=now
    )
    label = "L" * LABEL_MAX_LENGTH
    services.acquire("voice-calls", run_id=run.id, label=label)  # busy
    services.acquire("voice-calls", run_id="run-waiting-" + "w" * 40, label=label, timeout="1h")  # queued
    return run


@pytest.fixture
def signed_in(browser, live_server) -> Iterator[object]:
    """A page 1280 px wide, signed in as an operator (the session cookie of a forced login)."""
    user = User.objects.create_user("ada", password="a-long-password")
    user.user_permissions.add(Permission.objects.get(codename="operate_limit"))
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def _width(page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def test_the_run_page_of_a_10000_character_input_fits_the_window(long_run, signed_in, live_server) -> None:
    signed_in.goto(f"{live_server.url}/studio/runs/{long_run.id}/")
    assert signed_in.locator("#run-status").inner_text() == "failed"
    assert _width(signed_in) <= WIDTH
    # The whole value is on the page (wrapped), not cut off.
    assert LONG in signed_in.locator("section.io pre").first.inner_text().replace("\n", "")
    assert "\\u202e000 000 006 43+" in signed_in.locator("section.io pre").first.inner_text()
    label = signed_in.locator(".long-value").first
    assert label.get_attribute("title") == "L" * LABEL_MAX_LENGTH
    assert label.evaluate("element => element.scrollWidth > element.clientWidth")  # cut, with its ellipsis


def test_the_limit_page_with_long_labels_fits_the_window(long_run, signed_in, live_server) -> None:
    signed_in.goto(f"{live_server.url}/studio/limits/voice-calls/")
    assert signed_in.locator("#slots .long-value").count() == 1
    assert _width(signed_in) <= WIDTH
