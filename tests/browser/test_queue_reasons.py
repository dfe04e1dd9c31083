"""Issue 30 (SPEC 6.5) in a real Chromium: the limit page's queue says why each run waits (the
Why column), at 1280 px and on a 390 px phone, with long keys, labels, run ids and a 64-character
partner limit in the text: every reason shows whole, nothing cut off or pushed out of view, and
the page never scrolls sideways.

What must never happen: a waiting row whose Why is empty, clipped (an ellipsis or a hidden
overflow), or outside the window."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from limits.models import LABEL_MAX_LENGTH
from limits.services import acquire, acquire_group, pause_limit
from tests.browser.conftest import signed_in
from tests.factories import declare

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]

LONG_KEY = "tenant-" + "k" * 121  # 128 characters, the longest key
LONG_LIMIT = "partner-" + "p" * 56  # 64 characters, the longest name
LABEL = "L" * LABEL_MAX_LENGTH
VIEWPORTS = {
    "desktop": (1280, 900, {}),
    "phone": (390, 844, {"device_scale_factor": 2, "is_mobile": True, "has_touch": True}),
}


def _run(name: str) -> str:
    return f"{name}-" + "r" * (60 - len(name))


@pytest.fixture
def queues(transactional_db) -> None:
    """keys (capacity 3, 1 per key, so room left): the long key and acme each hold their pool and
    a second run of each waits (its key's pool is full). api (capacity 2) and the long-named
    partner (capacity 1, held): a run of both waits in both queues, on the partner because it
    is full, on api for the partner (another limit of its group, <partner>, is full)."""
    declare(
        keys={"capacity": 3, "max_hold": "1h", "per_key": 1},
        api={"capacity": 2, "max_hold": "1h"},
        **{LONG_LIMIT: {"capacity": 1, "max_hold": "1h"}},
    )
    assert acquire("keys", run_id=_run("holder"), key=LONG_KEY, label=LABEL).state == "busy"
    assert acquire("keys", run_id=_run("pool"), key=LONG_KEY, label=LABEL, timeout="1h").state == "waiting"
    assert acquire("keys", run_id=_run("acme"), key="acme", label=LABEL).state == "busy"
    assert acquire("keys", run_id=_run("acme2"), key="acme", label=LABEL, timeout="1h").state == "waiting"
    assert acquire(LONG_LIMIT, run_id=_run("partner"), label=LABEL).state == "busy"
    assert acquire_group(["api", LONG_LIMIT], run_id=_run("group"), label=LABEL, timeout="1h").state == "waiting"


@pytest.fixture(params=list(VIEWPORTS))
def viewer(request, browser, live_server) -> Iterator[tuple[Page, int]]:
    width, height, options = VIEWPORTS[request.param]
    context, page = signed_in(browser, live_server, width, height, **options)
    yield page, width
    context.close()


def _whys(page: Page, width: int) -> dict[str, tuple[str, str]]:
    """Each waiting row's Why, {run id: (code, text)}, after checking that it is whole and in
    view: not empty, no overflow cut off (width or height), inside the window and its table's box."""
    page_width = page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
    assert page_width <= width, f"the page is {page_width} px wide in a {width} px window"
    rows = page.locator("#queue table.queue tbody tr")
    found = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        cell = row.locator("td.cell-why")
        cell.scroll_into_view_if_needed()
        expect(cell).to_be_visible()
        text = cell.inner_text().strip()
        assert text, f"row {i}: no reason"
        cut = cell.evaluate(
            """element => {
                const style = getComputedStyle(element);
                return element.scrollWidth > element.clientWidth + 1
                    || element.scrollHeight > element.clientHeight + 1
                    || style.textOverflow === "ellipsis" && style.overflow !== "visible";
            }"""
        )
        assert not cut, f"row {i}: {text!r} is cut off"
        box, wrap = (
            cell.bounding_box(),
            row.locator("xpath=ancestor::div[contains(@class, 'table-wrap')]").bounding_box(),
        )
        assert box is not None and wrap is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (text, box)
        assert wrap["x"] - 0.5 <= box["x"] and box["x"] + box["width"] <= wrap["x"] + wrap["width"] + 0.5, (
            text,
            box,
            wrap,
        )
        run = row.locator("td.cell-run a.run").inner_text().strip()
        found[run] = (cell.get_attribute("data-reason") or "", text)
    return found


def test_each_waiting_run_says_why_whole_and_in_view(queues, viewer, live_server) -> None:
    page, width = viewer
    page.goto(live_server.url + "/studio/limits/keys/")
    assert _whys(page, width) == {
        _run("pool"): ("key_pool_full", "Its key's pool is full"),
        _run("acme2"): ("key_pool_full", "Its key's pool is full"),
    }
    page.goto(live_server.url + "/studio/limits/api/")
    assert _whys(page, width) == {
        _run("group"): ("group_limit_full", f"Another limit of its group, {LONG_LIMIT}, is full"),
    }
    page.goto(live_server.url + f"/studio/limits/{LONG_LIMIT}/")
    assert _whys(page, width) == {_run("group"): ("limit_full", "The limit is full")}


def test_a_paused_limit_says_so_on_every_waiting_run(queues, viewer, live_server) -> None:
    pause_limit("keys", actor="alice")
    pause_limit(LONG_LIMIT, actor="alice")
    page, width = viewer
    page.goto(live_server.url + "/studio/limits/keys/")
    assert _whys(page, width) == {
        _run("pool"): ("limit_paused", "The limit is paused"),
        _run("acme2"): ("limit_paused", "The limit is paused"),
    }
    page.goto(live_server.url + f"/studio/limits/{LONG_LIMIT}/")
    assert _whys(page, width) == {_run("group"): ("limit_paused", "The limit is paused")}
    page.goto(live_server.url + "/studio/limits/api/")
    assert _whys(page, width) == {
        _run("group"): ("group_limit_full", f"Another limit of its group, {LONG_LIMIT}, is paused"),
    }
