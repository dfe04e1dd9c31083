"""SPEC 13.5 in a real Chromium at 1280 px and on a 390 px phone (issue 28): the Keys panel of a
fair limit shows in use / pool, weight, min, fair share, pass and waiting per key, right and inside
its box, whatever the key (a 128-character one is cut in its cell, whole in its title); an
operator sets a key's weight and sees the fair shares follow, types a bad weight or min and
sees the message by that field with nothing changed, and switches the limit to fifo and back
in the edit panel, the fair columns leaving and coming back. SPEC 13.7 (issue 43): the queue
says how the limit shares, lists its runs in the order they will be served and says why the
others wait their turn. The view tests
(tests/views/test_fair_shares.py) hold the HTML and the messages; this holds what a user sees."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from limits import services
from limits.config import KEY_MAX_LENGTH
from limits.models import AuditEvent, Limit, LimitKey
from tests.browser.conftest import SCREENSHOTS, signed_in
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/studio/limits/tenant-jobs/"
LONG_KEY = "tenant-" + "w" * (KEY_MAX_LENGTH - len("tenant-"))
COLUMNS = ["Key", "In use / pool", "Weight", "Min", "Fair share", "Pass", "Waiting", "Pool size"]
TURN = "Other keys hold less of their share and are served first"


@pytest.fixture
def fair(transactional_db) -> None:
    """tenant-jobs, capacity 6, 4 per key, fair: acme holds its 4 and waits with 3 more; a tenant
    with a 128-character key and globex hold one each and wait with one; a run without a key
    waits. Four shares of weight 1: 6 x 1 / 4 = 1.5 each."""
    declare(tenant_jobs={"capacity": 6, "max_hold": "1h", "per_key": 4, "share": "fair"})
    for n in range(4):
        services.acquire("tenant-jobs", run_id=f"acme-{n}", key="acme")
    services.acquire("tenant-jobs", run_id="long-0", key=LONG_KEY)
    services.acquire("tenant-jobs", run_id="globex-0", key="globex")
    waiting = [("acme-4", "acme"), ("acme-5", "acme"), ("acme-6", "acme"), ("long-1", LONG_KEY)]
    for run_id, key in [*waiting, ("globex-1", "globex"), ("plain-1", None)]:
        services.acquire("tenant-jobs", run_id=run_id, key=key, timeout="1h")
    assert LONG_KEY in LimitKey.objects.values_list("key", flat=True) and len(LONG_KEY) == 128


@pytest.fixture(params=[1280, 390], ids=["1280px", "390px"])
def operator(request, browser, live_server) -> Iterator[tuple[Page, int]]:
    width = request.param
    phone = {"device_scale_factor": 2, "is_mobile": True} if width < 600 else {}
    context, page = signed_in(browser, live_server, width, 900, "operate_limit", **phone)
    page.goto(live_server.url + URL)
    page.evaluate("window.__noReload = true")
    yield page, width
    assert page.evaluate("window.__noReload === true"), "the page was reloaded"
    context.close()


def _width(page: Page) -> int:
    return int(page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"))


def _row(page: Page, key: str) -> Locator:
    return page.locator("#keys tbody tr").filter(has=page.locator(f'th[scope="row"] [title="{key}"]'))


def _cells(row: Locator) -> dict[str, str]:
    """A row's cells by their column (each cell's data-label), as the user reads them."""
    cells = {}
    for cell in row.locator("td[data-label]").all():
        label = cell.get_attribute("data-label")
        value = cell.locator("input[type=text]")
        cells[label] = value.input_value() if value.count() else " ".join(cell.inner_text().split())
    return cells


def _inside(inner: Locator, outer: str, what: str) -> None:
    """`inner` is drawn inside its ancestor `outer` (a selector; a pixel of rounding allowed),
    measured in one go in the page (the live region is swapped every 3 s)."""
    a_left, a_right, b_left, b_right = inner.evaluate(
        "(e, s) => { const a = e.getBoundingClientRect(), b = e.closest(s).getBoundingClientRect();"
        " return [a.left, a.right, b.left, b.right]; }",
        outer,
    )
    assert a_left >= b_left - 1 and a_right <= b_right + 1, (what, a_left, a_right, b_left, b_right)


FITS = """() => {
    const panel = document.querySelector("#keys").getBoundingClientRect(), out = [];
    const parts = "#keys tbody tr, #keys tbody tr :is(th, td, input, button, .errorlist, .key)";
    for (const e of document.querySelectorAll(parts)) {
        const r = e.getBoundingClientRect();
        if (r.width && (r.left < panel.left - 1 || r.right > panel.right + 1))
            out.push(`${e.outerHTML.slice(0, 80)}: ${r.left}-${r.right} outside ${panel.left}-${panel.right}`);
    }
    return out;
}"""


def _fits(page: Page, width: int) -> None:
    """No page wider than the window; every row of the keys table, and each of its cells' own
    content (fields, buttons, messages, the key), inside the panel."""
    assert _width(page) <= width, f"the page scrolls sideways ({_width(page)} px at {width})"
    assert page.evaluate(FITS) == []


def test_the_fair_keys_panel_its_row_forms_and_the_share_switch(fair, operator) -> None:
    """One operator's visit, at each width: read the panel, set weights and mins (bad, then
    good), switch the limit to fifo and back (one page load for all: the regions swap in place)."""
    page, width = operator
    _read_the_fair_columns(page, width)
    _set_weights_and_mins(page, width)
    _switch_fifo_and_fair(page, width)


def _read_the_fair_columns(page: Page, width: int) -> None:
    keys = page.locator("#keys")
    expect(keys.locator("tbody tr")).to_have_count(4)  # (no key), then busiest first
    if width > 600:
        assert [" ".join(t.split()) for t in keys.locator("thead th").all_inner_texts()] == [c.upper() for c in COLUMNS]
    # Passes: acme's four grants took it four turns on; the long key and globex entered at its
    # pass and took one grant each; the run without a key entered at the smallest, acme's.
    assert _cells(_row(page, "acme")) == {
        "In use / pool": "4 / 4",
        "Weight": "1",
        "Min": "0",
        "Fair share": "1.5",
        "Pass": "4.00",
        "Waiting": "3",
        "Pool size": "",
    }
    assert _cells(_row(page, LONG_KEY)) | {"Pool size": ""} == {
        "In use / pool": "1 / 4",
        "Weight": "1",
        "Min": "0",
        "Fair share": "1.5",
        "Pass": "5.00",
        "Waiting": "1",
        "Pool size": "",
    }
    no_key = _cells(keys.locator("tr.no-key"))
    assert (no_key["In use / pool"], no_key["Weight"], no_key["Fair share"], no_key["Pass"], no_key["Waiting"]) == (
        "0 / 4",
        "1 (fixed)",
        "1.5",
        "4.00",
        "1",
    )
    # The long key is cut in its cell and whole in its title; its row's fields are labelled.
    long_key = _row(page, LONG_KEY).locator("th .key")
    assert long_key.get_attribute("title") == LONG_KEY
    assert long_key.evaluate("e => e.scrollWidth > e.clientWidth"), "the long key is not cut"
    expect(_row(page, LONG_KEY).get_by_label(f"Weight of key {LONG_KEY} (empty: 1)")).to_have_value("1")
    _fits(page, width)
    SCREENSHOTS.mkdir(exist_ok=True)
    keys.screenshot(path=str(SCREENSHOTS / f"limit-fair-keys-{width}.png"))
    _read_the_fair_queue(page, width)


def _read_the_fair_queue(page: Page, width: int) -> None:
    """SPEC 13.7: the queue's header says how the limit shares; its rows come in the order they
    will be served: the run without a key first (it holds nothing), waiting only for the limit;
    the others, globex's among them, for their turn. Each row (a card on a phone) inside the
    page."""
    queue = page.locator("#queue")
    queue.scroll_into_view_if_needed()
    expect(queue.locator("#queue-note")).to_contain_text(
        "Fair shares between keys: the key holding least of its share is served next; keys take turns."
    )
    rows = queue.locator("tbody tr")
    expect(rows).to_have_count(6)
    first = rows.first
    expect(first.locator("td.position")).to_have_text("1")
    expect(first.locator("td.cell-run")).to_contain_text("plain-1")
    expect(first.locator("td[data-label='Why']")).to_have_text("The limit is full")
    globex = rows.filter(has=page.locator("td.cell-run", has_text="globex-1"))
    expect(globex.locator("td[data-label='Why']")).to_have_text(TURN)
    _inside(globex.locator("td[data-label='Why']"), "#queue", "the reason in its row")
    assert _width(page) <= width
    queue.screenshot(path=str(SCREENSHOTS / f"limit-fair-queue-{width}.png"))


def _set_weights_and_mins(page: Page, width: int) -> None:
    globex = _row(page, "globex")

    # A bad weight, then a bad min: the message by the field, the value kept, nothing changed.
    for label, value, message in [
        ("Weight of key globex (empty: 1)", "0", "Weight must be a whole number from 1 to 100, not 0"),
        ("Min of key globex (empty: 0)", "9", "Min must be a whole number from 0 to capacity (6), not 9"),
    ]:
        field = globex.get_by_label(label)
        field.fill(value)
        field.locator("xpath=..").get_by_role("button", name="Set").click()
        error = globex.locator(".errorlist", has_text=message)
        expect(error).to_be_visible()
        expect(globex.get_by_label(label)).to_have_value(value)
        expect(globex.get_by_label(label)).to_have_attribute("aria-invalid", "true")
        assert error.get_attribute("id") == globex.get_by_label(label).get_attribute("aria-describedby")
        _inside(error, f'td[data-label="{label.split()[0]}"]', "the message by its field")
        _fits(page, width)
    assert not AuditEvent.objects.filter(action__in=["weight", "min"]).exists()
    assert LimitKey.objects.get(key="globex").weight == 1 and LimitKey.objects.get(key="globex").minimum == 0

    # A good weight: globex's share is 6 x 3 / 6 = 3, each of the others' 6 x 1 / 6 = 1.
    globex.get_by_label("Weight of key globex (empty: 1)").fill("3")
    globex.get_by_label("Weight of key globex (empty: 1)").locator("xpath=..").get_by_role("button", name="Set").click()
    expect(page.locator("#flash")).to_contain_text("The weight of key “globex” is now 3.")
    expect(globex.locator('td[data-label="Fair share"]')).to_have_text("3.0")
    expect(_row(page, "acme").locator('td[data-label="Fair share"]')).to_have_text("1.0")
    expect(page.locator("#keys tr.no-key td[data-label='Fair share']")).to_have_text("1.0")
    expect(globex.locator(".errorlist")).to_have_count(0)
    assert LimitKey.objects.get(key="globex").weight == 3

    # A min on the long key's row, then its weight back to the default (an empty field).
    long_row = _row(page, LONG_KEY)
    long_row.get_by_label(f"Min of key {LONG_KEY} (empty: 0)").fill("2")
    long_row.get_by_label(f"Min of key {LONG_KEY} (empty: 0)").locator("xpath=..").get_by_role(
        "button", name="Set"
    ).click()
    expect(page.locator("#flash")).to_contain_text("is now 2.")
    expect(long_row.get_by_label(f"Min of key {LONG_KEY} (empty: 0)")).to_have_value("2")
    globex.get_by_label("Weight of key globex (empty: 1)").fill("")
    globex.get_by_label("Weight of key globex (empty: 1)").locator("xpath=..").get_by_role("button", name="Set").click()
    expect(page.locator("#flash")).to_contain_text("The weight of key “globex” is now 1 (the default).")
    expect(globex.locator('td[data-label="Fair share"]')).to_have_text("1.5")
    assert LimitKey.objects.get(key=LONG_KEY).minimum == 2 and LimitKey.objects.get(key="globex").weight == 1
    _fits(page, width)


def _share_fits(page: Page) -> None:
    """The share field and its Save button inside the edit panel, whichever option is shown."""
    share = page.get_by_label("Share between keys")
    _inside(share, "#edit-panel", "the share field")
    _inside(share.locator("xpath=..").get_by_role("button", name="Save"), "#edit-panel", "the share's Save button")


def _switch_fifo_and_fair(page: Page, width: int) -> None:
    share = page.get_by_label("Share between keys")
    share.scroll_into_view_if_needed()
    expect(share).to_have_value("fair")
    _share_fits(page)
    share.select_option("fifo")
    _share_fits(page)  # its longer text ("fifo: first come, first served") pushed Save out at 1280 px
    share.locator("xpath=..").get_by_role("button", name="Save").click()
    expect(page.locator("#edit-notice")).to_contain_text("tenant-jobs now grants first come, first served.")
    expect(page.locator("#keys thead")).not_to_contain_text("Fair share")  # the panel follows
    expect(page.locator("#keys tbody td[data-label='Weight']")).to_have_count(0)
    assert Limit.objects.get(name="tenant-jobs").share == "fifo"
    assert _width(page) <= width
    _share_fits(page)

    page.get_by_label("Share between keys").select_option("fair")
    page.get_by_label("Share between keys").locator("xpath=..").get_by_role("button", name="Save").click()
    expect(page.locator("#edit-notice")).to_contain_text("tenant-jobs now shares its capacity fairly between keys")
    expect(_row(page, "acme").locator('td[data-label="Fair share"]')).to_have_text("1.5")
    assert Limit.objects.get(name="tenant-jobs").share == "fair"
    shares = AuditEvent.objects.filter(action="share").order_by("id").values_list("new_value", flat=True)
    assert list(shares) == ["fifo", "fair"]
    _fits(page, width)
