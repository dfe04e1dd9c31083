"""Places in a queue (limits.selectors): a run's place counts only the runs still waiting ahead
of it (tickets of runs that left leave gaps), its key's place only its key's; a page of one
key's rows gets each row's place in the limit's whole queue; and on PostgreSQL each count walks
a partial index of the queue, never the table."""

from __future__ import annotations

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
    """With 20,000 more waiting runs (inserted in bulk, then ANALYZE), the plans of a run's waits
    and of a key's places read queue_waiting_order and queue_waiting_by_key, not the table."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                                           enqueued_at, deadline, timeout_ms)
            SELECT %s, 'bulk-' || g, 'bulk-' || g, '', 1000 + g, CASE WHEN g %% 10 = 0 THEN 'acme' ELSE '' END,
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
    assert "queue_waiting_order" in waits_plan and "queue_waiting_by_key" in waits_plan, waits_plan
    assert "Seq Scan on limits_queueentry" not in waits_plan, waits_plan
    assert "queue_waiting_order" in places_plan and "Seq Scan on limits_queueentry" not in places_plan, places_plan
