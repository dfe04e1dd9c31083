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
from limits.models import Limit, QueueEntry, Slot
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
    assert (w9.place, w9.key_place, w9.key_waiting) == (6, 2, 2)
    (w5,) = selectors.waits_of_run("w5")  # no key
    assert (w5.place, w5.key_place) == (3, None)


def test_a_keys_rows_get_their_places_in_the_limits_whole_queue(gappy) -> None:
    rows = serializers.key_queue_rows(gappy, "acme", offset=0, size=10).items
    assert [row.run_id for row in rows] == ["w6", "w9"]
    assert list(selectors.limit_places(gappy, rows).values()) == [4, 6]
    rows = serializers.key_queue_rows(gappy, "globex", offset=0, size=10).items
    assert [row.run_id for row in rows] == ["w1", "w7", "w10"]
    assert list(selectors.limit_places(gappy, rows).values()) == [1, 5, 7]


def test_many_rows_of_a_key_are_placed_in_one_query_per_batch(gappy, monkeypatch) -> None:
    monkeypatch.setattr("limits.selectors.places.PLACES_PER_QUERY", 2)
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
    monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 2)
    order = queue("partner-api")
    assert order == ["w1", "w2", "w5", "w6", "w7", "w9", "w10", "w11"]
    places = {}
    for run_id in order:
        (entry,) = selectors.waits_of_run(run_id)
        places[run_id] = (entry.place, entry.place_approximate)
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
        assert (entry.place, entry.place_approximate) == (number, False)


def test_the_run_page_says_an_estimated_place_is_one(gappy, monkeypatch) -> None:
    from limits.runs import selectors as studio_selectors

    monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 2)
    (w5,) = studio_selectors.describe_waits(selectors.waits_of_run("w5"))
    assert w5.place_text == "about 4th of 8"
    (w10,) = studio_selectors.describe_waits(selectors.waits_of_run("w10"))
    assert w10.place_text == "7th of 8"


def test_a_keys_place_follows_the_same_rule(gappy, monkeypatch) -> None:
    """globex waits w1, w7, w10: with the cap at 1, w1 is exact from the head, w10 from the tail
    (its key's counter), w7 is estimated."""
    monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 1)
    found = {}
    for run_id in ("w1", "w7", "w10"):
        (entry,) = selectors.waits_of_run(run_id)
        found[run_id] = (entry.key_place, entry.key_place_approximate)
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
    monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 1000)
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
    assert entry.place_approximate and 1001 <= entry.place <= 20008 - 1000
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + captured.captured_queries[0]["sql"])
        plan = [row[0] for row in cursor.fetchall()]
    scanned = [int(rows) for line in plan if "Scan" in line for rows in re.findall(r"actual time=\S+ rows=(\d+)", line)]
    assert scanned and max(scanned) <= 1000, "\n".join(plan)


# --- a fair limit's queue in the order it is served (SPEC 13.7) ----------------------------------


class Served:
    """The hold model of limits.eta.fair_order: each turn releases the slot granted first (ties by
    slot id, as the walk frees them) and confirms what that grant reserved; `order` lists the runs
    granted from the queue, in order."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.keys: dict[str, str | None] = {}
        self.order: list[str] = []

    def take(self, run: str, key: str | None) -> str:
        self.keys[run] = key
        return services.acquire("api", run_id=run, request=run, key=key, timeout="1h").state

    def confirm(self) -> None:
        for slot in Slot.objects.filter(limit__name="api", state="reserved").order_by("granted_at", "id"):
            self.order.append(slot.run_id)
            assert self.take(slot.run_id, self.keys[slot.run_id]) == "busy"

    def turn(self) -> None:
        self.clock.advance(seconds=1)
        oldest = Slot.objects.filter(limit__name="api", state="busy").order_by("granted_at", "id").first()
        assert oldest is not None
        services.release(oldest.id)
        self.confirm()


def _fair_listing(rows: int = selectors.FAIR_EXACT_MAX) -> tuple[list[str], int]:
    limit = Limit.objects.get(name="api")
    found = selectors.fair_queue_rows(limit, exact=rows, offset=0, size=None)
    return [entry.run_id for entry in found.items], found.exact


def _drain(served: Served) -> None:
    while QueueEntry.objects.filter(limit__name="api", state="waiting").exists():
        served.turn()


def test_a_fair_queue_is_listed_in_the_order_the_grant_serves_it(clock) -> None:
    """The newcomer's scenario (capacity 4, per_key 2, paused, five runs for each of u1..u6,
    resumed): the listing is the order the releases then grant the runs, one by one, u5 and u6
    first; a fifo listing of the same queue would have put them last."""
    declare(api={"capacity": 4, "max_hold": "1h", "per_key": 2, "share": "fair"})
    services.pause_limit("api", actor="ops")
    served = Served(clock)
    for tenant in ["u1", "u2", "u3", "u4", "u5", "u6"]:
        for i in range(5):
            clock.advance(seconds=1)
            assert served.take(f"{tenant}-{i}", tenant) == "waiting"
    resumed, exact = _fair_listing()
    services.resume_limit("api", actor="ops")
    served.confirm()
    listed, exact = _fair_listing()
    assert resumed[:4] == sorted(served.order) == ["u1-0", "u2-0", "u3-0", "u4-0"]
    # Which of the four slots granted at the resume frees first is their ids' order: the same
    # runs come next, u5 and u6 first, but u1..u4 in the order their slots free.
    assert resumed[4:6] == listed[:2] == ["u5-0", "u6-0"] and exact == 26
    _drain(served)
    assert served.order[4:] == listed


def test_a_flood_and_a_heavy_key_are_listed_as_they_are_served(clock) -> None:
    """One key floods, then ten keys arrive with four runs each, one of weight 3, one without a
    key, and a key with a min of 1 that holds nothing: every run is listed in the order the grant
    serves it, the flood getting its turn among the others."""
    declare(api={"capacity": 4, "max_hold": "1h", "share": "fair"})
    services.set_weight("api", 3, key="heavy", actor="ops")
    services.set_min("api", 1, key="t-7", actor="ops")
    served = Served(clock)
    for i in range(30):
        clock.advance(seconds=1)
        served.take(f"flood-{i}", "flood")
    served.confirm()
    for i in range(4):
        for tenant in [*(f"t-{n}" for n in range(8)), "heavy", None]:
            clock.advance(seconds=1)
            served.take(f"{tenant or 'none'}-{i}", tenant)
    listed, exact = _fair_listing()
    assert exact == len(listed) == 66
    assert listed.index("flood-4") < listed.index("t-0-1")  # the flood gets its turn
    _drain(served)
    assert served.order == listed


def test_the_first_page_is_exact_and_the_rest_estimated_without_a_run_twice(clock) -> None:
    declare(api={"capacity": 2, "max_hold": "1h", "share": "fair"})
    served = Served(clock)
    for i in range(3):
        for tenant in ["a", "b", "c", "d"]:
            clock.advance(seconds=1)
            served.take(f"{tenant}-{i}", tenant)
    served.confirm()
    limit = Limit.objects.get(name="api")
    whole, exact = _fair_listing()
    assert exact == 10
    pages = [selectors.queue_page(limit, number=n, size=4) for n in (1, 2, 3)]
    assert [page.estimated_after for page in pages] == [4, 4, 4]
    listed = [entry.run_id for page in pages for entry in page.items]
    assert sorted(listed) == sorted(whole) and listed[:4] == whole[:4]
    assert [(row.place, row.estimated) for row in pages[1].numbered] == [(5, True), (6, True), (7, True), (8, True)]
    # a and b were served first, so c and d entered at their pass (a turn): c-0 and d-0 first.
    assert listed[:4] == ["c-0", "d-0", "a-1", "b-1"]
    # Past the first page, by turns: each key's next run a turn apart, arrival breaking ties.
    assert listed[4:] == ["c-1", "d-1", "a-2", "b-2", "c-2", "d-2"] == whole[4:]


@requires_postgres
def test_on_postgresql_a_fair_page_reads_its_keys_along_limitkey_fair_order(clock) -> None:
    """5,000 keys with two runs waiting each (inserted in bulk, then ANALYZE): the first page's
    walk reads its keys along limitkey_fair_order and their runs along queue_waiting_by_key,
    never a scan of the keys or of the queue."""
    limit = declare(api={"capacity": 4, "max_hold": "1h", "share": "fair"})["api"]
    for n in range(4):
        services.acquire("api", run_id=f"h{n}", key=f"hold-{n}")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, weight, minimum,
                                         head, fair_pass, created_at)
            SELECT %s, 'k-' || g, 0, 0, 2, 1, 0, 1000 + 2 * g, 0, now() FROM generate_series(1, 5000) AS g
            """,
            [limit.id],
        )
        cursor.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, key, group_size, state,
                                           enqueued_at, deadline, timeout_ms)
            SELECT %s, 'k' || g || '-' || i, 'k' || g || '-' || i, '', 1000 + 2 * g + i, 'k-' || g, 1, 'waiting',
                   now(), now() + interval '1 day', 86400000
            FROM generate_series(1, 5000) AS g, generate_series(0, 1) AS i
            """,
            [limit.id],
        )
        cursor.execute(
            "UPDATE limits_limit SET waiting_count = 10000, keyed_waiting_count = 10000, next_position = 20000"
            " WHERE id = %s",
            [limit.id],
        )
        cursor.execute("ANALYZE limits_limitkey")
        cursor.execute("ANALYZE limits_queueentry")
    limit.refresh_from_db()
    with CaptureQueriesContext(connection) as captured:
        head = selectors.fair_head(limit, 50)
    assert [entry.run_id for entry in head.entries[:3]] == ["k1-0", "k2-0", "k3-0"]
    plans = {}
    for query in captured.captured_queries:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + query["sql"])
            plans[query["sql"]] = "\n".join(row[0] for row in cursor.fetchall())
    keys_plan = next(plan for sql, plan in plans.items() if "FROM limits_limitkey" in sql)
    runs_plan = next(plan for sql, plan in plans.items() if "FROM limits_queueentry" in sql)
    assert "limitkey_fair_order" in keys_plan, keys_plan
    assert "queue_waiting_by_key" in runs_plan, runs_plan
    for plan in plans.values():
        assert not re.search(r"Seq Scan on limits_(limitkey|queueentry)", plan), plan


@pytest.mark.parametrize(("tenants", "exact"), [(["a", "b", "c", "d", None], 3), ([*"abcdefgh", None], 2)])
def test_a_runs_place_on_its_page_is_its_place_in_the_fair_listing(clock, monkeypatch, tenants, exact) -> None:
    """The run page (waits_of_run) places a run of a fair queue where the listing does: exactly
    among the runs walked, by the same turns past them (estimated, and said so), also for keys
    the walk never read (their turns summed from their rows)."""
    monkeypatch.setattr("limits.selectors.fair.FAIR_EXACT_ROWS", exact)
    declare(api={"capacity": 2, "max_hold": "1h", "share": "fair"})
    served = Served(clock)
    for i in range(3):
        for tenant in tenants:
            clock.advance(seconds=1)
            served.take(f"{tenant or 'none'}-{i}", tenant)
    served.confirm()
    limit = Limit.objects.get(name="api")
    listing = selectors.fair_queue_rows(limit, exact=exact, offset=0, size=None)
    places = {}
    for entry in listing.items:
        (wait,) = selectors.waits_of_run(entry.run_id)
        places[entry.run_id] = (wait.place, wait.place_approximate)
    expected = {entry.run_id: (index + 1, index >= exact) for index, entry in enumerate(listing.items)}
    assert places == expected
