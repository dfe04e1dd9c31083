"""SPEC 12.5 and 12.6 in a real Chromium at 1280 and 390 px: the box is the first row of the
Limits list (runs executing / base, the burst ceiling, runs waiting for the box); its page lists
the executing runs then the waiting ones in order; an operator types a bad base (a long value)
and sees the error next to the field with nothing changed, then a good one, and the waiting run
starts. No page is wider than the window, whatever the workflow's name holds."""

from __future__ import annotations

import pytest

from limits import services
from limits.config import define_workspace
from limits.models import Limit
from studio.workflows import start_run, step, workflow
from tests.browser.conftest import signed_in
from tests.factories import holders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]

LONG_NAME = "browser_box_" + "very_long_workflow_name_" * 5


@step
def work(label: str) -> str:
    return label


@workflow(name=LONG_NAME)
def long_named(input: dict) -> str:
    return work(input["label"])


@workflow(name="browser_box_short")
def short(input: dict) -> str:
    return work(input["label"])


@pytest.fixture
def busy_box(no_worker) -> list[str]:
    """Base 1, burst 2 (ceiling 2): one run of each workflow executes, a second of the long-named
    one waits for the box."""
    services.sync_workspace(
        define_workspace(
            limits={"aa-partner-api": {"capacity": 3, "max_hold": "1h"}}, run_concurrency={"base": 1, "burst": 2.0}
        )
    )
    runs = [start_run(long_named, {"label": "a"}), start_run(short, {"label": "b"})]
    runs.append(start_run(long_named, {"label": "c"}))
    return [run.id for run in runs]


def _width(page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


@pytest.mark.parametrize("width", [1280, 390])
def test_the_box_on_the_list_and_its_page_and_editing_it(busy_box, browser, live_server, width) -> None:
    context, page = signed_in(browser, live_server, width, 900, "operate_limit")
    try:
        page.goto(f"{live_server.url}/studio/limits/")
        first = page.locator("table.limits tbody tr").first
        assert first.get_attribute("id") == "limit-box"
        assert first.locator("#box-executing").inner_text() == "2 executing / base 1"
        assert first.locator("#box-ceiling").inner_text() == "burst 2× · ceiling 2"
        assert first.locator("#box-waiting").inner_text() == "1"
        assert first.locator("#box-executing").is_visible()
        assert _width(page) <= width

        first.locator("a.limit-name").click()
        page.wait_for_url("**/studio/limits/box/")
        assert page.locator("#slots-title").inner_text().startswith("Executing runs")
        assert page.locator("#queue-title").inner_text().startswith("Waiting for the box")
        executing = page.locator("#slots tbody tr a.run").all_inner_texts()
        assert executing == busy_box[:2]
        assert page.locator("#queue tbody tr a.run").all_inner_texts() == busy_box[2:]
        slots_box, queue_box = page.locator("#slots").bounding_box(), page.locator("#queue").bounding_box()
        assert slots_box["y"] < queue_box["y"]  # executing first, then waiting
        assert page.locator("#figure-base").inner_text() == "1"
        assert _width(page) <= width

        base = page.locator("#id_base")
        base.scroll_into_view_if_needed()
        base.fill("9" * 200)
        page.locator("#box-field button[type=submit]", has_text="Save").click()
        error = page.locator("#box-field .errorlist").first
        error.wait_for()
        assert error.inner_text().startswith("Base must be a whole number from 1 to 100000, not")
        assert _width(page) <= width
        assert Limit.objects.get(name="box").per_key == 1  # nothing changed

        page.locator("#id_base").fill("2")
        page.locator("#box-field button[type=submit]", has_text="Save").click()
        page.locator("#edit-notice .notice.success").wait_for()
        assert "no workflow more than 2" in page.locator("#edit-notice").inner_text()
        page.locator("#figure-base", has_text="2").wait_for()  # the live region refreshed itself
        assert holders("box")[-1] == (busy_box[2], "reserved")
        assert _width(page) <= width
    finally:
        context.close()
