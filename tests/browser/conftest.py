"""A real headless Chromium (Debian's package) driven by Playwright, against pytest-django's
live_server. Browsers cannot be downloaded here, so Playwright launches /usr/bin/chromium."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "screenshots"

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; .ci/run does it)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One Chromium per test module. Playwright's sync API keeps an event loop running in this
    thread while it is open, and the tests' own ORM calls are still synchronous, so Django is told
    they are safe, for this module only: the variable must not reach other tests (or `check
    --deploy` subprocesses), and the loop is gone once the module ends."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield from _chromium()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _chromium() -> Iterator[object]:
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


def signed_in(
    browser, live_server, width: int, height: int, *perms: str, **options: object
) -> tuple[BrowserContext, Page]:
    """A new browser context of that viewport, signed in as a fresh user 'ada' holding `perms`
    (codenames), and its page: (context, page); close the context when done."""
    user = User.objects.create_user("ada", password="a-long-password")
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": width, "height": height}, **options)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
    page = context.new_page()
    page.set_default_timeout(10_000)
    return context, page


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


@pytest.fixture
def screenshot(page):
    SCREENSHOTS.mkdir(exist_ok=True)

    def take(name: str, *, full_page: bool = True) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path

    return take
