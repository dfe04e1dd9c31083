"""SPEC 9.4, 9.5, 10 and 6.4 on the Studio Limits screen: a limit's keys (busy/pool, waiting, own
pool; busiest first; a filter; pages), each slot's and waiting run's key and the other limits of
its acquisition, the pool size per key in the edit panel and a key's own pool on its row."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.models import AuditEvent, Limit, LimitKey, Slot
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db

URL = "/studio/limits/partner-api/"


@pytest.fixture
def keyed_limit(clock) -> Limit:
    """partner-api, capacity 6, a pool of 2 per key: acme holds 2 (its pool is full) and a third
    acme run waits; globex holds 1; one run without a key holds 1."""
    declare(partner_api={"capacity": 6, "max_hold": "10m", "per_key": 2})
    for run_id, key in [("a-1", "acme"), ("a-2", "acme"), ("g-1", "globex"), ("n-1", None), ("a-3", "acme")]:
        services.acquire("partner-api", run_id=run_id, key=key, label=f"call {run_id}")
        clock.advance(seconds=1)
    return Limit.objects.get(name="partner-api")


def _page(client: Client, url: str = URL, **headers: str) -> str:
    response = client.get(url, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _key_rows(page: str) -> list[str]:
    table = re.search(r'<table class="grid keys">(.*?)</table>', page, re.S)
    assert table is not None, "no keys table"
    return [_text(row) for row in re.findall(r"<tr id=\"key-[^\"]*\".*?</tr>", table[1], re.S)]


def _keys_in(page: str) -> list[str]:
    return [row.split(" ")[0] for row in _key_rows(page)]


def _table_rows(page: str, table_class: str) -> list[str]:
    table = re.search(rf'<table class="grid {table_class}">(.*?)</table>', page, re.S)
    assert table is not None, f"no {table_class} table"
    return re.findall(r"<tr id=\"[^\"]*\".*?</tr>", table[1], re.S)


def _snapshot(name: str = "partner-api") -> tuple[object, ...]:
    limit = Limit.objects.get(name=name)
    return (
        limit.capacity_override,
        limit.per_key_override,
        tuple(LimitKey.objects.filter(limit=limit).order_by("key").values_list("key", "pool_override")),
        tuple(holders(name)),
        tuple(queue(name)),
        AuditEvent.objects.filter(limit=limit).count(),
    )


# --- the Keys panel ------------------------------------------------------------------------------


def test_the_keys_panel_shows_each_pool_busiest_first_with_the_no_key_pool_on_top(keyed_limit, operator_client) -> None:
    page = _page(operator_client)
    rows = _key_rows(page)
    assert rows[0].startswith("(no key) 1 / 2 0")  # in use / pool, waiting
    assert rows[1].startswith("acme 2 / 2 1")
    assert rows[2].startswith("globex 1 / 2 0")
    assert len(rows) == 3
    assert re.search(r'<h2 id="keys-title">Keys <span class="count">2</span>', page)
    assert 'class="pool-use full"><b>2</b> / 2' in page  # acme's pool is full
    assert 'id="figure-per-key">2<' in page


def test_the_no_key_pool_is_the_limit_counters_minus_the_keyed_ones(keyed_limit, operator_client) -> None:
    services.acquire("partner-api", run_id="n-2")
    services.acquire("partner-api", run_id="n-3")  # the no-key pool (2) is full: it waits
    keyed_limit.refresh_from_db()
    busy = keyed_limit.busy_count - keyed_limit.keyed_busy_count
    waiting = keyed_limit.waiting_count - keyed_limit.keyed_waiting_count
    assert (busy, waiting) == (2, 1)
    assert _key_rows(_page(operator_client))[0].startswith("(no key) 2 / 2 1")


def test_a_reserved_slot_counts_in_its_key_pool_and_says_so(keyed_limit, operator_client) -> None:
    services.release(Slot.objects.get(run_id="a-1").id)  # a-3 (acme) gets a reservation
    row = _key_rows(_page(operator_client))[1]
    assert row.startswith("acme 2 / 2 (1 reserved) 0")


def test_the_busiest_key_comes_first_and_ties_go_by_key(db, operator_client) -> None:
    declare(partner_api={"capacity": 20, "max_hold": "10m"})
    for key, count in [("m", 1), ("z", 3), ("b", 1), ("a", 2)]:
        for i in range(count):
            services.acquire("partner-api", run_id=f"{key}-{i}", key=key)
    assert _keys_in(_page(operator_client)) == ["z", "a", "b", "m"]


def test_a_limit_without_per_key_shows_its_keys_with_no_pool_and_no_no_key_row(db, operator_client) -> None:
    declare(partner_api={"capacity": 3, "max_hold": "10m"})
    services.acquire("partner-api", run_id="a-1", key="acme")
    services.acquire("partner-api", run_id="n-1")
    page = _page(operator_client)
    assert _key_rows(page) == [_key_rows(page)[0]] and _key_rows(page)[0].startswith("acme 1 / — 0")
    assert "(no key)" not in page
    assert "only the total (3) applies" in page
    assert 'id="figure-per-key"' not in page


def test_a_limit_nobody_used_a_key_on_has_no_keys_panel(busy_limit, operator_client) -> None:
    page = _page(operator_client, "/studio/limits/voice-calls/")
    assert 'id="keys"' not in page


def test_a_limit_with_per_key_but_no_keys_yet_shows_the_no_key_pool(db, operator_client) -> None:
    declare(partner_api={"capacity": 3, "max_hold": "10m", "per_key": 1})
    page = _page(operator_client)
    assert _key_rows(page)[0].startswith("(no key) 0 / 1 0")
    assert re.search(r'<h2 id="keys-title">Keys <span class="count">0</span>', page)


def test_keys_are_shown_as_printable_text(db, operator_client) -> None:
    declare(partner_api={"capacity": 3, "max_hold": "10m"})
    services.acquire("partner-api", run_id="r-1", key="\u202eevil")
    page = _page(operator_client)
    assert "\\u202eevil" in page
    # Only the form sends the key back as it is; nothing shows it raw.
    assert "\u202e" not in re.sub(r'<input type="hidden" name="key" value="\u202eevil">', "", page)


# --- the filter ----------------------------------------------------------------------------------


def test_the_filter_keeps_the_keys_containing_it_in_any_case(keyed_limit, operator_client) -> None:
    page = _page(operator_client, URL + "?key_filter=GLO")
    assert _keys_in(page) == ["globex"]
    assert "(no key)" not in _key_rows(page)[0]
    assert 'name="key_filter" value="GLO"' in page
    # The poll keeps the filter; so do the pagers and every form of the region.
    assert 'hx-get="/studio/limits/partner-api/?slots=1&amp;queue=1&amp;key_filter=GLO"' in page
    assert '<input type="hidden" name="key_filter" value="GLO">' in page


def test_a_filter_that_matches_no_key_says_so(keyed_limit, operator_client) -> None:
    page = _page(operator_client, URL + "?key_filter=initech")
    assert "No key contains “initech”." in page
    assert '<table class="grid keys">' not in page


def test_the_filter_takes_percent_and_underscore_literally(db, operator_client) -> None:
    declare(partner_api={"capacity": 5, "max_hold": "10m"})
    for key in ["50%_off", "500-off", "a_b"]:
        services.acquire("partner-api", run_id=f"r-{key}", key=key)
    assert _keys_in(_page(operator_client, URL + "?key_filter=%25_")) == ["50%_off"]
    assert _keys_in(_page(operator_client, URL + "?key_filter=_")) == ["50%_off", "a_b"]


def test_an_htmx_filter_gets_the_live_region_with_the_field_kept_as_typed(keyed_limit, operator_client, htmx) -> None:
    body = _page(operator_client, URL + "?key_filter=acme&slots=1&queue=1", **htmx)
    assert body.lstrip().startswith('<div id="live"')
    assert _keys_in(body) == ["acme"]
    # hx-preserve: a refresh never replaces what the operator is typing in the filter.
    assert re.search(r'<input id="key-filter" hx-preserve type="search" name="key_filter" value="acme"', body)


@pytest.mark.parametrize("value", ["x" * 500, "\x7f", "tab\there"])
def test_an_odd_filter_is_no_error(keyed_limit, operator_client, value: str) -> None:
    assert operator_client.get(URL, {"key_filter": value}).status_code == 200


# --- pages of keys -------------------------------------------------------------------------------


def _many_keys(limit: Limit, count: int) -> list[str]:
    """Key rows straight into the table with their counters (as the engine keeps them); busiest
    first is k-000 (count busy) down to k-<count-1> (1 busy)."""
    keys = [f"k-{n:03}" for n in range(count)]
    LimitKey.objects.bulk_create(
        LimitKey(limit=limit, key=key, busy_count=count - n, waiting_count=n % 3) for n, key in enumerate(keys)
    )
    return keys


def test_keys_come_25_a_page_with_a_pager_that_keeps_the_other_lists(db, operator_client) -> None:
    limit = declare(partner_api={"capacity": 100_000, "max_hold": "10m"})["partner-api"]
    keys = _many_keys(limit, 60)
    first = _page(operator_client)
    assert _keys_in(first) == keys[:25]
    assert "1–25 of 60 · page 1 of 3" in first
    assert 'href="/studio/limits/partner-api/?slots=1&amp;queue=1&amp;keys=2"' in first
    last = _page(operator_client, URL + "?keys=3&slots=1&queue=1")
    assert _keys_in(last) == keys[50:]
    assert "51–60 of 60 · page 3 of 3" in last
    assert 'hx-get="/studio/limits/partner-api/?slots=1&amp;queue=1&amp;keys=3"' in last  # the poll stays there
    assert _keys_in(_page(operator_client, URL + "?keys=99")) == keys[50:]  # clamped
    assert _keys_in(_page(operator_client, URL + "?keys=x")) == keys[:25]


def test_the_no_key_row_is_only_on_the_first_page_of_an_unfiltered_list(db, operator_client) -> None:
    limit = declare(partner_api={"capacity": 100_000, "max_hold": "10m", "per_key": 5})["partner-api"]
    _many_keys(limit, 30)
    assert "(no key)" in _page(operator_client)
    assert "(no key)" not in _page(operator_client, URL + "?keys=2")


def test_a_filtered_list_pages_through_the_matching_keys(db, operator_client) -> None:
    limit = declare(partner_api={"capacity": 100_000, "max_hold": "10m"})["partner-api"]
    keys = _many_keys(limit, 200)
    matching = [key for key in keys if "1" in key]  # k-001, k-010..k-019, k-021, ..., k-100..k-199
    page = _page(operator_client, URL + "?key_filter=1&keys=2")
    assert _keys_in(page) == matching[25:50]
    assert f"26–50 of {len(matching)} · page 2 of 5" in page
    assert 'href="/studio/limits/partner-api/?slots=1&amp;queue=1&amp;keys=3&amp;key_filter=1"' in page


def _queries(client: Client, url: str, **headers: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, headers=headers).status_code == 200
    return [query["sql"] for query in captured.captured_queries]


def test_a_page_of_keys_costs_the_same_queries_with_30_keys_or_3000(db, operator_client) -> None:
    """The keys panel reads the LimitKey rows (a count of them and one page); never the slots or
    the queue, whatever the number of keys."""
    spec = {"capacity": 100_000, "max_hold": "10m", "per_key": 5}
    limits = declare(small=spec, big=spec)
    small, big = limits["small"], limits["big"]
    _many_keys(small, 30)
    _many_keys(big, 3000)
    counts = []
    for url in ["/studio/limits/small/?keys=2", "/studio/limits/big/?keys=2", "/studio/limits/big/?keys=100"]:
        sql = _queries(operator_client, url)
        counts.append(len(sql))
        key_queries = [q for q in sql if "limits_limitkey" in q]
        assert len(key_queries) == 2  # the count and the page
        assert not [q for q in key_queries if "limits_slot" in q or "limits_queueentry" in q]
    assert counts == [counts[0]] * 3, counts
    htmx = len(_queries(operator_client, "/studio/limits/big/?keys=50", **{"HX-Request": "true"}))
    assert htmx <= counts[0]


def test_the_first_page_of_a_few_keys_is_one_read(keyed_limit, operator_client) -> None:
    """One read for the keys panel, and one for the pools of the keys the queue page's runs wait
    with (their reason, SPEC 6.5: read only while the limit has room), whatever their number."""
    sql = _queries(operator_client, URL)
    key_reads = [q for q in sql if "limits_limitkey" in q]
    assert len(key_reads) == 2 and '"limits_limitkey"."key" IN' in key_reads[1], key_reads
    assert not [q for q in sql if "COUNT(" in q.upper()]


# --- keys in the slots and queue tables ----------------------------------------------------------


def test_each_slot_and_waiting_run_shows_its_key(keyed_limit, operator_client) -> None:
    page = _page(operator_client)
    slots = {re.search(r'class="run"[^>]*>([^<]+)<', row)[1]: _text(row) for row in _table_rows(page, "slots")}
    assert "acme" in slots["a-1"] and "globex" in slots["g-1"]
    assert re.search(r'<td [^>]*class="key-cell"><span class="muted">—</span>', page)  # n-1 has no key
    waiting = _table_rows(page, "queue")
    assert len(waiting) == 1 and "a-3" in waiting[0] and "acme" in _text(waiting[0])
    assert '<td data-label="Why" class="cell-why" data-reason="key_pool_full">Its key&#x27;s pool is full</td>' in page


# --- several limits in one acquisition ----------------------------------------------------------


@pytest.fixture
def groups(db, clock) -> None:
    """voice-calls (1) is held by solo; call-1 takes partner-api + voice-calls + fax together and
    waits; call-0 holds partner-api + fax."""
    declare(
        voice_calls={"capacity": 1, "max_hold": "45m"},
        partner_api={"capacity": 5, "max_hold": "10m"},
        fax={"capacity": 5, "max_hold": "10m"},
    )
    services.acquire("voice-calls", run_id="solo")
    services.acquire_group(["partner-api", "fax"], run_id="call-0", label="held together")
    clock.advance(seconds=1)
    services.acquire_group(["partner-api", "voice-calls", "fax"], run_id="call-1", key="acme")


def test_a_slot_of_a_group_names_the_other_limits_it_was_taken_with(groups, operator_client) -> None:
    page = _page(operator_client)
    (row,) = [row for row in _table_rows(page, "slots") if "call-0" in row]
    note = '<span class="group-note" title="Acquired together, all or nothing">'
    assert note + 'with <a href="/studio/limits/fax/">fax</a></span>' in row
    fax = _page(operator_client, "/studio/limits/fax/")
    (row,) = [row for row in _table_rows(fax, "slots") if "call-0" in row]
    assert "with partner-api" in _text(row)
    voice = _page(operator_client, "/studio/limits/voice-calls/")
    assert "group-note" not in _table_rows(voice, "slots")[0]  # solo took one limit


def test_a_waiting_run_of_a_group_names_the_other_limits_it_waits_for(groups, operator_client) -> None:
    page = _page(operator_client, "/studio/limits/voice-calls/")
    (row,) = _table_rows(page, "queue")
    assert "call-1" in row and "with fax + partner-api" in _text(row)
    assert "acme" in _text(row)


def test_group_partners_cost_one_query_for_the_whole_page(db, operator_client, clock) -> None:
    declare(partner_api={"capacity": 100, "max_hold": "10m"}, fax={"capacity": 100, "max_hold": "10m"})

    def count() -> int:
        return len(_queries(operator_client, "/studio/limits/partner-api/"))

    services.acquire_group(["partner-api", "fax"], run_id="g-0")
    one = count()
    for i in range(1, 40):
        services.acquire_group(["partner-api", "fax"], run_id=f"g-{i}")
    assert count() == one
    page = _page(operator_client)
    assert page.count('with <a href="/studio/limits/fax/">fax</a>') == 40


# --- held capacity (SPEC 10.4) -------------------------------------------------------------------


def test_capacity_held_for_an_owed_run_is_shown(db, operator_client, clock) -> None:
    """partner-api has room but voice-calls does not: call-g waits for both. A younger run takes
    partner-api (call-g is passed over); two minutes on, call-g is owed, and partner-api holds
    its free capacity for it."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"}, partner_api={"capacity": 3, "max_hold": "45m"})
    services.acquire("voice-calls", run_id="solo")
    services.acquire_group(["partner-api", "voice-calls"], run_id="call-g")
    clock.advance(seconds=1)
    services.acquire("partner-api", run_id="younger")
    assert 'id="figure-held"' not in _page(operator_client)
    clock.advance(minutes=3)
    services.sweep()
    page = _page(operator_client)
    held = re.search(r'id="figure-held">(\d+)<', page)
    assert held is not None, "no held figure"
    assert int(held[1]) == Limit.objects.get(name="partner-api").free


# --- the pool size per key (edit panel) ----------------------------------------------------------


def _panel(body: str) -> str:
    return re.search(r'<section id="edit-panel".*?</section>', body, re.S)[0]


def test_the_edit_panel_shows_the_pool_size_per_key_with_its_declared_value(keyed_limit, operator_client) -> None:
    panel = _panel(_page(operator_client))
    assert 'name="per_key" value="2"' in panel
    assert "Declared <b>2</b>" in panel
    assert re.search(r"disabled[^>]*>Reset to declared \(2\)", panel)


def test_setting_the_pool_size_per_key_grants_waiting_runs_and_tells_the_page(
    keyed_limit, operator_client, htmx
) -> None:
    response = operator_client.post(URL + "per-key/", {"per_key": "3"}, headers=htmx)
    assert response.status_code == 200
    assert json.loads(response["HX-Trigger"]) == {"limit-changed": {}}
    body = response.content.decode()
    assert "Each key&#x27;s pool is now 3 (declared 2)." in body
    assert 'name="per_key" value="3"' in body and '<span class="badge override">overridden</span>' in body
    assert ("a-3", "reserved") in holders("partner-api")  # acme's third run got a slot
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.key, event.old_value, event.new_value) == ("user:ada", "", "2", "3")
    assert_counters_match_rows("partner-api")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "Pool size must be at least 1, not 0"),
        ("7", "Pool size must be at most capacity (6)"),
        ("abc", "Pool size must be a whole number from 1 to capacity (6), not &#x27;abc&#x27;"),
        ("-1", "Pool size must be at least 1, not -1"),
        ("2.5", "Pool size must be a whole number from 1 to capacity (6), not &#x27;2.5&#x27;"),
        ("1" * 26, "Pool size must be at most capacity (6)"),  # no maxlength cuts it first
        ("", "Enter a pool size per key"),
    ],
)
def test_a_bad_pool_size_per_key_is_rejected_next_to_the_field_and_changes_nothing(
    keyed_limit, operator_client, htmx, value: str, message: str
) -> None:
    before = _snapshot()
    response = operator_client.post(URL + "per-key/", {"per_key": value}, headers=htmx)
    assert response.status_code == 422
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="edit-panel"')
    field = re.search(r'<input type="text" name="per_key".*?</ul>', body, re.S)[0]
    assert 'aria-invalid="true"' in field and message in field
    assert "HX-Trigger" not in response
    assert _snapshot() == before


def test_resetting_the_pool_size_per_key_goes_back_to_the_declared_value(keyed_limit, operator_client, htmx) -> None:
    services.set_per_key("partner-api", 1, actor="user:ada")
    response = operator_client.post(URL + "reset/", {"field": "per_key"}, headers=htmx)
    assert response.status_code == 200 and json.loads(response["HX-Trigger"]) == {"limit-changed": {}}
    assert "Pool size per key reset to the declared 2." in response.content.decode()
    keyed_limit.refresh_from_db()
    assert keyed_limit.per_key_override is None


def test_a_pool_size_per_key_can_be_set_on_a_limit_that_declares_none(busy_limit, operator_client, htmx) -> None:
    response = operator_client.post("/studio/limits/voice-calls/per-key/", {"per_key": "1"}, headers=htmx)
    assert "Each key&#x27;s pool is now 1 (none declared)." in response.content.decode()
    reset = operator_client.post("/studio/limits/voice-calls/reset/", {"field": "per_key"}, headers=htmx)
    assert "none is declared, so only the total (2) applies" in reset.content.decode()
    assert Limit.objects.get(name="voice-calls").per_key is None


def test_a_bad_pool_size_per_key_without_htmx_shows_the_whole_page(keyed_limit, operator_client) -> None:
    response = operator_client.post(URL + "per-key/", {"per_key": "0"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "<html" in body and "at least 1, not 0" in body and 'id="keys"' in body


# --- a key's own pool (its row) ------------------------------------------------------------------


def _row(body: str, key: str) -> str:
    (row,) = [row for row in re.findall(r"<tr id=\"key-[^\"]*\".*?</tr>", body, re.S) if f">{key}<" in row]
    return row


def test_each_key_row_has_a_pool_form_that_keeps_the_page(keyed_limit, operator_client) -> None:
    row = _row(_page(operator_client, URL + "?key_filter=acm"), "acme")
    assert 'hx-post="/studio/limits/partner-api/key-pool/"' in row and 'hx-target="#live"' in row
    assert '<input type="hidden" name="key" value="acme">' in row
    assert '<input type="hidden" name="key_filter" value="acm">' in row
    assert re.search(r'name="pool" value="" placeholder="2"', row)
    assert "key-pool/reset/" not in row  # nothing to reset yet


def test_raising_a_key_pool_grants_its_waiting_run_at_once(keyed_limit, operator_client, htmx) -> None:
    response = operator_client.post(
        URL + "key-pool/", {"key": "acme", "pool": "3", "slots": "1", "queue": "1"}, headers=htmx
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="live"') and 'hx-swap-oob="true"' in body
    assert "The pool of key “acme” is now 3." in body
    row = _row(body, "acme")
    assert "own pool · per key 2" in row and 'name="pool" value="3"' in row
    assert "<b>3</b> / 3" in row  # a-3 was granted (reserved)
    assert ("a-3", "reserved") in holders("partner-api") and queue("partner-api") == []
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.key, event.old_value, event.new_value) == ("user:ada", "acme", "2", "3")
    assert_counters_match_rows("partner-api")


def test_a_key_never_seen_can_be_given_a_pool(keyed_limit, operator_client, htmx) -> None:
    operator_client.post(URL + "key-pool/", {"key": "initech", "pool": "1"}, headers=htmx)
    assert LimitKey.objects.get(limit=keyed_limit, key="initech").pool_override == 1


def test_resetting_a_key_pool_goes_back_to_the_pool_size_per_key(keyed_limit, operator_client, htmx) -> None:
    services.set_per_key("partner-api", 1, key="acme", actor="user:ada")
    row = _row(_page(operator_client), "acme")
    assert 'hx-post="/studio/limits/partner-api/key-pool/reset/"' in row
    assert 'hx-confirm="Reset the pool of key acme to the pool size per key (2)?"' in row
    response = operator_client.post(URL + "key-pool/reset/", {"key": "acme"}, headers=htmx)
    assert response.status_code == 200
    assert "The pool of key “acme” is back to the pool size per key (2)." in response.content.decode()
    assert LimitKey.objects.get(limit=keyed_limit, key="acme").pool_override is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "Pool size must be at least 1, not 0"),
        ("99", "Pool size must be at most capacity (6)"),
        ("lots", "Pool size must be a whole number from 1 to capacity (6), not &#x27;lots&#x27;"),
        ("-3", "Pool size must be at least 1, not -3"),
        ("", "Enter a pool size for this key"),
    ],
)
def test_a_bad_key_pool_is_rejected_next_to_its_field_and_changes_nothing(
    keyed_limit, operator_client, htmx, value: str, message: str
) -> None:
    before = _snapshot()
    response = operator_client.post(URL + "key-pool/", {"key": "acme", "pool": value}, headers=htmx)
    assert response.status_code == 422
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="live"')
    row = _row(body, "acme")
    field = re.search(r'<input type="text" id="(key-[0-9a-f]+)-pool" name="pool".*?</ul>', row, re.S)
    assert field is not None
    assert 'aria-invalid="true"' in field[0] and "autofocus" in field[0]
    assert f'aria-describedby="{field[1]}-error"' in field[0] and message in field[0]
    assert 'name="pool" value="' + value.replace("'", "&#x27;") + '"' in field[0]
    assert "aria-invalid" not in _row(body, "globex")
    assert _snapshot() == before


def test_a_bad_pool_for_a_key_not_on_the_page_is_said_in_the_notice(keyed_limit, operator_client, htmx) -> None:
    body = operator_client.post(URL + "key-pool/", {"key": "initech", "pool": "0"}, headers=htmx).content.decode()
    assert "Key “initech”: Pool size must be at least 1, not 0" in body
    assert not LimitKey.objects.filter(key="initech").exists()


@pytest.mark.parametrize(
    "data", [{"pool": "3"}, {"key": "", "pool": "3"}, {"key": "k" * 129, "pool": "3"}, {"key": "a\x01b", "pool": "3"}]
)
def test_a_key_pool_without_a_proper_key_is_a_bad_request(keyed_limit, operator_client, htmx, data) -> None:
    before = _snapshot()
    assert operator_client.post(URL + "key-pool/", data, headers=htmx).status_code == 400
    assert operator_client.post(URL + "key-pool/reset/", data, headers=htmx).status_code == 400
    assert _snapshot() == before


def test_a_key_pool_without_htmx_redirects_back_to_the_same_place(keyed_limit, operator_client) -> None:
    response = operator_client.post(
        URL + "key-pool/", {"key": "acme", "pool": "3", "slots": "1", "queue": "1", "key_filter": "ac"}, follow=True
    )
    assert response.redirect_chain == [("/studio/limits/partner-api/?slots=1&queue=1&key_filter=ac", 302)]
    assert "The pool of key “acme” is now 3." in response.content.decode()
    bad = operator_client.post(URL + "key-pool/", {"key": "acme", "pool": "0"})
    assert bad.status_code == 422 and "<html" in bad.content.decode() and 'id="edit-panel"' in bad.content.decode()


# --- who may change them -------------------------------------------------------------------------


def test_a_viewer_sees_the_keys_but_no_forms(keyed_limit, viewer_client) -> None:
    services.set_per_key("partner-api", 1, key="globex", actor="user:ada")
    page = _page(viewer_client)
    assert _keys_in(page) == ["(no", "acme", "globex"]
    assert "key-pool/" not in page and "per-key/" not in page
    assert "own pool · per key 2" in _row(page, "globex")
    assert "<dt>Per key</dt><dd>2" in page


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("per-key/", {"per_key": "3"}),
        ("reset/", {"field": "per_key"}),
        ("key-pool/", {"key": "acme", "pool": "3"}),
        ("key-pool/reset/", {"key": "acme"}),
    ],
)
def test_changing_pools_needs_the_operate_permission(keyed_limit, viewer_client, htmx, path: str, data) -> None:
    before = _snapshot()
    response = viewer_client.post(URL + path, data, headers=htmx)
    assert response.status_code == 403
    assert "limits.operate_limit" in response.content.decode()
    assert _snapshot() == before


@pytest.mark.parametrize("path", ["per-key/", "key-pool/", "key-pool/reset/"])
def test_pool_changes_reject_get(keyed_limit, operator_client, path: str) -> None:
    assert operator_client.get(URL + path).status_code == 405


def test_pool_changes_need_the_csrf_token(keyed_limit, operator) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    before = _snapshot()
    assert client.post(URL + "key-pool/", {"key": "acme", "pool": "3"}).status_code == 403
    page = client.get(URL).content.decode()
    token = re.search(r'"x-csrftoken": "([^"]+)"', page)[1]
    assert (
        client.post(URL + "key-pool/", {"key": "acme", "pool": "3"}, headers={"X-CSRFToken": token}).status_code == 302
    )
    assert _snapshot() != before


# --- the list ------------------------------------------------------------------------------------


def _list_row(client: Client, name: str) -> str:
    return re.search(rf'<tr id="limit-{name}">.*?</tr>', _page(client, "/studio/limits/"), re.S)[0]


def test_the_list_shows_the_pool_size_per_key_and_marks_an_override(keyed_limit, operator_client) -> None:
    declare(partner_api={"capacity": 6, "max_hold": "10m", "per_key": 2}, voice_calls={"capacity": 2, "max_hold": "1m"})
    row = _list_row(operator_client, "partner-api")
    assert re.search(r'<td data-label="Per key" class="per-key-cell">\s*2\s*</td>', row)
    assert re.search(
        r'<td data-label="Per key" class="per-key-cell">\s*<span class="muted"[^>]*>—</span>',
        _list_row(operator_client, "voice-calls"),
    )
    services.set_per_key("partner-api", 3, actor="user:ada")
    services.set_per_key("voice-calls", 1, actor="user:ada")
    assert "override · declared 2<" in _list_row(operator_client, "partner-api")
    assert "override · declared none<" in _list_row(operator_client, "voice-calls")


def test_the_list_still_costs_the_same_queries(keyed_limit, operator_client) -> None:
    few = len(_queries(operator_client, "/studio/limits/"))
    declare(**{f"l_{n}": {"capacity": 5, "max_hold": "1m", "per_key": 2} for n in range(30)})
    assert len(_queries(operator_client, "/studio/limits/")) == few


def test_the_activity_says_whose_pool_changed(keyed_limit, operator_client, clock) -> None:
    services.set_per_key("partner-api", 3, actor="user:ada")
    clock.advance(seconds=5)
    services.set_per_key("partner-api", 1, key="globex", actor="user:bob")
    activity = re.search(r'<ol class="activity">(.*?)</ol>', _page(operator_client), re.S)[1]
    lines = [_text(line) for line in re.findall(r"<li.*?</li>", activity, re.S)]
    assert lines[0].endswith("bob changed the pool size of key globex from 3 to 1")
    assert lines[1].endswith("ada changed the pool size per key from 2 to 3")
