"""SPEC 6.1 and 6.2: the list of limits and a limit's page, full and as htmx fragments."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.config import define_workspace
from limits.models import Limit, QueueEntry, Slot
from stackbone.models import Run
from tests.factories import declare

pytestmark = pytest.mark.django_db

# Polls every 3 s; studio.js skips the request while the tab is hidden (data-poll-while-visible):
# an hx-trigger filter would need eval, which the Content-Security-Policy forbids.
POLLING = 'data-poll-while-visible\n     hx-trigger="every 3s, visibilitychange from:document'


def _rows(page: str, table_class: str) -> list[str]:
    table = re.search(rf'<table class="grid {table_class}">(.*?)</table>', page, re.S)
    assert table is not None, f"no {table_class} table"
    return re.findall(r"<tr id=\"[^\"]*\".*?</tr>", table[1], re.S)


# --- the list -----------------------------------------------------------------------------------


def test_the_list_shows_every_limit_with_its_figures(busy_limit, operator_client) -> None:
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, partner_api={"capacity": 5, "max_hold": "10m"})
    page = operator_client.get("/studio/limits/").content.decode()
    row = re.search(r'<tr id="limit-voice-calls">.*?</tr>', page, re.S)[0]
    assert "<b>2</b> / 2" in row  # busy+reserved / capacity
    assert 'class="num waiting">3<' in row
    assert "45m" in row
    assert 'href="/studio/limits/voice-calls/"' in row
    assert 'class="bar full"' in row
    partner = re.search(r'<tr id="limit-partner-api">.*?</tr>', page, re.S)[0]
    assert "<b>0</b> / 5" in partner and "10m" in partner
    assert "override" not in partner


def test_the_list_counts_reserved_slots_as_in_use_and_shows_them(busy_limit, operator_client) -> None:
    services.release(Slot.objects.filter(state="busy").order_by("granted_at").first().id)
    row = re.search(
        r'<tr id="limit-voice-calls">.*?</tr>', operator_client.get("/studio/limits/").content.decode(), re.S
    )[0]
    assert "<b>2</b> / 2" in row
    assert re.search(r'<td data-label="Reserved" class="num">1</td>', row), "one reserved"


def test_the_list_marks_overrides_with_the_declared_value(busy_limit, operator_client) -> None:
    services.set_capacity("voice-calls", 9, actor="user:ada")
    services.set_max_hold("voice-calls", "2h", actor="user:ada")
    row = re.search(
        r'<tr id="limit-voice-calls">.*?</tr>', operator_client.get("/studio/limits/").content.decode(), re.S
    )[0]
    assert "/ 9" in row
    assert "override · declared 2<" in row
    assert "2h" in row and "override · declared 45m" in row


def test_undeclared_limits_are_shown_apart(busy_limit, operator_client) -> None:
    services.sync_workspace(define_workspace(limits={"partner-api": {"capacity": 5, "max_hold": "10m"}}))
    page = operator_client.get("/studio/limits/").content.decode()
    declared, undeclared = page.split("No longer declared")
    assert "limit-partner-api" in declared and "limit-voice-calls" not in declared
    assert "limit-voice-calls" in undeclared


def test_the_list_polls_only_while_the_tab_is_visible(busy_limit, operator_client) -> None:
    page = operator_client.get("/studio/limits/").content.decode()
    assert 'hx-get="/studio/limits/"' in page
    assert POLLING in page


def test_an_htmx_poll_of_the_list_gets_only_the_table(busy_limit, operator_client, htmx) -> None:
    response = operator_client.get("/studio/limits/", headers=htmx)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="limits-table"')
    assert "<html" not in body and "limit-voice-calls" in body
    assert "HX-Request" in response["Vary"]


def _names(page: str) -> list[str]:
    return re.findall(r'<tr id="limit-([^"]+)">', page)


def test_the_list_shows_100_limits_a_page_in_name_order_with_a_pager(db, operator_client) -> None:
    Limit.objects.all().delete()  # the test workspace's own
    names = [f"api-{n:03}" for n in range(250)]
    services.sync_workspace(define_workspace(limits={name: {"capacity": 1, "max_hold": "1h"} for name in names}))
    first = operator_client.get("/studio/limits/").content.decode()
    assert _names(first) == names[:100]
    assert "1–100 of 250 · page 1 of 3" in first
    assert 'href="/studio/limits/?page=2"' in first and "‹ Previous" not in first
    assert 'hx-get="/studio/limits/?page=1"' in first  # the poll refreshes the page on screen
    last = operator_client.get("/studio/limits/?page=3").content.decode()
    assert _names(last) == names[200:]
    assert "201–250 of 250 · page 3 of 3" in last and "Next ›" not in last
    assert _names(operator_client.get("/studio/limits/?page=99").content.decode()) == names[200:]  # clamped
    assert _names(operator_client.get("/studio/limits/?page=x").content.decode()) == names[:100]


def test_an_htmx_poll_keeps_its_page(db, operator_client, htmx) -> None:
    Limit.objects.all().delete()  # the test workspace's own
    names = [f"api-{n:03}" for n in range(150)]
    services.sync_workspace(define_workspace(limits={name: {"capacity": 1, "max_hold": "1h"} for name in names}))
    body = operator_client.get("/studio/limits/?page=2", headers=htmx).content.decode()
    assert body.lstrip().startswith('<div id="limits-table"') and 'hx-get="/studio/limits/?page=2"' in body
    assert _names(body) == names[100:]


def test_the_list_costs_the_same_queries_for_5_limits_and_for_500(db, operator_client) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get("/studio/limits/?page=2").status_code == 200
        return len(captured.captured_queries)

    services.sync_workspace(define_workspace(limits={f"a-{n}": {"capacity": 1, "max_hold": "1h"} for n in range(5)}))
    few = queries()
    services.sync_workspace(define_workspace(limits={f"a-{n}": {"capacity": 1, "max_hold": "1h"} for n in range(500)}))
    assert queries() == few


def test_the_list_finds_limits_by_a_part_of_their_name(busy_limit, operator_client) -> None:
    declare(
        voice_calls={"capacity": 2, "max_hold": "45m"},
        partner_api={"capacity": 5, "max_hold": "10m"},
        partner_sftp={"capacity": 1, "max_hold": "10m"},
    )
    page = operator_client.get("/studio/limits/?q=PARTNER").content.decode()
    assert _names(page) == ["partner-api", "partner-sftp"]
    assert 'value="partner"' in page  # the box shows what was searched, as names are written
    assert 'hx-get="/studio/limits/?q=partner&amp;page=1"' in page
    nothing = operator_client.get("/studio/limits/?q=fax").content.decode()
    assert _names(nothing) == [] and "No limit’s name contains “fax”." in nothing
    assert "No limits declared yet" not in nothing


def test_a_search_lists_undeclared_limits_too(busy_limit, operator_client) -> None:
    services.sync_workspace(define_workspace(limits={"partner-api": {"capacity": 5, "max_hold": "10m"}}))
    page = operator_client.get("/studio/limits/?q=voice").content.decode()
    assert "No longer declared" in page and _names(page) == ["voice-calls"]
    assert "No limit’s name contains" not in page


def test_an_empty_box_says_how_to_declare_limits(db, operator_client) -> None:
    Limit.objects.all().delete()
    assert "No limits declared yet" in operator_client.get("/studio/limits/").content.decode()


def test_htmx_comes_from_this_box_not_a_cdn(busy_limit, operator_client) -> None:
    page = operator_client.get("/studio/limits/").content.decode()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    assert any("django_htmx/htmx-2" in src for src in scripts)
    assert all(src.startswith("/static/") for src in scripts)
    assert "https://" not in page and "http://" not in page


# --- a limit's page -----------------------------------------------------------------------------


def test_the_limit_page_shows_busy_slots_then_reserved_then_the_queue(busy_limit, operator_client, clock) -> None:
    first = Slot.objects.get(run_id="run-0")
    services.release(first.id)  # run-2 gets a reserved slot
    clock.advance(seconds=30)
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    slots = _rows(page, "slots")
    assert [re.search(r'class="run"[^>]*>([^<]+)<', row)[1] for row in slots] == ["run-1", "run-2"]
    assert "badge busy" in slots[0] and "call-1" in slots[0]
    assert "badge reserved" in slots[1] and "confirm within 1m 30s" in slots[1]
    assert 'href="/studio/runs/run-1/"' in slots[0]
    assert "44m 26s" in slots[0]  # time left before expiry: 45m - 34s
    queue = _rows(page, "queue")
    assert [re.search(r'class="run"[^>]*>([^<]+)<', row)[1] for row in queue] == ["run-3", "run-4"]
    assert [re.search(r'class="num position">(\d+)<', row)[1] for row in queue] == ["1", "2"]
    assert "in 23h 59m" in queue[0]
    assert 'id="figure-busy">1<' in page and 'id="figure-reserved">1<' in page
    assert 'id="figure-waiting">2<' in page and 'id="figure-free">0<' in page


def test_a_reserved_slot_says_which_of_its_two_timers_applies(db, operator_client, clock) -> None:
    """Issue 30: "confirm within 1m 49s" and "expires in 9s" side by side said nothing of which
    applies. Until the run confirms, only the confirm deadline does (else the slot lapses to the
    next run); max hold, counted from the reservation, applies once it is confirmed."""
    declare(voice_calls={"capacity": 1, "max_hold": "20s"})
    Run.objects.create(
        id="run-1", workflow="place_call", status="running", created_at=clock.now(), updated_at=clock.now()
    )
    first = services.acquire("voice-calls", run_id="run-0").slot_id
    services.acquire("voice-calls", run_id="run-1", timeout="1h")
    services.release(first)  # run-1 gets the slot reserved
    clock.advance(seconds=11)
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    (row,) = _rows(page, "slots")
    state = re.search(r'class="cell-state">(.*?)</td>', row, re.S)[1]
    expires = re.search(r'class="cell-expires">(.*?)</td>', row, re.S)[1]
    assert "confirm within 1m 49s or it lapses to the next run" in state
    assert ">9s</time>" in expires and "once confirmed" in expires
    assert "max hold applies once the run confirms" in expires  # the cell's title says why
    run_page = operator_client.get("/studio/runs/run-1/").content.decode()
    assert "confirm within 1m 49s or it lapses; once confirmed, expires in 9s" in run_page
    clock.advance(seconds=10)  # past max hold, still within the confirm window
    row = _rows(operator_client.get("/studio/limits/voice-calls/").content.decode(), "slots")[0]
    assert "past max hold" in row and "taken back once confirmed" in row


def test_a_slot_past_its_max_hold_says_so_until_the_sweep_takes_it(busy_limit, operator_client, clock) -> None:
    clock.advance(minutes=46)
    assert "past max hold" in operator_client.get("/studio/limits/voice-calls/").content.decode()


def test_the_activity_lists_audit_events_newest_first(busy_limit, operator_client, clock) -> None:
    services.set_capacity("voice-calls", 3, actor="user:ada")
    clock.advance(seconds=5)
    services.set_max_hold("voice-calls", "10m", actor="user:ada")
    clock.advance(seconds=5)
    services.release(Slot.objects.filter(run_id="run-0").get().id, actor="user:bob")
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    activity = re.search(r'<ol class="activity">(.*?)</ol>', page, re.S)[1]
    lines = [  # the audit events; the grants and frees of the slots are interleaved (slot-event)
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", line)).strip()
        for line in re.findall(r"<li.*?</li>", activity, re.S)
        if "slot-event" not in line.split(">", 1)[0]
    ]
    assert lines[0].endswith("bob released " + Slot.objects.get(run_id="run-0").id + " (was busy)")
    assert lines[1].endswith("ada changed max hold from 45m to 10m")
    assert lines[2].endswith("ada changed capacity from 2 to 3")


def test_the_limit_page_polls_its_live_region_and_listens_for_changes(busy_limit, operator_client) -> None:
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    live = re.search(r'<div id="live"[^>]*>', page, re.S)[0]
    assert POLLING in live and "limit-changed from:body" in live
    assert 'hx-get="/studio/limits/voice-calls/?slots=1&amp;queue=1"' in live


def test_an_htmx_request_gets_only_the_live_region(busy_limit, operator_client, htmx) -> None:
    response = operator_client.get("/studio/limits/voice-calls/", headers=htmx)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="live"')
    assert "edit-panel" not in body and "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_an_unknown_limit_is_a_404(db, operator_client) -> None:
    assert operator_client.get("/studio/limits/nope/").status_code == 404


def test_the_edit_panel_shows_declared_values_and_reset_controls(busy_limit, operator_client) -> None:
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    panel = re.search(r'<section id="edit-panel".*?</section>', page, re.S)[0]
    assert 'name="capacity" value="2"' in panel and 'name="max_hold" value="45m"' in panel
    assert "Declared <b>2</b>" in panel and "Declared <b>45m</b>" in panel
    assert re.search(
        r'<button type="submit" class="button secondary small" disabled[^>]*>Reset to declared \(2\)', panel
    )
    services.set_capacity("voice-calls", 4, actor="user:ada")
    panel = re.search(
        r'<section id="edit-panel".*?</section>',
        operator_client.get("/studio/limits/voice-calls/").content.decode(),
        re.S,
    )[0]
    assert re.search(r'<button type="submit" class="button secondary small" >Reset to declared \(2\)', panel)


# --- pages of a big limit -----------------------------------------------------------------------


def _fill(limit: Limit, *, busy: int, reserved: int, waiting: int, now) -> None:
    """Rows straight into the tables (the services would take minutes for 100,000), with the
    counters set to match, as the services keep them."""
    import datetime as dt

    far = now + dt.timedelta(hours=1)
    Slot.objects.bulk_create(
        Slot(
            limit=limit,
            run_id=f"big-{i}",
            request=f"{limit.name}:big-{i}",
            state="busy",
            granted_at=now + dt.timedelta(microseconds=i),
            confirmed_at=now,
            expires_at=far,
        )
        for i in range(busy)
    )
    entries = QueueEntry.objects.bulk_create(
        QueueEntry(
            limit=limit,
            run_id=f"res-{i}",
            request=f"{limit.name}:res-{i}",
            position=i + 1,
            state="granted",
            enqueued_at=now,
            deadline=far,
            timeout_ms=1,
        )
        for i in range(reserved)
    )
    Slot.objects.bulk_create(
        Slot(
            limit=limit,
            run_id=f"res-{i}",
            request=f"{limit.name}:res-{i}",
            state="reserved",
            queue_entry=entry,
            granted_at=now + dt.timedelta(microseconds=i),
            reserved_until=far,
            expires_at=far,
        )
        for i, entry in enumerate(entries)
    )
    QueueEntry.objects.bulk_create(
        QueueEntry(
            limit=limit,
            run_id=f"wait-{i}",
            request=f"{limit.name}:wait-{i}",
            position=reserved + i + 1,
            enqueued_at=now,
            deadline=far,
            timeout_ms=1,
        )
        for i in range(waiting)
    )
    Limit.objects.filter(id=limit.id).update(
        busy_count=busy,
        reserved_count=reserved,
        waiting_count=waiting,
        next_position=reserved + waiting + 1,
        declared_capacity=min(max(busy + reserved, 1), 100_000),
    )


def test_pages_of_slots_run_busy_then_reserved_across_the_page_boundary(db, operator_client, clock) -> None:
    limit = declare(big={"capacity": 1, "max_hold": "1h"})["big"]
    _fill(limit, busy=60, reserved=45, waiting=120, now=clock.now())
    page2 = operator_client.get("/studio/limits/big/?slots=2&queue=3").content.decode()
    runs = [re.search(r'class="run"[^>]*>([^<]+)<', row)[1] for row in _rows(page2, "slots")]
    assert runs == [f"big-{i}" for i in range(50, 60)] + [f"res-{i}" for i in range(40)]
    assert "51–100 of 105 · page 2 of 3" in page2
    positions = [re.search(r'class="num position">(\d+)<', row)[1] for row in _rows(page2, "queue")]
    assert positions == [str(n) for n in range(101, 121)]
    assert [re.search(r'class="run"[^>]*>([^<]+)<', row)[1] for row in _rows(page2, "queue")][0] == "wait-100"
    # Each pager moves its own list and keeps the other's page.
    assert 'href="/studio/limits/big/?slots=3&amp;queue=3" hx-get="/studio/limits/big/?slots=3&amp;queue=3"' in page2
    assert 'href="/studio/limits/big/?slots=2&amp;queue=2" hx-get="/studio/limits/big/?slots=2&amp;queue=2"' in page2
    last = operator_client.get("/studio/limits/big/?slots=3").content.decode()
    assert [re.search(r'class="run"[^>]*>([^<]+)<', row)[1] for row in _rows(last, "slots")] == [
        f"res-{i}" for i in range(40, 45)
    ]


@pytest.mark.parametrize("number", ["0", "-1", "999", "abc", "99999999999999"])
def test_an_out_of_range_page_shows_the_nearest_one(db, operator_client, clock, number: str) -> None:
    limit = declare(big={"capacity": 1, "max_hold": "1h"})["big"]
    _fill(limit, busy=70, reserved=0, waiting=0, now=clock.now())
    response = operator_client.get(f"/studio/limits/big/?slots={number}")
    assert response.status_code == 200
    assert "of 70 · page" in response.content.decode()


def _fill_at_scale(limit: Limit, *, busy: int, waiting: int, now) -> None:
    """Like _fill, in two INSERT ... SELECT statements (the same SQL on SQLite and PostgreSQL)."""
    import datetime as dt

    granted = connection.ops.adapt_datetimefield_value(now)
    far = connection.ops.adapt_datetimefield_value(now + dt.timedelta(hours=1))
    count_to = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) "
    with connection.cursor() as cursor:
        cursor.execute(
            count_to + "INSERT INTO limits_slot (id, limit_id, run_id, request, label, state, granted_at, "
            "confirmed_at, expires_at, freed_by) SELECT 'slot_scale_' || i, %s, 'scale-' || i, 'scale-' || i, '', "
            "'busy', %s, %s, %s, '' FROM n",
            [busy, limit.id, granted, granted, far],
        )
        cursor.execute(
            count_to + "INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, state, "
            "enqueued_at, deadline, timeout_ms) SELECT %s, 'queued-' || i, 'queued-' || i, '', i, 'waiting', %s, %s, "
            "3600000 FROM n",
            [waiting, limit.id, granted, far],
        )
    Limit.objects.filter(id=limit.id).update(
        busy_count=busy, waiting_count=waiting, next_position=waiting + 1, declared_capacity=min(busy, 100_000)
    )


def test_the_limit_page_takes_the_same_few_queries_at_any_size(
    db, operator_client, clock, django_assert_max_num_queries
) -> None:
    """A limit with 100,000 busy slots and a queue of 1,000,000 must not cost more queries than a
    small one, and no query may COUNT rows: totals come from the limit's counters."""
    limits = declare(small={"capacity": 1, "max_hold": "1h"}, big={"capacity": 1, "max_hold": "1h"})
    _fill(limits["small"], busy=1, reserved=1, waiting=1, now=clock.now())
    _fill_at_scale(limits["big"], busy=100_000, waiting=1_000_000, now=clock.now())
    counts = []
    for url in [
        "/studio/limits/small/",
        "/studio/limits/big/",
        "/studio/limits/big/?slots=2000&queue=20000",
    ]:
        with CaptureQueriesContext(connection) as queries:
            page = operator_client.get(url).content.decode()
        counts.append(len(queries))
        assert not [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert "99951–100000 of 100000 · page 2000 of 2000" in page
    assert "999951–1000000 of 1000000 · page 20000 of 20000" in page
    # One more only where a page holds both busy and reserved slots (each read follows its index).
    assert counts == [counts[0], counts[0] - 1, counts[0] - 1], counts
    # Issue 16's page budget at bench scale: at most 10 queries (session, user and the two
    # permission reads included).
    assert counts[1] <= 10, counts
    with django_assert_max_num_queries(counts[0]):
        operator_client.get("/studio/limits/big/?slots=1000&queue=200", headers={"HX-Request": "true"})
