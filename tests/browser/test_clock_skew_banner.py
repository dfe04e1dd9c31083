"""The clock-skew banner (limits/templates/studio/base.html, stackbone.plumbing.clock.skew_banner) in a real
Chromium: a host whose clock is off by more than 2 s is named at the top of every Studio page.
At 1280 px and on a 390 px phone, with a host name as long as a host name gets (a 200-character
FQDN of 63-character labels), the banner is visible, legible (white on red, a readable size) and
whole: the name wraps inside it, nothing is cut off, and the page never scrolls sideways."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.utils import timezone

from stackbone.plumbing.clock import BANNER_CACHE_KEY
from stackbone.plumbing.models import ClockSkew
from tests.browser.conftest import signed_in

pytestmark = pytest.mark.django_db(transaction=True)

# A fully qualified host name of 200 characters: three labels of the longest length (63) and a short one.
HOST = ".".join(["worker-" + "a" * 56, "b" * 63, "c" * 63, "internal"])[:200]
SIZES = {"desktop": (1280, 900), "phone": (390, 844)}


@pytest.fixture
def skewed_host(transactional_db) -> None:
    """A worker on HOST measured 601.5 s ahead of the database a moment ago; the banner's cached
    answer (tests/conftest.py: no_skew_banner_read) is dropped so pages read it."""
    ClockSkew.objects.create(host=HOST, role="worker", skew_seconds=601.5, measured_at=timezone.now())
    cache.delete(BANNER_CACHE_KEY)


def _relative_luminance(rgb: str) -> float:
    channels = [int(part) / 255 for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(foreground: str, background: str) -> float:
    light, dark = sorted((_relative_luminance(foreground), _relative_luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("path", ["/studio/limits/", "/studio/runs/"])
def test_the_banner_names_a_long_host_legibly_without_widening_the_page(
    skewed_host, browser, live_server, size: str, path: str
) -> None:
    width, height = SIZES[size]
    context, page = signed_in(browser, live_server, width, height)
    try:
        page.goto(live_server.url + path)
        banner = page.locator(".banner.clock-skew")
        assert banner.count() == 1
        assert banner.is_visible()
        text = banner.inner_text()
        assert text.startswith(f"The clock of {HOST} (worker) is 601.5 s ahead of the database's.")
        assert "fix the host's clock (NTP)" in text

        box = banner.bounding_box()
        assert box is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, box
        assert box["y"] < height / 2, box  # near the top, in the first screen
        measures = banner.evaluate(
            """element => {
                const style = getComputedStyle(element);
                return {
                    scroll: element.scrollWidth, client: element.clientWidth,
                    font: parseFloat(style.fontSize), color: style.color, background: style.backgroundColor,
                    overflow: style.overflowX,
                };
            }"""
        )
        assert measures["scroll"] <= measures["client"], measures  # nothing of it cut off or hidden
        assert measures["font"] >= 13, measures
        assert _contrast(measures["color"], measures["background"]) >= 4.5, measures
        page_width = page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
        assert page_width <= width, (page_width, width)
    finally:
        context.close()


def test_without_a_skewed_host_there_is_no_banner(browser, live_server, transactional_db) -> None:
    ClockSkew.objects.create(host=HOST, role="worker", skew_seconds=0.4, measured_at=timezone.now())
    cache.delete(BANNER_CACHE_KEY)
    context, page = signed_in(browser, live_server, 390, 844)
    try:
        page.goto(live_server.url + "/studio/limits/")
        assert page.locator(".banner.clock-skew").count() == 0
    finally:
        context.close()
