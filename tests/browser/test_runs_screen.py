"""The Runs screen in a real browser, at 1280 px and at phone width (390 px): an operator lists
and filters runs, starts one with bad JSON (the message shows by the field, nothing is created)
then good JSON (it appears in the list without a page load), and cancels it. At 390 px each run
is a card: its status and its Cancel button are on screen, and nothing scrolls sideways."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from playwright.sync_api import Page, expect

from limits import services
from stackbone.models import Run
from tests.browser.conftest import SCREENSHOTS
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-password"


@pytest.fixture
def operator(transactional_db) -> User:
    user = User.objects.create_user("ada", password=PASSWORD)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="studio", codename="change_run"))
    return user


@pytest.fixture
def some_runs(transactional_db, no_worker) -> dict[str, Run]:
    """voice-calls (capacity 1): `holder` holds it, `waiter` waits for it; `done` finished. No
    worker runs: a run started here stays pending until cancelled."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    now = timezone.now() - dt.timedelta(seconds=10)
    runs = {}
    for name, workflow, status in (
        ("done", "export_report", "completed"),
        ("holder", "place_call", "running"),
        ("waiter", "place_call", "running"),
    ):
        runs[name] = Run.objects.create(
            id=f"run_{name}_0123456789abcdef0123", workflow=workflow, status=status, created_at=now, updated_at=now
        )
        now += dt.timedelta(seconds=1)
    services.acquire("voice-calls", run_id=runs["holder"].id, label="call-1")
    services.acquire("voice-calls", run_id=runs["waiter"].id, label="call-2", timeout="1h")
    return runs


def sign_in(page: Page, base: str) -> list[str]:
    """Sign in on the way to the Runs screen; returns the console's messages about the
    Content-Security-Policy (there must be none), as they come."""
    refused: list[str] = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    page.goto(base + "/studio/runs/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(base + "/studio/runs/")
    return refused


def row_of(page: Page, run_id: str):
    return page.locator(f"#run-{run_id}")


def no_sideways_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"


def on_screen(page: Page, locator) -> None:
    box = locator.bounding_box()
    assert box is not None
    width = page.evaluate("document.documentElement.clientWidth")
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)


def start_then_cancel(page: Page, name: str) -> None:
    """Start a run with bad JSON, then good JSON; cancel the new run from the list."""
    page.evaluate("window.__noReload = true")
    page.get_by_text("Start a run").click()  # folded until used
    page.locator("#start-workflow").select_option("place_call")
    # The selected workflow's docstring is its hint (studio.js shows it on change).
    expect(page.locator('#start-workflow-hints [data-workflow="place_call"]')).to_be_visible()
    expect(page.locator('#start-workflow-hints [data-workflow="place_call"]')).to_contain_text('"call_id"')
    expect(page.locator('#start-workflow-hints [data-workflow="export_report"]')).to_be_hidden()
    page.locator("#start-input").fill('{"call_id": "c-9",}')
    page.get_by_role("button", name="Start run").click()
    error = page.locator("#start-input-error")
    expect(error).to_contain_text("input is not valid JSON")
    expect(page.locator("#start-input")).to_have_attribute("aria-invalid", "true")
    assert Run.objects.filter(workflow="place_call").count() == 2  # nothing created
    page.screenshot(
        path=str(SCREENSHOTS / f"runs-start-refused-{name}.png"), full_page=True, caret="initial"
    )  # "hide" injects a style the CSP refuses

    page.locator("#start-input").fill('{"call_id": "c-9"}')
    page.get_by_role("button", name="Start run").click()
    expect(page.locator("#flash")).to_contain_text("Started run_")
    expect(page.locator("#start-input-error")).to_have_count(0)
    expect(page.locator("#start-workflow")).to_have_value("place_call")  # kept for the next run
    started = Run.objects.get(input={"call_id": "c-9"})
    row = row_of(page, started.id)
    expect(row).to_be_visible()  # the list refreshed itself (runs-changed)
    expect(row.locator(".badge")).to_have_text("pending")
    on_screen(page, row.locator(".badge"))
    cancel = row.get_by_role("button", name="Cancel")
    on_screen(page, cancel)
    no_sideways_scroll(page)
    page.screenshot(
        path=str(SCREENSHOTS / f"runs-{name}.png"), full_page=True, caret="initial"
    )  # "hide" injects a style the CSP refuses

    page.once("dialog", lambda dialog: dialog.accept())
    cancel.click()
    expect(row.locator(".badge")).to_have_text("cancelled")
    expect(row.get_by_role("button", name="Cancel")).to_have_count(0)
    expect(page.locator("#flash")).to_contain_text(f"Cancelled {started.id}.")
    assert Run.objects.get(id=started.id).status == "cancelled"
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"


def test_an_operator_lists_filters_starts_and_cancels_at_1280(live_server, page: Page, operator, some_runs) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    refused = sign_in(page, live_server.url)

    ids = [some_runs[name].id for name in ("waiter", "holder", "done")]
    expect(page.locator("tr.run-row")).to_have_count(3)
    assert page.locator("tr.run-row").evaluate_all("rows => rows.map(r => r.id.slice(4))") == ids
    expect(row_of(page, ids[0])).to_contain_text("waits · voice-calls")
    expect(row_of(page, ids[1])).to_contain_text("busy · voice-calls")
    expect(row_of(page, ids[2]).get_by_role("button", name="Cancel")).to_have_count(0)  # finished

    page.locator("#runs-waiting").select_option("voice-calls")
    expect(page.locator("tr.run-row")).to_have_count(1)
    expect(row_of(page, ids[0])).to_be_visible()
    expect(page).to_have_url(re.compile(r"waiting=voice-calls"))
    page.locator("#runs-waiting").select_option("")
    page.locator("#runs-status").select_option("completed")
    expect(page.locator("tr.run-row")).to_have_count(1)
    expect(row_of(page, ids[2])).to_be_visible()
    page.locator("#runs-status").select_option("")
    page.locator("#runs-search").fill("call-1")
    expect(page.locator("tr.run-row")).to_have_count(1)
    expect(row_of(page, ids[1])).to_be_visible()
    # A search is not polled (a label search scans the queues): no request for 4 s, two polls' time.
    expect(page.locator("#runs-table")).not_to_have_attribute("hx-trigger", re.compile("every"))
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if "/studio/runs/" in request.url else None)
    page.wait_for_timeout(4000)
    assert polls == []
    page.locator("#runs-search").fill("")
    expect(page.locator("tr.run-row")).to_have_count(3)
    expect(page.locator("#runs-table")).to_have_attribute("hx-trigger", re.compile("every 3s"))

    start_then_cancel(page, "1280")
    assert refused == []


def test_at_390_px_each_run_is_a_card_with_its_status_and_cancel_on_screen(
    live_server, page: Page, operator, some_runs
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    refused = sign_in(page, live_server.url)

    for run in some_runs.values():
        row = row_of(page, run.id)
        expect(row).to_be_visible()
        on_screen(page, row.locator(".status-cell .badge"))
        on_screen(page, row.locator(".run-id"))
    on_screen(page, row_of(page, some_runs["waiter"].id).get_by_role("button", name="Cancel"))
    no_sideways_scroll(page)
    page.screenshot(
        path=str(SCREENSHOTS / "runs-390-list.png"), full_page=True, caret="initial"
    )  # "hide" injects a style the CSP refuses

    start_then_cancel(page, "390")
    assert refused == []
