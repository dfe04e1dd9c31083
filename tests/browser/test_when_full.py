"""SPEC 14.1, 14.6 in a real Chromium at 1280 px and on a 390 px phone (issue 47): an operator
sets a limit to skip when full and caps its queue from the edit panel, sees the notice and the
runs it then answered, types a bad cap and sees the message by that field with nothing changed,
and goes back to the declared values; every field, its message and the Save button stay inside
the panel, on a limit with a 64-character name. The view tests (tests/views/test_when_full.py)
hold the HTML and the messages; this holds what a user sees and does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from limits import services
from limits.models import AuditEvent, Limit
from tests.browser.conftest import signed_in
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "exports-" + "x" * (64 - len("exports-"))
URL = f"/studio/limits/{NAME}/"

INSIDE = """() => {
    const panel = document.querySelector("#edit-panel").getBoundingClientRect(), out = [];
    for (const e of document.querySelectorAll("#when-full :is(select, input, button, .errorlist, .hint)")) {
        const r = e.getBoundingClientRect();
        if (r.width && (r.left < panel.left - 1 || r.right > panel.right + 1))
            out.push(`${e.outerHTML.slice(0, 80)}: ${r.left}-${r.right} outside ${panel.left}-${panel.right}`);
    }
    return out;
}"""


@pytest.fixture
def exports(transactional_db) -> None:
    declare(**{NAME.replace("-", "_"): {"capacity": 1, "max_hold": "30m", "max_waiting": 20}})
    services.acquire(NAME, run_id="holder")


@pytest.fixture(params=[1280, 390], ids=["1280px", "390px"])
def operator(request, browser, live_server) -> Iterator[tuple[Page, int]]:
    width = request.param
    phone = {"device_scale_factor": 2, "is_mobile": True} if width < 600 else {}
    context, page = signed_in(browser, live_server, width, 900, "operate_limit", **phone)
    page.goto(live_server.url + URL)
    yield page, width
    context.close()


def _fits(page: Page, width: int) -> None:
    assert page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)") <= width
    assert page.evaluate(INSIDE) == []


def test_the_operator_sets_skip_and_the_caps_and_goes_back(exports, operator) -> None:
    page, width = operator
    when_full = page.get_by_label("When full")
    when_full.scroll_into_view_if_needed()
    _fits(page, width)
    when_full.select_option("skip")
    page.get_by_label("Max waiting", exact=True).fill("0")
    page.locator("#when-full").get_by_role("button", name="Save").click()
    expect(page.locator("#when-full .errorlist")).to_contain_text(
        "Max waiting must be a whole number from 1 to 1,000,000, not 0."
    )
    _fits(page, width)
    assert Limit.objects.get(name=NAME).on_full == "wait" and not AuditEvent.objects.exclude(action="sync").exists()

    page.get_by_label("Max waiting", exact=True).fill("5")
    page.get_by_label("Max waiting per key").fill("2")
    page.locator("#when-full").get_by_role("button", name="Save").click()
    expect(page.locator("#edit-notice")).to_contain_text(
        f"When full, {NAME} now skips: an acquisition is answered at once; max waiting 5, per key 2."
    )
    assert services.acquire(NAME, run_id="late").state == "skipped"
    _fits(page, width)

    page.get_by_label("When full").select_option("")
    page.get_by_label("Max waiting", exact=True).fill("")
    page.get_by_label("Max waiting per key").fill("")
    page.locator("#when-full").get_by_role("button", name="Save").click()
    expect(page.locator("#edit-notice")).to_contain_text(f"When full, {NAME} now queues an acquisition")
    expect(page.locator("#when-full .hint")).to_contain_text("So far 1 skipped, 0 refused, 0 replaced.")
    limit = Limit.objects.get(name=NAME)
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key) == ("wait", 20, None)
    _fits(page, width)
