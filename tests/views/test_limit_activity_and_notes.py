"""Issue 15, items 12 and 13 on a limit's page: the activity shows the grants, hand-offs and
releases of the slots as a feed (bounded, in constant queries); a capacity below what is held
says so; a message is shown once, then cleared by the next action."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import selectors, services, views
from limits.models import AuditEvent, Slot
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = pytest.mark.django_db

PAGE = "/studio/limits/voice-calls/"


def activity_lines(page: str) -> list[tuple[bool, str]]:
    """(is a slot event, its text) for each line of the activity, newest first."""
    found = re.search(r'<ol class="activity">(.*?)</ol>', page, re.S)
    assert found is not None, "no activity list"
    return [
        ("slot-event" in line.split(">", 1)[0], re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", line)).strip())
        for line in re.findall(r"<li.*?</li>", found[1], re.S)
    ]


def slot_of(run_id: str) -> str:
    return Slot.objects.filter(run_id=run_id).order_by("granted_at").values_list("id", flat=True)[0]


# --- item 12: the feed ------------------------------------------------------------------------------


def test_the_activity_shows_grants_hand_offs_and_a_workflows_release(busy_limit, operator_client, clock) -> None:
    first = slot_of("run-0")
    clock.advance(seconds=5)
    assert services.release(first)  # the workflow's own release: no audit event
    handed = Slot.objects.get(run_id="run-2").id
    page = operator_client.get(PAGE).content.decode()
    assert "Nothing has happened" not in page
    lines = activity_lines(page)
    feed = [text for is_slot, text in lines if is_slot]
    assert feed[0].endswith(f"run-2 (call-2) was handed {handed} from the queue")
    assert feed[1].endswith(f"run-0 (call-0) released {first}")
    assert any(text.endswith(f"run-0 (call-0) was granted {first}") for text in feed)
    assert any(text.endswith(f"run-1 (call-1) was granted {slot_of('run-1')}") for text in feed)
    times = re.findall(r'<li class="[^"]*">\s*<time datetime="([^"]+)"', page)
    assert times == sorted(times, reverse=True), "newest first"


def test_an_operators_release_is_told_once_by_the_audit_log(busy_limit, operator_client, clock) -> None:
    first = slot_of("run-0")
    clock.advance(seconds=5)
    assert services.release(first, actor="user:bob")
    lines = activity_lines(operator_client.get(PAGE).content.decode())
    assert [text for is_slot, text in lines if not is_slot][0].endswith(f"bob released {first} (was busy)")
    assert not any(is_slot and text.endswith(f"released {first}") for is_slot, text in lines)


def test_the_activity_is_three_queries_whatever_the_history(busy_limit, clock) -> None:
    def queries() -> int:
        limit = selectors.get_limit("voice-calls")
        with CaptureQueriesContext(connection) as captured:
            views._activity(limit)
        return len(captured.captured_queries)

    small = queries()
    for i in range(30):  # hand-offs: each release grants the next waiting run
        services.acquire("voice-calls", run_id=f"more-{i}")
        oldest = Slot.objects.filter(state__in=["busy", "reserved"]).order_by("granted_at", "id").first()
        assert oldest is not None and services.release(oldest.id)
        clock.advance(seconds=1)
    assert small == queries() == 3
    limit = selectors.get_limit("voice-calls")
    assert len(views._activity(limit)) == views.ACTIVITY_SIZE


def test_the_feed_looks_at_the_latest_frees_of_the_box_and_the_empty_state_says_so(
    operator_client, clock, monkeypatch
) -> None:
    """Older frees fall out of the window: the empty state names the window, so it stays true."""
    monkeypatch.setattr("limits.selectors.limit_pages.RECENT_FREES_SCANNED", 5)
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, other={"capacity": 50, "max_hold": "45m"})
    services.acquire("voice-calls", run_id="early")
    services.release(slot_of("early"))
    clock.advance(seconds=1)
    page = operator_client.get(PAGE).content.decode()
    assert any(text.endswith(f"early released {slot_of('early')}") for _, text in activity_lines(page))
    for i in range(5):  # five newer frees elsewhere push it out of the window
        services.acquire("other", run_id=f"o-{i}")
        services.release(slot_of(f"o-{i}"))
    page = operator_client.get(PAGE).content.decode()
    assert [text for is_slot, text in activity_lines(page) if is_slot] == []
    assert "those freed among the box’s latest 5 freed slots" in page  # what the feed covers
    AuditEvent.objects.all().delete()  # no deploy, no operator action either: the empty state
    page = operator_client.get(PAGE).content.decode()
    assert "No operator action yet, no slot held, and none freed among the box’s latest 5 freed slots." in page


@pytest.mark.postgres
@requires_postgres
def test_on_postgresql_the_feed_reads_the_partial_indexes_not_the_history(busy_limit) -> None:
    """With 30,000 older freed slots of this limit, 30,000 newer ones of another and 3,000 busy
    slots of that other (inserted in bulk, then ANALYZE), the feed's plans follow a partial index
    of live slots and slot_history_age, read no busy slot of another limit, and no scan of
    limits_slot reads more than RECENT_FREES_SCANNED rows: never the whole history. (Not held
    here: the reserved arm may read the box's reserved slots through slot_reservation_expiry, as
    many as there are reservations outstanding; the planner picked it with 1,000 of another
    limit's, docs/performance.md.)"""
    other = declare(voice_calls={"capacity": 2, "max_hold": "45m"}, other={"capacity": 5, "max_hold": "1h"})["other"]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO limits_slot (id, limit_id, run_id, request, label, key, group_size, state, granted_at,
                                     confirmed_at, expires_at, freed_at, freed_by)
            SELECT 'slot_' || md5(g::text), %s, 'h-' || g, 'h-' || g, '', '', 1, 'released',
                   now() - interval '1 day' + g * interval '1 ms', now() - interval '1 day',
                   now() + interval '1 hour', now() - interval '1 hour' + g * interval '1 ms', ''
            FROM generate_series(1, 30000) AS g
            """,
            [other.id],
        )
        cursor.execute(  # and an older history of its own: 30,000 frees a day ago
            """
            INSERT INTO limits_slot (id, limit_id, run_id, request, label, key, group_size, state, granted_at,
                                     confirmed_at, expires_at, freed_at, freed_by)
            SELECT 'slot_' || md5('own' || g), %s, 'o-' || g, 'o-' || g, '', '', 1, 'released',
                   now() - interval '2 days' + g * interval '1 ms', now() - interval '2 days',
                   now() + interval '1 hour', now() - interval '1 day' + g * interval '1 ms', ''
            FROM generate_series(1, 30000) AS g
            """,
            [busy_limit.id],
        )
        cursor.execute(  # and 3,000 busy slots of the other limit
            """
            INSERT INTO limits_slot (id, limit_id, run_id, request, label, key, group_size, state, granted_at,
                                     confirmed_at, expires_at, freed_by)
            SELECT 'slot_' || md5('live' || g), %s, 'l-' || g, 'l-' || g, '', '', 1, 'busy', now(), now(),
                   now() + interval '1 hour', ''
            FROM generate_series(1, 3000) AS g
            """,
            [other.id],
        )
        cursor.execute("ANALYZE limits_slot")
    with CaptureQueriesContext(connection) as captured:
        selectors.slot_feed(busy_limit, size=views.ACTIVITY_SIZE)
    live_sql, frees_sql = (query["sql"] for query in captured.captured_queries)
    live_plan, frees_plan = _analyze(live_sql), _analyze(frees_sql)
    # The live slots: a partial index of live slots (slot_live_by_limit, or the planner's pick of
    # other indexes over live slots only: slot_one_live_per_request, slot_live_by_run, or the busy
    # and the reserved ones appended, slot_busy_expiry + slot_reservation_expiry), reading this
    # limit's live slots only: a plan that read the other limit's 3,000 would fail the count.
    live_indexes = {
        "slot_live_by_limit",
        "slot_one_live_per_request",
        "slot_live_by_run",
        "slot_busy_expiry",
        "slot_reservation_expiry",
    }
    assert _index_names(live_plan) & live_indexes, live_plan
    assert _rows_read(live_plan) <= busy_limit.in_use, live_plan
    # The frees: slot_history_age, newest first, as far as RECENT_FREES_SCANNED entries.
    assert "slot_history_age" in _index_names(frees_plan), frees_plan
    assert _rows_read(frees_plan) <= selectors.RECENT_FREES_SCANNED + views.ACTIVITY_SIZE, frees_plan


def _analyze(sql: str) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        return list(_nodes(cursor.fetchone()[0][0]["Plan"]))


def _index_names(nodes: list[dict[str, Any]]) -> set[str]:
    return {node["Index Name"] for node in nodes if "Index Name" in node}


def _rows_read(nodes: list[dict[str, Any]]) -> int:
    """Rows of limits_slot read by the plan's scans (kept and filtered out), the largest scan's."""
    scans = [node for node in nodes if node.get("Relation Name", "").startswith("limits_slot")]  # or a partition
    assert not any(node["Node Type"] == "Seq Scan" for node in scans), scans
    return max((node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"] for node in scans)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


# --- item 13: over capacity, and messages shown once --------------------------------------------------


def test_a_capacity_below_what_is_held_says_no_new_grants_until_below_it(busy_limit, operator_client) -> None:
    page = operator_client.get(PAGE).content.decode()
    assert 'id="over-capacity"' not in page  # 2 / 2: full, not over
    services.set_capacity("voice-calls", 1, actor="user:ada")
    page = operator_client.get(PAGE).content.decode()
    assert '<b>2</b> / <span id="figure-capacity">1</span>' in page
    assert '<p class="over-capacity" id="over-capacity">Over capacity: no new grants until below 1.</p>' in page
    assert "2 held, 1 allowed" in page
    listing = operator_client.get("/studio/limits/").content.decode()
    row = re.search(r'<tr id="limit-voice-calls">.*?</tr>', listing, re.S)[0]
    assert ">over capacity</span>" in row and "No new grants until below 1" in row


def test_a_live_action_replaces_the_flash_and_clears_the_edit_panels_message(busy_limit, operator_client, htmx) -> None:
    released = operator_client.post(PAGE + "release/", {"slot": slot_of("run-0")}, headers=htmx).content.decode()
    assert re.search(
        r'<div id="flash" hx-swap-oob="true" aria-live="polite"><div class="flash success">Released', released
    )
    assert '<div id="edit-notice" hx-swap-oob="true"></div>' in released


def test_an_edit_clears_the_flash_of_an_earlier_action(busy_limit, operator_client, htmx) -> None:
    edited = operator_client.post(PAGE + "capacity/", {"capacity": "3"}, headers=htmx).content.decode()
    assert '<div id="flash" hx-swap-oob="true" aria-live="polite"></div>' in edited
    assert "Capacity is now 3 (declared 2)." in edited  # its own message, in the panel
    refused = operator_client.post(PAGE + "capacity/", {"capacity": "0"}, headers=htmx).content.decode()
    assert '<div id="flash" hx-swap-oob="true" aria-live="polite"></div>' in refused


def test_the_poll_leaves_a_fresh_message_alone(busy_limit, operator_client, htmx) -> None:
    polled = operator_client.get(PAGE, headers=htmx).content.decode()
    assert 'id="flash"' not in polled and 'id="edit-notice"' not in polled
    page = operator_client.get(PAGE).content.decode()  # a full page: no out-of-band swaps
    assert "hx-swap-oob" not in page
