"""SPEC 14.6 in a real Chromium at 1280 px and on a 390 px phone (issue 47), with long values (a
55-character workflow name, so a 64-character bound, a 128-character key, the longest reasons): a
user opens a skipped run's page and reads its Outcome (skipped, never started, why, the limit) and
follows the limit's link; opens a replaced run's page and follows "Caused by" to the run that
replaced it; and filters the Runs screen by status skipped, then replaced, with the Status control,
seeing only those runs. Nothing scrolls sideways. The view tests (tests/views/
test_run_outcomes.py) hold the HTML; this holds what a user sees and does.

Every run is made by start_run: the skipped ones by a start with on_full "skip" and a start past
the key's cap of its queue, the replaced one by a newer start of its key with on_full "replace"
(SPEC 14.3 for a run's start), which took its place in the queue."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from limits.engine.results import REASONS
from limits.runs import start_run, workflow
from stackbone.models import Run
from tests.browser.conftest import signed_in

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "reconcile_every_ledger_of_each_tenant_before_the_close"  # 55 characters: its bound has 64
NAME += "x" * (55 - len(NAME))
BOUND = f"workflow.{NAME}"
KEY = "tenant-" + "k" * 121  # 128 characters, the most a key holds


@workflow(name=NAME, concurrency={"total": 5, "per_key": 1, "max_waiting_per_key": 1})
def reconcile(input: dict) -> None:
    return None


@pytest.fixture
def runs(transactional_db, no_worker) -> dict[str, Run]:
    """For KEY: `holder` runs, `queued` waits, `refused` found the key's share of the queue full,
    `skipped` chose on_full "skip"; `replaced` was replaced by `queued`."""
    made = {name: start_run(reconcile, {"n": name}, concurrency_key=KEY) for name in ("holder", "replaced")}
    made["queued"] = start_run(reconcile, {"n": "queued"}, concurrency_key=KEY, on_full="replace")
    made["refused"] = start_run(reconcile, {"n": "refused"}, concurrency_key=KEY)
    made["skipped"] = start_run(reconcile, {"n": "skipped"}, concurrency_key=KEY, on_full="skip")
    made["replaced"].refresh_from_db()
    assert made["replaced"].caused_by == made["queued"].id
    assert [made[name].status for name in made] == ["pending", "replaced", "queued", "skipped", "skipped"]
    assert (made["refused"].end_reason, made["skipped"].end_reason) == ("key_queue_full", "key_pool_full")
    return made


@pytest.fixture(params=[1280, 390], ids=["1280px", "390px"])
def viewer(request, browser, live_server) -> Iterator[tuple[Page, int, str]]:
    width = request.param
    phone = {"device_scale_factor": 2, "is_mobile": True} if width < 600 else {}
    context, page = signed_in(browser, live_server, width, 900, **phone)
    yield page, width, live_server.url
    context.close()


def fits(page: Page, width: int) -> None:
    assert page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)") <= width


def on_screen(page: Page, locator, width: int) -> None:
    box = locator.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, box


def test_a_skipped_run_s_outcome_says_why_and_links_its_limit(runs, viewer) -> None:
    page, width, base = viewer
    for name in ("skipped", "refused"):
        run = runs[name]
        page.goto(f"{base}/studio/runs/{run.id}/")
        outcome = page.locator("#run-outcome")
        expect(outcome).to_contain_text("skipped never started: its bounds could not take it at once")
        reason = outcome.locator("dd.reason")
        assert reason.get_attribute("data-reason") == run.end_reason
        assert reason.inner_text() == REASONS[run.end_reason].capitalize()  # capfirst of the sentence
        expect(outcome.locator("dd.end-limit")).to_have_text(BOUND)
        assert outcome.locator("dd.caused-by").count() == 0
        for part in (reason, outcome.locator("dd.end-limit a")):
            on_screen(page, part, width)
        fits(page, width)

    page.locator("#run-outcome dd.end-limit a").click()
    expect(page).to_have_url(f"{base}/studio/limits/{BOUND}/")
    expect(page.locator("#activity")).to_contain_text(runs["refused"].id)
    fits(page, width)


def test_a_replaced_run_s_outcome_links_the_run_that_replaced_it(runs, viewer) -> None:
    page, width, base = viewer
    page.goto(f"{base}/studio/runs/{runs['replaced'].id}/")
    outcome = page.locator("#run-outcome")
    expect(outcome).to_contain_text("replaced never started: a newer run of its key took its place in the queue")
    expect(outcome.locator("dd.reason")).to_have_text(REASONS["key_pool_full"].capitalize())
    expect(outcome.locator("dd.end-limit")).to_have_text(BOUND)
    cause = outcome.locator("dd.caused-by a")
    expect(cause).to_have_text(runs["queued"].id)
    on_screen(page, cause, width)
    fits(page, width)

    cause.click()
    expect(page).to_have_url(f"{base}/studio/runs/{runs['queued'].id}/")
    expect(page.locator("#run-status")).to_have_text("queued")
    fits(page, width)


def test_the_runs_list_filtered_by_skipped_then_replaced_shows_only_those(runs, viewer) -> None:
    page, width, base = viewer
    page.goto(f"{base}/studio/runs/")
    expect(page.locator("tr.run-row")).to_have_count(5)
    fits(page, width)

    status = page.get_by_label("Status")
    on_screen(page, status, width)
    status.select_option("skipped")
    expect(page).to_have_url(re.compile(r"status=skipped"))
    expect(page.locator("tr.run-row")).to_have_count(2)
    shown = page.locator("tr.run-row").evaluate_all("rows => rows.map(r => r.id.slice(4))")
    assert sorted(shown) == sorted([runs["refused"].id, runs["skipped"].id])
    for run_id in shown:
        row = page.locator(f"#run-{run_id}")
        expect(row.locator(".status-cell")).to_have_text("skipped")
        expect(row.locator(".workflow-cell")).to_have_text(NAME)
        expect(row.locator(".run-key .long-value")).to_have_attribute("title", KEY)
        on_screen(page, row.locator(".status-cell .badge"), width)
    fits(page, width)

    status.select_option("replaced")
    expect(page).to_have_url(re.compile(r"status=replaced"))
    expect(page.locator("tr.run-row")).to_have_count(1)
    row = page.locator(f"#run-{runs['replaced'].id}")
    expect(row.locator(".status-cell")).to_have_text("replaced")
    fits(page, width)

    row.locator("a.run-id").click()
    expect(page).to_have_url(f"{base}/studio/runs/{runs['replaced'].id}/")
    expect(page.locator("#run-outcome dd.caused-by")).to_contain_text(runs["queued"].id)
