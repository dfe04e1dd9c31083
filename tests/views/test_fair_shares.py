"""SPEC 13.5 on the Studio Limits screen (issue 28): on a fair limit the Keys panel shows each
key's in use, pool, weight, min, fair share, pass and waiting; a key's weight and min are set on
its row (errors by the field, nothing changed); the edit panel switches fifo/fair and resets it;
the list marks a fair limit. The weights are summed in one aggregate query, whatever the keys.
SPEC 13.7 (issue 43): the queue is listed in the order it is served (the first row gets the next
release; past the first page, estimated and said so), its header says how the limit shares, a
run whose key is not next says why, and the page's queries do not grow with the keys."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from limits import services
from limits.engine.keys import PASS_STRIDE
from limits.models import AuditEvent, Limit, LimitKey, QueueEntry, Slot
from tests.factories import declare

pytestmark = pytest.mark.django_db

URL = "/studio/limits/tenant-jobs/"


@pytest.fixture
def fair_limit() -> Limit:
    """tenant-jobs (capacity 4, fair): acme holds all 4 and waits with two more; globex and
    initech wait with one each, and one run without a key waits."""
    declare(tenant_jobs={"capacity": 4, "max_hold": "45m", "share": "fair"})
    for n in range(4):
        services.acquire("tenant-jobs", run_id=f"a-{n}", key="acme")
    for run_id, key in [("a-4", "acme"), ("a-5", "acme"), ("g-1", "globex"), ("i-1", "initech"), ("n-1", None)]:
        services.acquire("tenant-jobs", run_id=run_id, key=key, timeout="1h")
    return Limit.objects.get(name="tenant-jobs")


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _rows(page: str) -> dict[str, str]:
    """Each row of the keys table as its text, by key ('(no key)' for the pool without one)."""
    table = re.search(r'<table class="grid keys">(.*?)</table>', page, re.S)
    assert table is not None, "no keys table"
    rows = [_text(row) for row in re.findall(r"<tr id=\"key-[^\"]*\".*?</tr>", table[1], re.S)]
    return {row.split(" ")[0]: row for row in rows}


def _row_html(page: str, key: str) -> str:
    found = re.search(
        rf'<tr id="key-[^"]*"[^>]*>\s*<th scope="row"><span class="key[^"]*" title="{key}">.*?</tr>', page, re.S
    )
    assert found is not None, key
    return found[0]


def _nothing_changed() -> None:
    assert Limit.objects.get(name="tenant-jobs").share_override == ""
    assert not LimitKey.objects.exclude(weight=1).exists()
    assert not LimitKey.objects.exclude(minimum=0).exists()
    assert not AuditEvent.objects.filter(action__in=["share", "weight", "min"]).exists()


def test_the_keys_panel_of_a_fair_limit_shows_weight_min_and_fair_share(fair_limit, operator_client) -> None:
    services.set_weight("tenant-jobs", 4, key="acme", actor="test")
    page = operator_client.get(URL).content.decode()
    assert '<th scope="col" class="num" title="On a fair limit' in page
    assert re.search(r">Weight</th>.*?>Min</th>.*?>Fair<br>share</th>.*?>Pass</th>.*?>Waiting</th>", page, re.S)
    table = re.search(r'<table class="grid keys">(.*?)</table>', page, re.S)[1]
    acme = _row_html(table, "acme")
    assert 'name="weight" value="4"' in acme and 'name="min" value="0"' in acme
    assert '<td data-label="Fair share" class="num fair-share">2.29</td>' in acme  # 4 x 4 / 7
    globex = _row_html(table, "globex")
    assert '<td data-label="Fair share" class="num fair-share">0.57</td>' in globex
    assert "(no key)" in table and "0.57" in _rows(page)["(no"]


def test_a_viewer_sees_the_figures_without_forms(fair_limit, viewer_client) -> None:
    page = viewer_client.get(URL).content.decode()
    assert "key-weight/" not in page and "key-min/" not in page
    assert "1.0" in _rows(page)["acme"]  # 4 x 1 / 4


def test_a_fifo_limit_shows_no_fair_columns(db, operator_client) -> None:
    declare(plain={"capacity": 4, "max_hold": "1m", "per_key": 2})
    services.acquire("plain", run_id="r1", key="acme")
    page = operator_client.get("/studio/limits/plain/").content.decode()
    assert ">Fair<br>share</th>" not in page and "key-weight/" not in page


def test_the_weights_cost_one_query_whatever_the_number_of_keys(fair_limit, operator_client) -> None:
    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(URL).status_code == 200
        return [query["sql"] for query in captured.captured_queries]

    def more_keys(start: int, count: int) -> None:
        LimitKey.objects.bulk_create(
            LimitKey(limit=fair_limit, key=f"k-{n:03}", waiting_count=1, weight=1 + n % 5)
            for n in range(start, start + count)
        )

    more_keys(0, 30)  # past one page of keys: the panel counts them, then reads its page
    before = queries()
    more_keys(30, 300)
    after = queries()
    assert len(after) == len(before)
    assert len([sql for sql in after if "SUM(" in sql.upper() and "limits_limitkey" in sql]) == 1


def test_setting_a_weight_on_a_row_is_audited_and_refreshes_the_panel(fair_limit, operator_client, htmx) -> None:
    response = operator_client.post(URL + "key-weight/", {"key": "globex", "weight": "3"}, headers=htmx)
    assert response.status_code == 200
    body = response.content.decode()
    assert "The weight of key “globex” is now 3." in body
    assert 'name="weight" value="3"' in _row_html(body, "globex")
    event = AuditEvent.objects.get(action="weight")
    assert (event.actor, event.key, event.new_value) == ("user:ada", "globex", "3")
    operator_client.post(URL + "key-weight/", {"key": "globex", "weight": ""}, headers=htmx)
    assert LimitKey.objects.get(key="globex").weight == 1


def test_setting_a_min_on_a_row(fair_limit, operator_client, htmx) -> None:
    body = operator_client.post(URL + "key-min/", {"key": "initech", "min": "2"}, headers=htmx).content.decode()
    assert "The min of key “initech” is now 2." in body
    assert LimitKey.objects.get(key="initech").minimum == 2


@pytest.mark.parametrize(
    ("path", "field", "value", "message"),
    [
        ("key-weight/", "weight", "0", "Weight must be a whole number from 1 to 100, not 0"),
        ("key-weight/", "weight", "heavy", "Weight must be a whole number from 1 to 100, not &#x27;heavy&#x27;"),
        ("key-min/", "min", "9", "Min must be a whole number from 0 to capacity (4), not 9"),
        ("key-min/", "min", "-1", "Min must be a whole number from 0 to capacity (4), not -1"),
    ],
)
def test_a_bad_weight_or_min_is_shown_by_its_field_and_changes_nothing(
    fair_limit, operator_client, htmx, path, field, value, message
) -> None:
    response = operator_client.post(URL + path, {"key": "globex", field: value}, headers=htmx)
    assert response.status_code == 422
    row = _row_html(response.content.decode(), "globex")
    assert f'name="{field}" value="{value}"' in row and 'aria-invalid="true"' in row and "autofocus" in row
    assert f'id="{re.search(r"id=\"(key-[0-9a-f]+)\"", row)[1]}-{field}-error"' in row
    assert message in row
    _nothing_changed()


def test_a_bad_key_is_a_400(fair_limit, operator_client, htmx) -> None:
    assert operator_client.post(URL + "key-weight/", {"weight": "2"}, headers=htmx).status_code == 400
    assert operator_client.post(URL + "key-min/", {"key": "a\x07", "min": "1"}, headers=htmx).status_code == 400
    _nothing_changed()


def test_a_viewer_cannot_change_weights_or_the_share(fair_limit, viewer_client, htmx) -> None:
    assert viewer_client.post(URL + "key-weight/", {"key": "acme", "weight": "2"}, headers=htmx).status_code == 403
    assert viewer_client.post(URL + "share/", {"share": "fifo"}, headers=htmx).status_code == 403
    _nothing_changed()


def test_the_edit_panel_switches_fifo_and_fair_and_resets(fair_limit, operator_client, htmx) -> None:
    page = operator_client.get(URL).content.decode()
    assert '<option value="fair" selected>' in page and "Reset to declared (fair)" in page
    response = operator_client.post(URL + "share/", {"share": "fifo"}, headers=htmx)
    assert response.status_code == 200
    assert "tenant-jobs now grants first come, first served." in response.content.decode()
    assert "limit-changed" in response.headers["HX-Trigger"]
    assert Limit.objects.get(name="tenant-jobs").share == "fifo"
    assert ">Fair<br>share</th>" not in operator_client.get(URL).content.decode()
    body = operator_client.post(URL + "reset/", {"field": "share"}, headers=htmx).content.decode()
    assert "Share reset to the declared fair." in body
    assert list(AuditEvent.objects.filter(action="share").values_list("actor", flat=True)) == ["user:ada"] * 2


def test_a_bad_share_is_shown_by_its_field_and_changes_nothing(fair_limit, operator_client, htmx) -> None:
    response = operator_client.post(URL + "share/", {"share": "lottery"}, headers=htmx)
    assert response.status_code == 422
    assert "Share must be &#x27;fifo&#x27; or &#x27;fair&#x27;, not &#x27;lottery&#x27;" in response.content.decode()
    _nothing_changed()


def test_the_list_marks_a_fair_limit(fair_limit, operator_client) -> None:
    declare(tenant_jobs={"capacity": 4, "max_hold": "45m", "share": "fair"}, other={"capacity": 1, "max_hold": "1m"})
    page = operator_client.get("/studio/limits/").content.decode()
    assert re.search(r'tenant-jobs</a> <span class="badge fair" title="Fair shares between keys">fair</span>', page)
    assert "badge fair" not in page.split(">other</a>")[1].split("</th>")[0]


def test_the_keys_panel_shows_each_keys_pass_beside_its_fair_share(fair_limit, operator_client) -> None:
    """acme's four grants took it four turns on; the others entered the turns at its pass."""
    page = operator_client.get(URL).content.decode()
    assert re.search(r">Fair<br>share</th><th scope=\"col\" class=\"num\" title=\"Its place in the limit's turns", page)
    table = re.search(r'<table class="grid keys">(.*?)</table>', page, re.S)[1]
    assert '<td data-label="Pass" class="num fair-pass">4.00</td>' in _row_html(table, "acme")
    assert '<td data-label="Pass" class="num fair-pass">4.00</td>' in _row_html(table, "globex")
    assert "4.00" in _rows(page)["(no"]


def test_a_fifo_limit_shows_no_pass(db, operator_client) -> None:
    declare(plain={"capacity": 4, "max_hold": "1m", "per_key": 2})
    services.acquire("plain", run_id="r1", key="acme")
    assert ">Pass</th>" not in operator_client.get("/studio/limits/plain/").content.decode()


# --- the queue of a fair limit (SPEC 13.7) --------------------------------------------------------


def _queue(page: str) -> list[tuple[str, str, str]]:
    """The queue table's rows as (place, run, why)."""
    table = re.search(r'<table class="grid queue">(.*?)</table>', page, re.S)
    assert table is not None, "no queue table"
    rows = re.findall(r'<tr id="wait-\d+">(.*?)</tr>', table[1], re.S)
    found = []
    for row in rows:
        place = _text(re.search(r'<td class="num position">(.*?)</td>', row, re.S)[1])
        run = re.search(r'<a class="run" href="[^"]*" title="([^"]*)"', row)[1]
        why = _text(re.search(r'<td data-label="Why"[^>]*>(.*?)</td>', row, re.S)[1])
        found.append((place, run, why))
    return found


TURN = "Other keys hold less of their share and are served first"


def test_the_queue_is_listed_in_the_order_it_is_served_and_the_first_row_gets_the_next_release(
    fair_limit, operator_client, htmx
) -> None:
    """acme holds all four slots: globex, initech and the run without a key come before acme's
    own runs, the first waiting only for the limit, the others for their turn. The operator
    releases the slot held longest: the first row's run gets it."""
    page = operator_client.get(URL).content.decode()
    note = _text(re.search(r'<p class="sub" id="queue-note">(.*?)</p>', page, re.S)[1])
    assert note.startswith(
        "Fair shares between keys: the key holding least of its share is served next; keys take turns."
    )
    assert "First come, first served" not in note
    assert _queue(page) == [
        ("1", "g-1", "The limit is full"),
        ("2", "i-1", TURN),
        ("3", "n-1", TURN),
        ("4", "a-4", TURN),
        ("5", "a-5", TURN),
    ]
    assert 'data-reason="fair_turn"' in page

    oldest = Slot.objects.filter(limit=fair_limit, state="busy").order_by("granted_at", "id").first()
    response = operator_client.post(URL + "release/", {"slot": oldest.id}, headers=htmx)
    assert response.status_code == 200
    assert Slot.objects.get(limit=fair_limit, state="reserved").run_id == "g-1"
    assert [run for _, run, _ in _queue(response.content.decode())] == ["i-1", "n-1", "a-4", "a-5"]


def test_past_the_first_page_places_are_estimated_and_said_so(fair_limit, operator_client, monkeypatch) -> None:
    monkeypatch.setattr("limits.views.regions.QUEUE_PER_PAGE", 2)  # read where it is defined
    first = operator_client.get(URL).content.decode()
    assert "Past the first 2, the order is estimated from the keys’ turns (≈)." in first
    assert [place for place, _, _ in _queue(first)] == ["1", "2"]
    second = operator_client.get(URL + "?queue=2").content.decode()
    assert [place for place, _, _ in _queue(second)] == ["≈3", "≈4"]
    assert 'title="Estimated from the keys’ turns' in second
    third = operator_client.get(URL + "?queue=3").content.decode()
    runs = [run for page in (first, second, third) for _, run, _ in _queue(page)]
    assert sorted(runs) == ["a-4", "a-5", "g-1", "i-1", "n-1"]


def test_a_paused_fair_limit_says_its_order_applies_once_resumed(fair_limit, operator_client) -> None:
    services.pause_limit("tenant-jobs", actor="ops")
    page = operator_client.get(URL).content.decode()
    note = _text(re.search(r'<p class="sub" id="queue-note">(.*?)</p>', page, re.S)[1])
    assert "Listed in the order they will be served once the limit is resumed" in note
    assert {why for _, _, why in _queue(page)} == {"The limit is paused"}


def test_a_fair_limit_page_costs_the_same_queries_with_60_keys_or_3000(fair_limit, operator_client) -> None:
    """The queue's first page reads only the keys that can come up on it (along
    limitkey_fair_order on PostgreSQL) and their first runs; a deeper page one statement more.
    Never a query per key or per run."""

    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(url).status_code == 200
        return len(captured.captured_queries)

    def tenants(start: int, count: int) -> None:
        now = timezone.now()
        LimitKey.objects.bulk_create(
            LimitKey(limit=fair_limit, key=f"t-{n:04}", waiting_count=1, head=10_000 + n, fair_pass=PASS_STRIDE * 4)
            for n in range(start, start + count)
        )
        QueueEntry.objects.bulk_create(
            QueueEntry(
                limit=fair_limit,
                run_id=f"t-{n}",
                request=f"t-{n}",
                key=f"t-{n:04}",
                position=10_000 + n,
                enqueued_at=now,
                deadline=now + timedelta(hours=1),
                timeout_ms=3_600_000,
            )
            for n in range(start, start + count)
        )
        Limit.objects.filter(id=fair_limit.id).update(
            waiting_count=F("waiting_count") + count, keyed_waiting_count=F("keyed_waiting_count") + count
        )

    tenants(0, 60)  # with the fixture's 5: two pages of 50
    few = [queries(URL), queries(URL + "?queue=2")]
    tenants(60, 2940)
    many = [queries(URL), queries(URL + "?queue=2"), queries(URL + "?queue=40")]
    assert many == [few[0], few[1], few[1]], (few, many)
    assert few[1] == few[0] + 1  # the turns past the first page: one statement
    page = operator_client.get(URL).content.decode()
    # acme's own slots free first: at 0 in use again its oldest run comes before the new keys'.
    assert [run for _, run, _ in _queue(page)][:6] == ["g-1", "i-1", "n-1", "a-4", "t-0", "t-1"]


def test_the_run_page_gives_a_runs_place_in_the_order_the_queue_is_served(db, operator_client) -> None:
    """acme holds all four slots and waits with two more; globex waits with one, then this run
    without a key: it is second in the order of service (fourth by arrival), waiting its turn."""
    from tests.views.test_run_page_eta import waiting_run

    declare(tenant_jobs={"capacity": 4, "max_hold": "45m", "share": "fair"})
    for n in range(4):
        services.acquire("tenant-jobs", run_id=f"a-{n}", key="acme")
    for run_id, key in [("a-4", "acme"), ("a-5", "acme"), ("g-1", "globex")]:
        services.acquire("tenant-jobs", run_id=run_id, key=key, timeout="1h")
    run = waiting_run(["tenant-jobs"])
    page = operator_client.get(f"/studio/runs/{run.id}/").content.decode()
    place = _text(re.search(r'<dd class="place">(.*?)</dd>', page, re.S)[1])
    assert place == "2nd of 4 in the order the queue is served (fair shares between keys: keys take turns)"
    assert _text(re.search(r'<dd class="reason"[^>]*>(.*?)</dd>', page, re.S)[1]) == TURN
