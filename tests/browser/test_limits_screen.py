"""SPEC 6: an operator signs in and does everything on the Limits screen by clicking, in a real
browser. Every change shows without a page load (the window keeps a marker set at the start)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from playwright.sync_api import Page, expect

from limits import services
from limits.models import AuditEvent, Limit, Slot
from stackbone.models import Run, Step
from tests.browser.conftest import SCREENSHOTS
from tests.factories import declare, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-password"


@pytest.fixture
def operator(transactional_db) -> User:
    user = User.objects.create_user("ada", password=PASSWORD)
    user.user_permissions.add(Permission.objects.get(codename="operate_limit"))
    return user


@pytest.fixture
def busy_limits(transactional_db) -> None:
    """voice-calls (capacity 2): run-0 and run-1 busy, run-2..run-4 waiting; partner-api half used."""
    declare(
        voice_calls={"capacity": 2, "max_hold": "45m"},
        partner_api={"capacity": 5, "max_hold": "10m"},
        report_exports={"capacity": 2, "max_hold": "30m"},
    )
    now = timezone.now()
    for i in range(5):
        run = Run.objects.create(
            id=f"run-{i}", workflow="place_call", input={"call": i}, status="running", created_at=now, updated_at=now
        )
        services.acquire("voice-calls", run_id=run.id, label=f"call-{i}")
        if i >= 2:
            Step.objects.create(
                run=run, seq=1, name="Esperando hueco · voice-calls", kind="hook", status="waiting", started_at=now
            )
    for i in range(3):
        services.acquire("partner-api", run_id=f"sync-{i}", label=f"order-{1000 + i}")
    services.set_max_hold("partner-api", "20m", actor="user:ada")


def sign_in(page: Page, base: str, next_path: str = "/studio/limits/") -> None:
    page.goto(base + next_path)
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "login.png"))
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(base + next_path)


def mark_window(page: Page) -> None:
    page.evaluate("window.__noReload = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"


def test_an_operator_releases_edits_and_resets_by_clicking(
    live_server, page: Page, screenshot, operator, busy_limits
) -> None:
    base = live_server.url
    sign_in(page, base)

    # The list: every limit with its figures.
    row = page.locator("#limit-voice-calls")
    expect(row).to_contain_text("2 / 2")
    expect(page.locator("#limit-partner-api")).to_contain_text("override · declared 10m")
    screenshot("limits-list")

    # A limit with busy slots and a queue.
    row.get_by_role("link", name="voice-calls").click()
    expect(page).to_have_url(base + "/studio/limits/voice-calls/")
    expect(page.locator("#slots tbody tr")).to_have_count(2)
    expect(page.locator("#queue tbody tr")).to_have_count(3)
    expect(page.locator("#queue tbody tr").first).to_contain_text("run-2")
    screenshot("limit-page")
    mark_window(page)

    # Release run-0's slot, confirming the dialog: run-2 (head of the queue) becomes reserved.
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#slots tbody tr", has_text="run-0").get_by_role("button", name="Release").click()
    expect(page.locator("#flash")).to_contain_text("Released slot_")
    reserved = page.locator("#slots tbody tr", has_text="run-2")
    expect(reserved.locator(".badge.reserved")).to_be_visible()
    expect(page.locator("#slots tbody tr", has_text="run-0")).to_have_count(0)
    expect(page.locator("#queue tbody tr")).to_have_count(2)
    expect(page.locator("#figure-reserved")).to_have_text("1")
    expect(page.locator("#figure-waiting")).to_have_text("2")
    assert_not_reloaded(page)
    assert holders("voice-calls") == [("run-1", "busy"), ("run-2", "reserved")]
    screenshot("limit-page-after-release")

    # A bad capacity: the error shows next to the field and nothing changes.
    capacity = page.locator("#id_capacity")
    capacity.fill("0")
    page.locator("#edit-panel form", has=capacity).get_by_role("button", name="Save").click()
    expect(page.locator("#edit-panel .errorlist")).to_contain_text(
        "Capacity must be a whole number from 1 to 100000, not 0"
    )
    expect(page.locator("#id_capacity")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#figure-capacity")).to_have_text("2")
    screenshot("limit-page-bad-capacity")

    # A good one: capacity 4 grants the two waiting runs at once, and the figures follow.
    page.locator("#id_capacity").fill("4")
    page.locator("#edit-panel form", has=page.locator("#id_capacity")).get_by_role("button", name="Save").click()
    expect(page.locator("#edit-panel .notice")).to_contain_text("Capacity is now 4 (declared 2).")
    expect(page.locator("#figure-capacity")).to_have_text("4")
    expect(page.locator("#figure-waiting")).to_have_text("0")
    expect(page.locator("#slots .badge.reserved")).to_have_count(3)
    expect(page.locator("#activity li").first).to_contain_text("ada changed capacity from 2 to 4")
    assert queue("voice-calls") == []
    screenshot("limit-page-capacity-raised")

    # Reset to the declared value.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Reset to declared (2)").click()
    expect(page.locator("#edit-panel .notice")).to_contain_text("Capacity reset to the declared 2.")
    expect(page.locator("#figure-capacity")).to_have_text("2")
    expect(page.get_by_role("button", name="Reset to declared (2)")).to_be_disabled()
    assert_not_reloaded(page)

    # The run page shows the hook step of a run that waits.
    page.goto(base + "/studio/runs/run-2/")
    expect(page.locator("#run-status")).to_have_text("running")
    expect(page.locator(".step-name")).to_contain_text("Esperando hueco · voice-calls")
    screenshot("run-page")


def test_the_list_and_the_limit_page_refresh_in_place(live_server, page: Page, operator, busy_limits) -> None:
    sign_in(page, live_server.url)
    mark_window(page)
    expect(page.locator("#limit-report-exports")).to_contain_text("0 / 2")
    services.acquire("report-exports", run_id="export-1")
    expect(page.locator("#limit-report-exports")).to_contain_text("1 / 2", timeout=8_000)
    assert_not_reloaded(page)

    page.goto(live_server.url + "/studio/limits/partner-api/")
    mark_window(page)
    expect(page.locator("#slots tbody tr")).to_have_count(3)
    services.acquire("partner-api", run_id="sync-9", label="order-9")
    expect(page.locator("#slots tbody tr")).to_have_count(4, timeout=8_000)
    expect(page.locator("#figure-busy")).to_have_text("4")
    assert_not_reloaded(page)


def test_typing_in_the_search_box_filters_the_list_in_place(live_server, page: Page, operator, busy_limits) -> None:
    every = Limit.objects.count()  # the three declared, and the shipped workflows' own bounds
    sign_in(page, live_server.url)
    mark_window(page)
    expect(page.locator("#limits-table tbody tr")).to_have_count(every)
    page.get_by_label("Find a limit").fill("part")
    expect(page.locator("#limits-table tbody tr")).to_have_count(1)
    expect(page.locator("#limit-partner-api")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/studio/limits/\?q=part"))
    services.acquire("partner-api", run_id="sync-8")  # the poll keeps the filter
    expect(page.locator("#limit-partner-api")).to_contain_text("4 / 5", timeout=8_000)
    expect(page.locator("#limits-table tbody tr")).to_have_count(1)
    page.get_by_label("Find a limit").fill("")
    expect(page.locator("#limits-table tbody tr")).to_have_count(every)
    assert_not_reloaded(page)


def test_the_limit_page_reads_well_on_a_phone(live_server, browser, operator, busy_limits) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    phone = context.new_page()
    try:
        sign_in(phone, live_server.url, "/studio/limits/voice-calls/")
        expect(phone.locator("#figure-waiting")).to_have_text("3")
        SCREENSHOTS.mkdir(exist_ok=True)
        phone.screenshot(path=str(SCREENSHOTS / "limit-page-phone.png"), full_page=True)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page scrolls sideways ({width}px)"
    finally:
        context.close()


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_an_operator_pauses_and_resumes_by_clicking(live_server, browser, operator, busy_limits, width, height) -> None:
    """SPEC 5.6: Pause (confirmed) stops grants and the page says so without a reload: a badge, a
    note, a queue header that no longer promises the head the next free slot; the button stays
    on screen at 1280 px and on a phone. Resume grants the freed slot at once."""
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=width < 600)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        sign_in(page, live_server.url, "/studio/limits/voice-calls/")
        mark_window(page)
        pause = page.locator("#pause-button")
        pause.scroll_into_view_if_needed()
        box = pause.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box
        page.once("dialog", lambda dialog: dialog.accept())
        pause.click()
        expect(page.locator("#edit-panel .notice")).to_contain_text("Paused: voice-calls grants nothing")
        expect(page.locator("#paused-badge")).to_be_visible()
        expect(page.locator("#paused-note")).to_contain_text("no slot is granted")
        expect(page.locator("#queue-note")).to_contain_text("Paused: nobody gets a slot")
        expect(page.locator("#resume-button")).to_be_visible()
        assert Limit.objects.get(name="voice-calls").paused
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(SCREENSHOTS / f"limit-paused-{width}.png"), full_page=True)

        assert services.acquire("voice-calls", run_id="run-x").state == "waiting"  # paused: a new acquisition waits
        services.release(Slot.objects.get(run_id="run-0", state="busy").id, actor="user:ada")
        expect(page.locator("#figure-free")).to_have_text("1")  # freed, and nobody got it
        expect(page.locator("#figure-waiting")).to_have_text("4")

        page.locator("#resume-button").click()
        expect(page.locator("#edit-panel .notice")).to_contain_text("Resumed: voice-calls grants again")
        expect(page.locator("#paused-badge")).to_have_count(0)
        expect(page.locator("#figure-waiting")).to_have_text("3")
        expect(page.locator("#slots tbody tr", has_text="run-2").locator(".badge.reserved")).to_be_visible()
        expect(page.locator("#pause-button")).to_be_visible()
        assert_not_reloaded(page)
        assert list(
            AuditEvent.objects.filter(action__in=["pause", "resume"]).order_by("id").values_list("action", "actor")
        ) == [("pause", "user:ada"), ("resume", "user:ada")]
    finally:
        context.close()


def test_a_viewer_sees_the_limit_but_no_buttons(live_server, page: Page, busy_limits) -> None:
    User.objects.create_user("ada", password=PASSWORD)
    sign_in(page, live_server.url, "/studio/limits/voice-calls/")
    expect(page.locator("#slots tbody tr")).to_have_count(2)
    expect(page.get_by_role("button", name="Release")).to_have_count(0)
    expect(page.locator("#edit-panel")).to_contain_text("You can watch this limit")
