"""Places in a queue (limits.selectors): a run's place counts only the runs still waiting ahead
of it (tickets of runs that left leave gaps), its key's place only its key's; a page of one
key's rows gets each row's place in the limit's whole queue; and on PostgreSQL each count walks
a partial index of the queue, never the table."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import selectors, serializers, services
from limits.models import Limit
from tests.conftest import requires_postgres
from tests.factories import declare, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def gappy(clock) -> Limit:
    """partner-api full (capacity 1, 1 per key); 12 runs waited, keys acme / globex / none in turn; 4 of
    them left the queue (their waits cancelled), so the tickets have gaps."""
    declare(partner_api={"capacity": 1, "max_hold": "1h", "per_key": 1})
    services.acquire("partner-api", run_id="holder")
    for n in range(12):
        key = ("acme", "globex", None)[n % 3]
        assert services.acquire("partner-api", run_id=f"w{n}", key=key, timeout="1h").state == "waiting"
    for gone in ("w0", "w3", "w4", "w8"):
        services.end_run(gone)
    return Limit.objects.get(name="partner-api")


def test_a_runs_place_counts_only_the_runs_still_waiting_ahead(gappy) -> None:
    assert queue("partner-api") == ["w1", "w2", "w5", "w6", "w7", "w9", "w10", "w11"]
    (w9,) = selectors.waits_of_run("w9")  # acme: w6 and w9 are acme's waiting runs
    assert (w9.place, w9.key_place, w9.key_waiting) == (6, 2, 2)  # type: ignore[attr-defined]
    (w5,) = selectors.waits_of_run("w5")  # no key
    assert (w5.place, w5.key_place) == (3, None)  # type: ignore[attr-defined]


def test_a_keys_rows_get_their_places_in_the_limits_whole_queue(gappy) -> None:
    rows = serializers.key_queue_rows(gappy, "acme", offset=0, size=10).items
    assert [row.run_id for row in rows] == ["w6", "w9"]
    assert list(selectors.limit_places(gappy, rows).values()) == [4, 6]
    rows = serializers.key_queue_rows(gappy, "globex", offset=0, size=10).items
    assert [row.run_id for row in rows] == ["w1", "w7", "w10"]
    assert list(selectors.limit_places(gappy, rows).values()) == [1, 5, 7]


def test_many_rows_of_a_key_are_placed_in_one_query_per_batch(gappy, monkeypatch) -> None:
    monkeypatch.setattr(selectors, "PLACES_PER_QUERY", 2)
    rows = serializers.key_queue_rows(gappy, "globex", offset=0, size=10).items
    with CaptureQueriesContext(connection) as captured:
        places = selectors.limit_places(gappy, rows)
    assert list(places.values()) == [1, 5, 7] and len(captured.captured_queries) == 2


@pytest.mark.postgres
@requires_postgres
def test_on_postgresql_the_places_are_counted_along_the_queues_partial_indexes(gappy) -> None:
    """With 20,000 more waiting runs and, as any queue has, the history of 40,000 that left it
    (inserted in bulk, then ANALYZE), the plans of a run's waits and of a key's places read the
    queue's live partition only, never the history; a run's waits through queue_waiting_order
    and queue_waiting_by_key."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                                           enqueued_at, deadline, timeout_ms, finished_at)
            SELECT %s, 'left-' || g, 'left-' || g, '', 1000 + 3 * g, CASE WHEN g %% 10 = 0 THEN 'acme' ELSE '' END,
                   1, 'granted', now(), now() + interval '1 day', 86400000, now()
            FROM generate_series(1, 40000) AS g
            """,
            [gappy.id],
        )
        cursor.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                                           enqueued_at, deadline, timeout_ms)
            SELECT %s, 'bulk-' || g, 'bulk-' || g, '', 1001 + 3 * g, CASE WHEN g %% 10 = 0 THEN 'acme' ELSE '' END,
                   1, 'waiting', now(), now() + interval '1 day', 86400000
            FROM generate_series(1, 20000) AS g
            """,
            [gappy.id],
        )
        cursor.execute("ANALYZE limits_queueentry")
    with CaptureQueriesContext(connection) as captured:
        selectors.waits_of_run("bulk-20000")
        selectors.limit_places(gappy, serializers.key_queue_rows(gappy, "acme", offset=0, size=100).items)
    waits_sql = captured.captured_queries[0]["sql"]
    places_sql = captured.captured_queries[-1]["sql"]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + waits_sql)
        waits_plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN " + places_sql)
        places_plan = "\n".join(row[0] for row in cursor.fetchall())
    for plan in (waits_plan, places_plan):
        # The live partition only (limits/0034): the history is pruned. There the planner may
        # read a small partition whole (20,000 waiting runs here) rather than a third of it
        # along an index; at a million waiting it takes the index (scenario 4 of the bench).
        assert "limits_queueentry_history" not in plan, plan
        assert not re.search(r"Seq Scan on limits_queueentry\s", plan), plan
    assert "queue_waiting_order" in waits_plan and "queue_waiting_by_key" in waits_plan, waits_plan


# --- a place costs at most 2 x EXACT_PLACES index entries (limits.selectors.queue_place) ---------


def test_within_the_cap_from_either_end_a_place_is_exact(gappy, monkeypatch) -> None:
    """With the cap lowered to 2 runs: the 1st and 2nd count from the head, the last two from the
    tail (the limit's counter minus the runs behind), both exact; the middle ones are estimated
    from their tickets, said to be, and kept deeper than the cap from both ends."""
    monkeypatch.setattr(selectors, "EXACT_PLACES", 2)
    order = queue("partner-api")
    assert order == ["w1", "w2", "w5", "w6", "w7", "w9", "w10", "w11"]
    places = {}
    for run_id in order:
        (entry,) = selectors.waits_of_run(run_id)
        places[run_id] = (entry.place, entry.place_approximate)  # type: ignore[attr-defined]
    assert places["w1"] == (1, False) and places["w2"] == (2, False)
    assert places["w10"] == (7, False) and places["w11"] == (8, False)
    for run_id in ("w5", "w6", "w7", "w9"):
        place, approximate = places[run_id]
        assert approximate and 3 <= place <= 6, (run_id, place)
    # w5's ticket is 4/10 of the way from w1's to w11's: about 1 + 0.4 x 7 = 3.8, so 4th.
    assert places["w5"] == (4, True)


def test_without_a_lowered_cap_every_place_is_exact(gappy) -> None:
    for number, run_id in enumerate(queue("partner-api"), start=1):
        (entry,) = selectors.waits_of_run(run_id)
        assert (entry.place, entry.place_approximate) == (number, False)  # type: ignore[attr-defined]


def test_the_run_page_says_an_estimated_place_is_one(gappy, monkeypatch) -> None:
    from limits import run_selectors as studio_selectors

    monkeypatch.setattr(selectors, "EXACT_PLACES", 2)
    (w5,) = studio_selectors.describe_waits(selectors.waits_of_run("w5"))
    assert w5.place_text == "about 4th of 8"  # type: ignore[attr-defined]
    (w10,) = studio_selectors.describe_waits(selectors.waits_of_run("w10"))
    assert w10.place_text == "7th of 8"  # type: ignore[attr-defined]


def test_a_keys_place_follows_the_same_rule(gappy, monkeypatch) -> None:
    """globex waits w1, w7, w10: with the cap at 1, w1 is exact from the head, w10 from the tail
    (its key's counter), w7 is estimated."""
    monkeypatch.setattr(selectors, "EXACT_PLACES", 1)
    found = {}
    for run_id in ("w1", "w7", "w10"):
        (entry,) = selectors.waits_of_run(run_id)
        found[run_id] = (entry.key_place, entry.key_place_approximate)  # type: ignore[attr-defined]
    assert found == {"w1": (1, False), "w7": (2, True), "w10": (3, False)}


@pytest.mark.parametrize(
    ("ahead", "behind", "expected"),
    [
        (0, 5000, selectors.Place(1)),
        (99, 5000, selectors.Place(100)),
        (100, 99, selectors.Place(901)),  # 1000 waiting - 99 behind
        (100, 100, selectors.Place(500, approximate=True)),  # ticket 500 of 1..1000
    ],
)
def test_the_place_rule(ahead: int, behind: int, expected: selectors.Place) -> None:
    place = selectors.queue_place(ahead=ahead, behind=behind, waiting=1000, position=500, head=1, tail=1000, cap=100)
    assert place == expected


def test_an_estimate_stays_deeper_than_the_cap_from_both_ends() -> None:
    near_head = selectors.queue_place(ahead=100, behind=100, waiting=1000, position=2, head=1, tail=1000, cap=100)
    near_tail = selectors.queue_place(ahead=100, behind=100, waiting=1000, position=999, head=1, tail=1000, cap=100)
    assert near_head == selectors.Place(101, approximate=True)
    assert near_tail == selectors.Place(900, approximate=True)


@pytest.mark.postgres
@requires_postgres
def test_on_postgresql_no_count_of_a_place_reads_more_than_the_cap(gappy, monkeypatch) -> None:
    """20,000 more waiting runs, the cap at 1,000: EXPLAIN ANALYZE of the waits of the run in the
    middle shows no index scan returning more than 1,000 rows, and the place is estimated."""
    monkeypatch.setattr(selectors, "EXACT_PLACES", 1000)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                                           enqueued_at, deadline, timeout_ms)
            SELECT %s, 'bulk-' || g, 'bulk-' || g, '', 1000 + g, '', 1, 'waiting', now(), now() + interval '1 day',
                   86400000
            FROM generate_series(1, 20000) AS g
            """,
            [gappy.id],
        )
        cursor.execute("UPDATE limits_limit SET waiting_count = waiting_count + 20000 WHERE id = %s", [gappy.id])
        cursor.execute("ANALYZE limits_queueentry")
    with CaptureQueriesContext(connection) as captured:
        (entry,) = selectors.waits_of_run("bulk-10000")
    assert entry.place_approximate and 1001 <= entry.place <= 20008 - 1000  # type: ignore[attr-defined]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + captured.captured_queries[0]["sql"])
        plan = [row[0] for row in cursor.fetchall()]
    scanned = [int(rows) for line in plan if "Scan" in line for rows in re.findall(r"actual time=\S+ rows=(\d+)", line)]
    assert scanned and max(scanned) <= 1000, "\n".join(plan)
