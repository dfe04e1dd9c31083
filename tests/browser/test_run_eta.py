"""Issues 16 and 30 in a real Chromium: a waiting run's page shows why it waits, its place in each
queue, its key's place and its expected wait, readable at 1280 px and on a 390 px phone without scrolling
sideways, and the place follows the queue through the page's live refresh."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import Page, expect

from limits import services
from stackbone.models import Run, Step
from tests.browser.conftest import SCREENSHOTS, signed_in
from tests.conftest import Clock
from tests.factories import declare, rolled_up_grants

pytestmark = pytest.mark.django_db(transaction=True)

ON_THE_MINUTE = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def waiting_run(transactional_db) -> Iterator[Run]:
    """partner-api (capacity 3, 1 per key) granted 3 slots in the last 10 rolled-up minutes (one
    every 200 s, through the sweep's rollup), then 2 runs queued; this run waits 3rd, 2nd of
    acme's, for partner-api together with voice-calls (1st there, 1 grant in 10 minutes). The
    clock ticks on."""
    with time_machine.travel(ON_THE_MINUTE, tick=True) as traveller:
        declare(
            partner_api={"capacity": 3, "max_hold": "1h", "per_key": 1},
            voice_calls={"capacity": 1, "max_hold": "1h"},
        )

        def grants() -> None:
            for key in ("acme", "globex", "initech"):
                services.acquire("partner-api", run_id=f"holder-{key}", key=key)
            services.acquire("voice-calls", run_id="caller")
            services.acquire("partner-api", run_id="acme-1", key="acme", timeout="1h")
            services.acquire("partner-api", run_id="globex-1", key="globex", timeout="1h")

        rolled_up_grants(Clock(traveller), grants)
        now = timezone.now()
        run = Run.objects.create(
            workflow="place_call",
            status=Run.Status.RUNNING,
            suspended=True,
            created_at=now,
            started_at=now,
            updated_at=now,
        )
        Step.objects.create(
            run=run,
            seq=1,
            name="Esperando hueco · partner-api + voice-calls",
            kind="hook",
            status="waiting",
            started_at=now,
        )
        services.acquire_group(["partner-api", "voice-calls"], run_id=run.id, key="acme", timeout="1h")
        yield run


def _width(page: Page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def _check_the_figures(page: Page) -> None:
    partner = page.locator('.wait[data-limit="partner-api"]')
    expect(partner.locator(".place")).to_have_text("3rd of 3 in the queue")
    expect(partner.locator(".key-place")).to_have_text("2nd of 2 for key acme")
    expect(partner.locator(".eta")).to_have_text("about 10 min")  # 3rd x 200 s
    calls = page.locator('.wait[data-limit="voice-calls"]')
    expect(calls.locator(".place")).to_have_text("1st of 1 in the queue")
    expect(calls.locator(".eta")).to_have_text("about 10 min")  # 1st x 600 s
    expect(calls.locator(".key-place")).to_have_count(0)  # voice-calls has no pool per key
    expect(partner.locator(".reason")).to_have_text("The limit is full")  # why it waits (SPEC 6.5)
    expect(calls.locator(".reason")).to_have_text("The limit is full")
    expect(page.locator("#run-eta")).to_contain_text("expected wait about 10 min")
    expect(page.locator(".step-meaning")).to_have_text("waiting for a slot")
    for figure in (
        partner.locator(".reason"),
        partner.locator(".place"),
        partner.locator(".key-place"),
        partner.locator(".eta"),
    ):
        expect(figure).to_be_in_viewport()


@pytest.mark.parametrize(("width", "height", "name"), [(1280, 900, "run-eta"), (390, 844, "run-eta-phone")])
def test_a_waiting_runs_place_and_eta_fit_the_screen(
    waiting_run, browser, live_server, width: int, height: int, name: str
) -> None:
    mobile = {"device_scale_factor": 2, "is_mobile": True} if width < 500 else {}
    context, page = signed_in(browser, live_server, width, height, **mobile)
    try:
        page.goto(f"{live_server.url}/studio/runs/{waiting_run.id}/")
        _check_the_figures(page)
        assert _width(page) <= width, f"the page scrolls sideways ({_width(page)}px at {width}px)"
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    finally:
        context.close()


def test_the_place_follows_the_queue_live(waiting_run, browser, live_server) -> None:
    context, page = signed_in(browser, live_server, 1280, 900)
    try:
        page.goto(f"{live_server.url}/studio/runs/{waiting_run.id}/")
        partner = page.locator('.wait[data-limit="partner-api"]')
        expect(partner.locator(".place")).to_have_text("3rd of 3 in the queue")
        services.end_run("globex-1")  # a run ahead leaves the queue
        expect(partner.locator(".place")).to_have_text("2nd of 2 in the queue", timeout=8_000)
        expect(partner.locator(".eta")).to_have_text("about 7 min")  # 2nd x 200 s
    finally:
        context.close()
