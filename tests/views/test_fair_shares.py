"""SPEC 13.5 on the Studio Limits screen (issue 28): on a fair limit the Keys panel shows each
key's in use, pool, weight, min, fair share and waiting; a key's weight and min are set on its
row (errors by the field, nothing changed); the edit panel switches fifo/fair and resets it; the
list marks a fair limit. The weights are summed in one aggregate query, whatever the keys."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.models import AuditEvent, Limit, LimitKey
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
    assert re.search(r">Weight</th>.*?>Min</th>.*?>Fair share</th>.*?>Waiting</th>", page, re.S)
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
    assert ">Fair share</th>" not in page and "key-weight/" not in page


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
    assert ">Fair share</th>" not in operator_client.get(URL).content.decode()
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
