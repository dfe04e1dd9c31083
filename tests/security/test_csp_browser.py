"""In a real Chromium, under the Content-Security-Policy: every Studio page and the admin load,
poll, release, edit and reset, and the browser reports no violation (console or
securitypolicyviolation event)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from limits import services
from stackbone.models import Run
from tests.factories import declare

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Page, expect  # noqa: E402

from tests.browser import conftest as browser_conftest  # noqa: E402 (skips the module without Chromium)

browser = browser_conftest.browser  # the one Chromium fixture, shared with tests/browser

# one_database: Chromium under the policy; tests/security/test_csp.py proves the headers on both databases.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]

PASSWORD = "a-long-password"
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI + " " + (e.sample || ""));
});
"""


@pytest.fixture
def watched(browser) -> Iterator[tuple[Page, list[str]]]:
    """A page, and every console message and page error that mentions the policy."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"console: {msg.text}") if _about_the_policy(msg.text) else None)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: dialog.accept())
    yield page, problems
    context.close()


@pytest.fixture
def setup(transactional_db) -> None:
    user = User.objects.create_user("ada", password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["operate_limit", "view_limit", "view_slot"]))
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    now = timezone.now()
    for i in range(4):
        Run.objects.create(id=f"run-{i}", workflow="place_call", status="running", created_at=now, updated_at=now)
        services.acquire("voice-calls", run_id=f"run-{i}", label=f"<b>call-{i}</b>")


def _about_the_policy(text: str) -> bool:
    lowered = text.lower()
    return "content security policy" in lowered or "content-security-policy" in lowered or "eval" in lowered


def violations(page: Page, problems: list[str]) -> list[str]:
    return [*page.evaluate("window.__cspViolations"), *problems]


def test_studio_and_the_admin_work_under_the_policy_with_no_violation(live_server, watched, setup) -> None:
    page, problems = watched
    base = live_server.url
    page.goto(base + "/studio/limits/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#limit-voice-calls")).to_contain_text("2 / 2")
    assert page.locator("#limit-voice-calls .bar rect").get_attribute("width") == "100"
    assert violations(page, problems) == []

    # The list polls (no eval'd trigger filter any more) and refreshes in place.
    services.set_capacity("voice-calls", 3, actor="test")
    expect(page.locator("#limit-voice-calls")).to_contain_text("3 / 3", timeout=8_000)  # run-2 got a slot
    services.set_capacity("voice-calls", None, actor="test")

    page.goto(base + "/studio/limits/voice-calls/")
    page.evaluate("window.__noReload = true")
    row = page.locator("#slots tbody tr").first
    expect(row.locator(".label-cell")).to_have_text("<b>call-0</b>")  # escaped, shown as text
    row.get_by_role("button", name="Release").click()
    expect(page.locator("#flash")).to_contain_text("Released")
    page.get_by_label("Capacity").fill("3")
    page.locator("#edit-panel form", has=page.get_by_label("Capacity")).get_by_role("button", name="Save").click()
    expect(page.locator("#edit-panel")).to_contain_text("Capacity is now 3")
    page.get_by_label("Capacity").fill("zero")
    page.locator("#edit-panel form", has=page.get_by_label("Capacity")).get_by_role("button", name="Save").click()
    expect(page.locator("#edit-panel")).to_contain_text("Capacity must be a whole number from 1 to 100000, not 'zero'")
    page.get_by_role("button", name="Reset to declared (2)").click()
    expect(page.locator("#edit-panel")).to_contain_text("Capacity reset to the declared 2")
    assert page.evaluate("window.__noReload === true")
    assert violations(page, problems) == []

    page.goto(base + "/studio/runs/run-3/")
    expect(page.locator("#run-live")).to_be_visible()
    page.goto(base + "/admin/")
    expect(page.locator("#content")).to_be_visible()
    page.goto(base + "/admin/limits/limit/")
    page.get_by_role("link", name="voice-calls").click()
    page.locator("#id_capacity").fill("4")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#result_list")).to_contain_text("4")
    page.goto(base + "/admin/limits/slot/")
    expect(page.locator("#result_list")).to_be_visible()
    assert violations(page, problems) == []
