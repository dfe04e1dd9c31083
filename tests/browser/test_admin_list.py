"""Issue 15, item 10: the admin's Limits list at 1280px shows every column beside the filter, none
clipped (its results box does not scroll sideways), with an override, an undeclared limit and a
workflow's bound in the list."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from limits import services
from tests.browser.conftest import SCREENSHOTS
from tests.browser.test_limits_screen import busy_limits  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_admins_limit_list_fits_beside_the_filter_at_1280px(browser, live_server, busy_limits) -> None:  # noqa: F811
    User.objects.create_superuser("root", password="a-long-password")
    services.set_capacity("voice-calls", 1, actor="user:root")
    services.set_per_key("report-exports", 1, actor="user:root")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(live_server.url + "/admin/login/?next=/admin/limits/limit/")
        page.fill("#id_username", "root")
        page.fill("#id_password", "a-long-password")
        page.click("input[type=submit]")
        expect(page.locator("#result_list")).to_be_visible()
        expect(page.locator("#result_list")).to_contain_text("overridden: max hold (declared 10m)")
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "admin-limits-1280.png"), full_page=True)
        scroll, client = page.evaluate(
            "() => { const r = document.querySelector('.results'); return [r.scrollWidth, r.clientWidth] }"
        )
        assert scroll <= client, f"the list is clipped: {scroll}px in a {client}px box"
        last = page.locator("#result_list thead th").last.bounding_box()
        side = page.locator("#changelist-filter").bounding_box()
        assert last is not None and side is not None
        assert last["x"] + last["width"] <= side["x"], (last, side)
        assert int(page.evaluate("document.documentElement.scrollWidth")) <= 1280
    finally:
        context.close()
