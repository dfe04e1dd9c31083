"""Issue 15, item 4: the Limits screen at 390px (a phone) and at 1280px, in a real Chromium. What a
user came for is on screen without scrolling sideways: on a limit's page each slot's Release
button, State and Expires in, each queued run's Waiting since and Deadline, and a way to the edit
panel from the top; on the list each limit's Reserved, Waiting and Max hold. Measured with the
elements' bounding boxes against the viewport, and the page's scrollWidth."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from limits import services
from tests.browser.conftest import SCREENSHOTS
from tests.browser.test_limits_screen import busy_limits, operator, sign_in  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def phone(browser, live_server, operator, busy_limits) -> Iterator[Page]:  # noqa: F811
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in(page, live_server.url, "/studio/limits/voice-calls/")
    yield page
    context.close()


@pytest.fixture
def desktop(browser, live_server, operator, busy_limits) -> Iterator[Page]:  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in(page, live_server.url, "/studio/limits/voice-calls/")
    yield page
    context.close()


def page_width(page: Page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def assert_in_view_across(element: Locator, width: int, what: str) -> None:
    """Visible, and wholly within the viewport's width: no sideways scroll needed to see it."""
    expect(element).to_be_visible()
    box = element.bounding_box()
    assert box is not None, what
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, f"{what} is off-screen sideways: {box}"


def shown_label(cell: Locator) -> str:
    """The label a card shows above a cell's value (its ::before, from data-label); "" if none."""
    content = str(cell.evaluate("el => getComputedStyle(el, '::before').content"))
    return content.strip('"') if content not in ("none", "normal") else ""


def assert_limit_page_fits(page: Page, width: int) -> None:
    assert page_width(page) <= width, f"the page scrolls sideways ({page_width(page)}px)"
    slots = page.locator("#slots tbody tr")
    expect(slots).to_have_count(2)
    for row in slots.all():
        assert_in_view_across(row.get_by_role("button", name="Release"), width, "Release")
        assert_in_view_across(row.locator(".badge.busy"), width, "State")
        assert_in_view_across(row.locator("td.cell-expires time"), width, "Expires in")
    queued = page.locator("#queue tbody tr")
    expect(queued).to_have_count(3)
    for row in queued.all():
        assert_in_view_across(row.locator("td.cell-since time"), width, "Waiting since")
        assert_in_view_across(row.locator("td.cell-deadline time"), width, "Deadline")


def test_a_limits_page_at_390px_shows_release_state_expiry_and_the_queues_times(phone: Page) -> None:
    expect(phone.locator("#figure-waiting")).to_have_text("3")
    assert_limit_page_fits(phone, 390)
    # Each row is a card: its cells are labelled (the table head is hidden).
    assert shown_label(phone.locator("#queue tbody tr").first.locator("td.cell-deadline")) == "Deadline"
    assert shown_label(phone.locator("#slots tbody tr").first.locator("td.cell-expires")) == "Expires in"
    assert phone.locator("#slots tbody tr").first.evaluate("el => getComputedStyle(el).display") == "flex"
    SCREENSHOTS.mkdir(exist_ok=True)
    phone.screenshot(path=str(SCREENSHOTS / "limit-page-phone.png"), full_page=True)

    # The edit panel comes after the slots, the queue and the activity, and a button at the top
    # leads to it.
    jump = phone.get_by_role("link", name="Edit limit ↓")
    assert_in_view_across(jump, 390, "the link to the edit panel")
    box = jump.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 844, "the link to the edit panel is not at the top"
    jump.click()
    expect(phone.locator("#id_capacity")).to_be_in_viewport()
    assert page_width(phone) <= 390


def test_the_limits_list_at_390px_shows_reserved_waiting_and_max_hold(phone: Page, live_server) -> None:
    phone.goto(live_server.url + "/studio/limits/")
    rows = phone.locator("#limits-table tbody tr")
    expect(phone.locator("#limit-voice-calls")).to_contain_text("2 / 2")
    assert page_width(phone) <= 390, f"the list scrolls sideways ({page_width(phone)}px)"
    for row in rows.all():
        cells = row.locator("td")
        for label in ("Reserved", "Waiting", "Max hold"):
            cell = cells.and_(row.locator(f'td[data-label="{label}"]'))
            assert_in_view_across(cell, 390, label)
            assert shown_label(cell) == label  # labelled, the head being hidden
    SCREENSHOTS.mkdir(exist_ok=True)
    phone.screenshot(path=str(SCREENSHOTS / "limits-list-phone.png"), full_page=True)


def test_at_1280px_the_page_is_still_a_table_with_everything_in_view(desktop: Page) -> None:
    expect(desktop.locator("#figure-waiting")).to_have_text("3")
    assert_limit_page_fits(desktop, 1280)
    assert desktop.locator("#slots tbody tr").first.evaluate("el => getComputedStyle(el).display") == "table-row"
    assert shown_label(desktop.locator("#queue tbody tr").first.locator("td.cell-deadline")) == ""
    expect(desktop.locator(".jump-to-edit")).to_be_hidden()  # the edit panel is beside the slots
    expect(desktop.locator("#edit-panel")).to_be_in_viewport()
    desktop.goto(desktop.url.split("/studio/")[0] + "/studio/limits/")
    expect(desktop.locator("#limits-table thead")).to_be_visible()
    assert page_width(desktop) <= 1280


def test_a_flash_message_is_gone_after_the_next_action_and_over_capacity_is_said(phone: Page) -> None:
    """Issue 15, item 13: the release's message stayed through later unrelated edits."""
    phone.once("dialog", lambda dialog: dialog.accept())
    phone.locator("#slots tbody tr", has_text="run-0").get_by_role("button", name="Release").click()
    expect(phone.locator("#flash")).to_contain_text("Released slot_")
    phone.locator("#id_capacity").fill("1")
    phone.locator("#edit-panel form", has=phone.locator("#id_capacity")).get_by_role("button", name="Save").click()
    expect(phone.locator("#edit-panel .notice")).to_contain_text("Capacity is now 1 (declared 2).")
    expect(phone.locator("#flash")).to_be_empty()
    # run-1 busy and run-2 reserved: 2 held of 1 allowed.
    expect(phone.locator("#over-capacity")).to_have_text("Over capacity: no new grants until below 1.")
    # And an action in the live region clears the edit panel's message.
    services.acquire("partner-api", run_id="noise")  # unrelated
    phone.once("dialog", lambda dialog: dialog.accept())
    phone.locator("#slots tbody tr", has_text="run-1").get_by_role("button", name="Release").click()
    expect(phone.locator("#flash")).to_contain_text("Released slot_")
    expect(phone.locator("#edit-panel .notice")).to_have_count(0)


def test_a_workflow_bounds_page_at_390px_shows_release_and_when_a_queued_run_gives_up(
    browser,
    live_server,
    operator,  # noqa: F811
) -> None:
    """A bound's tables ("grid slots runs", "grid queue runs") are cards too: Release, State and
    Since of each running run, Queued since and Gives up of each queued one."""
    bound = "workflow.place_orders"
    services.sync_workflow_bounds({bound: (2, 1)})
    for run_id, key in (("run_a", "acme"), ("run_b", "globex"), ("run_c", "acme"), ("run_d", "initech")):
        services.acquire_group([bound], run_id=run_id, request=f"{run_id}:start", key=key, label="place_orders")
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    try:
        sign_in(page, live_server.url, f"/studio/limits/{bound}/")
        expect(page.locator("#figure-waiting")).to_have_text("2")
        assert page_width(page) <= 390, f"the page scrolls sideways ({page_width(page)}px)"
        for row in page.locator("#slots tbody tr").all():
            assert_in_view_across(row.get_by_role("button", name="Release"), 390, "Release")
            assert_in_view_across(row.locator("td.cell-state .badge"), 390, "State")
            assert shown_label(row.locator("td.cell-since")) == "Since"
        for row in page.locator("#queue tbody tr").all():
            assert_in_view_across(row.locator("td.cell-since time"), 390, "Queued since")
            assert_in_view_across(row.locator("td.cell-deadline time"), 390, "Gives up")
            assert shown_label(row.locator("td.cell-deadline")) == "Gives up"
        assert_in_view_across(page.get_by_role("link", name="Edit bound ↓"), 390, "the link to the edit panel")
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "bound-page-phone.png"), full_page=True)
    finally:
        context.close()
