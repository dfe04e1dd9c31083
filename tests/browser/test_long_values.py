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
from stackbone.models import Run, Step
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


def test_the_release_button_stays_in_view_at_1280_px_with_long_labels_keys_and_run_ids(
    transactional_db, signed_in, live_server
) -> None:
    """Issue 30: at 1280 px, long labels pushed the Release button out of the slots table (cut off,
    or behind a horizontal scroll). Every row's button lies inside the window, inside its row and
    inside the visible part of the table."""
    from limits.models import RUN_ID_MAX_LENGTH

    declare(voice_calls={"capacity": 3, "max_hold": "45m", "per_key": 3})
    label, key = "L" * LABEL_MAX_LENGTH, "k" * 128
    for n in range(3):
        run_id = f"run_{n}" + "r" * (RUN_ID_MAX_LENGTH - 5)
        services.acquire("voice-calls", run_id=run_id, label=label, key=key)
    signed_in.goto(f"{live_server.url}/studio/limits/voice-calls/")
    buttons = signed_in.locator("#slots button", has_text="Release")
    assert buttons.count() == 3
    boxes = signed_in.evaluate(
        """() => [...document.querySelectorAll('#slots tbody tr')].map(row => {
            const button = row.querySelector('button');
            const wrap = row.closest('.table-wrap');
            const box = r => { const b = r.getBoundingClientRect(); return [b.left, b.right]; };
            return {button: box(button), row: box(row), wrap: box(wrap), scrolls: wrap.scrollWidth > wrap.clientWidth};
        })"""
    )
    for found in boxes:
        (left, right), (row_left, row_right), (wrap_left, wrap_right) = found["button"], found["row"], found["wrap"]
        assert 0 <= left < right <= WIDTH, found
        assert row_left <= left and right <= row_right, found
        assert wrap_left <= left and right <= wrap_right, found
        assert not found["scrolls"], found  # nothing of the table hides behind a horizontal scroll
    assert _width(signed_in) <= WIDTH
