"""Issue 16 in a real Chromium: the limit page's wait times and backlog chart render at 1280 px
and on a 390 px phone without the page scrolling sideways (the SVG scales to its box), and the
fragment loads into the page through htmx under the site's CSP."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from limits import insights
from limits.models import WAIT_BUCKETS_S, LimitKeySpan, LimitMinute
from limits.services import acquire
from tests.browser.conftest import SCREENSHOTS, signed_in
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/studio/limits/partner-api/"


@pytest.fixture
def history(transactional_db) -> None:
    """partner-api (capacity 8 then 10, 3 per key) with 24 h of minutes: a wave that fills it and
    queues runs, a capacity raise 3 h ago, waits of 5 s to 2 min; three keys in use, two with
    grants in the last 16 h (one with a long name)."""
    limit = declare(partner_api={"capacity": 10, "max_hold": "10m", "per_key": 3})["partner-api"]
    keys = ["acme", "globex", "tenant-" + "x" * 80]
    for i in range(7):
        acquire("partner-api", run_id=f"run-{i}", key=keys[i % 3])
    now = insights.floor_minute(timezone.now())
    span = insights.floor_span(timezone.now())
    LimitKeySpan.objects.bulk_create(
        [
            LimitKeySpan(
                limit=limit,
                key=key,
                span=span - timedelta(minutes=10 * i),
                grants=4,
                queue_grants=2,
                wait_le_0=2,
                wait_le_15=1,
                wait_le_120=1,
            )
            for i in range(100)
            for key in keys[:2]
        ]
    )
    rows = []
    for i in range(24 * 60, 0, -1):
        wave = math.sin(i / 180) * 0.5 + 0.5
        capacity = 8 if i > 180 else 10
        demand = wave * 14 + (i % 7) / 3
        busy = min(int(demand), capacity - 1)
        reserved = 1 if demand > capacity - 1 else 0
        waiting = max(int(demand * 2.4) - capacity * 2, 0)
        buckets = {f"wait_le_{bound}": 0 for bound in WAIT_BUCKETS_S}
        buckets["wait_le_0"] = 3
        buckets["wait_le_5"] = 2 if waiting else 0
        buckets["wait_le_30"] = 1 if waiting > 3 else 0
        buckets["wait_le_120"] = 1 if waiting > 8 else 0
        rows.append(
            LimitMinute(
                limit=limit,
                minute=now - timedelta(minutes=i),
                busy=busy,
                reserved=reserved,
                waiting=waiting,
                capacity=capacity,
                grants=sum(buckets.values()),
                queue_grants=sum(buckets.values()) - 3,
                **buckets,
            )
        )
    LimitMinute.objects.bulk_create(rows)


@pytest.fixture
def desktop(browser, live_server) -> Iterator[Page]:
    context, page = signed_in(browser, live_server, 1280, 900)
    yield page
    context.close()


@pytest.fixture
def phone(browser, live_server) -> Iterator[Page]:
    context, page = signed_in(browser, live_server, 390, 844, device_scale_factor=2, is_mobile=True, has_touch=True)
    yield page
    context.close()


def _width(page: Page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def _check(page: Page, live_server, width: int) -> None:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(live_server.url + URL)
    section = page.locator("#insights section.insights")
    expect(section).to_be_visible()
    expect(section.locator(".wait-card").first).to_contain_text("p95")
    expect(section.locator(".wait-card").first.locator("[data-p50]")).not_to_have_text("—")
    charts = section.locator("figure.chart")
    expect(charts).to_have_count(2)
    for i in range(2):
        box = charts.nth(i).locator("svg.chart-svg").first.bounding_box()
        assert box is not None and box["width"] > 250 and box["height"] > 80
        assert box["x"] >= 0 and box["x"] + box["width"] <= width
        path = charts.nth(i).locator("path.area.busy")
        assert path.get_attribute("d")
    expect(section.locator(".key-waits-table tbody tr")).to_have_count(3)
    expect(section.locator('.key-waits-table tr[data-key="acme"]')).to_contain_text("≤ 2 min")
    assert _width(page) <= width
    assert not [e for e in errors if "Content Security Policy" in e or "Refused" in e]


def test_the_chart_renders_at_1280px(history, desktop: Page, live_server) -> None:
    _check(desktop, live_server, 1280)
    SCREENSHOTS.mkdir(exist_ok=True)
    desktop.locator("#insights").screenshot(path=str(SCREENSHOTS / "insights-1280.png"))


def test_the_chart_renders_at_390px_without_scrolling_sideways(history, phone: Page, live_server) -> None:
    _check(phone, live_server, 390)
    SCREENSHOTS.mkdir(exist_ok=True)
    phone.locator("#insights").screenshot(path=str(SCREENSHOTS / "insights-390.png"))
