"""SPEC 9.5 in a real Chromium: the Keys panel of a limit, readable at 1280 px and on a 390 px
phone (the page never scrolls sideways), its filter, and a key's own pool set from its row while
the region keeps refreshing every 3 seconds (a refresh never wipes what the operator is typing,
nor the message next to a refused value)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from limits import services
from limits.models import LimitKey
from tests.browser.conftest import SCREENSHOTS, signed_in
from tests.factories import declare, holders

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/studio/limits/partner-api/"


@pytest.fixture
def keyed(transactional_db) -> None:
    """partner-api, capacity 12, 2 per key: acme full with one more waiting, a tenant with a long
    key, globex, and runs without a key; voice-calls beside it for a group."""
    declare(
        partner_api={"capacity": 12, "max_hold": "10m", "per_key": 2},
        voice_calls={"capacity": 5, "max_hold": "45m"},
    )
    long_key = "tenant-" + "x" * 100
    for run_id, key in [
        ("acme-1", "acme"),
        ("acme-2", "acme"),
        ("long-1", long_key),
        ("globex-1", "globex"),
        ("plain-1", None),
        ("acme-3", "acme"),
    ]:
        services.acquire("partner-api", run_id=run_id, key=key, label=f"order {run_id}")
    services.acquire_group(["partner-api", "voice-calls"], run_id="both-1", key="globex", label="call + sync")


@pytest.fixture
def desktop(browser, live_server) -> Iterator[Page]:
    context, page = signed_in(browser, live_server, 1280, 900, "operate_limit")
    yield page
    context.close()


def _width(page: Page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def test_the_keys_panel_at_1280px_filters_and_sets_a_key_pool_in_place(keyed, desktop: Page, live_server) -> None:
    page = desktop
    page.goto(live_server.url + URL)
    rows = page.locator("#keys tbody tr")
    expect(rows).to_have_count(4)  # (no key), acme, globex, the long key
    expect(rows.nth(0)).to_contain_text("(no key)")
    expect(rows.nth(1)).to_contain_text("acme")
    expect(rows.nth(1)).to_contain_text("2 / 2")
    expect(page.locator("#slots tbody tr", has_text="both-1")).to_contain_text("with voice-calls")
    expect(page.locator("#queue tbody tr", has_text="acme-3")).to_contain_text("acme")
    assert _width(page) <= 1280
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "limit-keys.png"), full_page=True)
    page.evaluate("window.__noReload = true")

    # The filter narrows the table as you type, and the address keeps it.
    page.get_by_label("Find a key").fill("glo")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("globex")
    expect(page).to_have_url(re.compile(r"key_filter=glo"))
    page.get_by_label("Find a key").fill("")
    expect(rows).to_have_count(4)

    # What is typed in a pool field survives the 3-second refresh.
    acme = page.locator("#keys tbody tr", has_text="acme")
    field = acme.get_by_label("Pool size of key acme")
    field.fill("0")
    page.wait_for_timeout(3_500)
    expect(acme.get_by_label("Pool size of key acme")).to_have_value("0")

    # A refused value: the message next to the field stays through refreshes; nothing changed.
    acme.get_by_role("button", name="Set").click()
    expect(acme.locator(".errorlist")).to_contain_text("Pool size must be at least 1, not 0")
    expect(acme.get_by_label("Pool size of key acme")).to_have_attribute("aria-invalid", "true")
    page.wait_for_timeout(3_500)
    expect(acme.locator(".errorlist")).to_contain_text("Pool size must be at least 1, not 0")
    assert LimitKey.objects.get(key="acme").pool_override is None

    # A good one: acme's waiting run is granted at once and the row follows.
    acme.get_by_label("Pool size of key acme").fill("3")
    acme.get_by_role("button", name="Set").click()
    expect(page.locator("#flash")).to_contain_text("The pool of key “acme” is now 3.")
    expect(acme).to_contain_text("3 / 3")
    expect(acme.locator(".badge.override")).to_contain_text("own pool")
    expect(page.locator("#slots tbody tr", has_text="acme-3").locator(".badge.reserved")).to_be_visible()
    assert ("acme-3", "reserved") in holders("partner-api")

    # The refresh goes on afterwards.
    services.acquire("partner-api", run_id="globex-2", key="globex")
    expect(page.locator("#keys tbody tr", has_text="globex")).to_contain_text("2 / 2", timeout=8_000)

    # Reset, confirming the dialog.
    page.once("dialog", lambda dialog: dialog.accept())
    acme.get_by_role("button", name="Reset").click()
    expect(page.locator("#flash")).to_contain_text("back to the pool size per key (2)")
    expect(acme.locator(".badge.override")).to_have_count(0)
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"


def test_the_keys_panel_reads_well_on_a_390px_phone(keyed, browser, live_server) -> None:
    context, phone = signed_in(browser, live_server, 390, 844, "operate_limit", device_scale_factor=2, is_mobile=True)
    try:
        phone.goto(live_server.url + URL)
        keys = phone.locator("#keys")
        expect(keys.locator("tbody tr")).to_have_count(4)
        keys.scroll_into_view_if_needed()
        SCREENSHOTS.mkdir(exist_ok=True)
        phone.screenshot(path=str(SCREENSHOTS / "limit-keys-phone.png"), full_page=True)
        assert _width(phone) <= 390, f"the page scrolls sideways ({_width(phone)}px)"
        # The panel fits the screen; a wide table scrolls inside its own frame, and each row's key
        # and figures are in view without scrolling it.
        box = keys.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
        for name in ["(no key)", "acme", "globex"]:
            for cell in keys.locator("tbody tr", has_text=name).locator("td").all()[:2]:  # in use / pool, waiting
                cell_box = cell.bounding_box()
                assert cell_box is not None and cell_box["x"] + cell_box["width"] <= 390, name
        expect(keys.get_by_label("Find a key")).to_be_visible()
        filter_box = keys.get_by_label("Find a key").bounding_box()
        assert filter_box is not None and filter_box["x"] + filter_box["width"] <= 390
    finally:
        context.close()
