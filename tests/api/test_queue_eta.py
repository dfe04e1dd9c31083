"""The JSON API's queue rows carry `position` (1-based) and `eta_seconds` (limits.eta, null when
unknown): the figures the run page shows, for the same run, in a constant number of queries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from tests.api.conftest import Api, reader
from tests.factories import declare, rolled_up_grants

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer() -> Api:
    return Api(reader()[1])


@pytest.fixture
def tenants(clock) -> None:
    """partner-api (capacity 3, 1 per key, max hold 1h) granted 3 slots in the last 10 rolled-up
    minutes (one every 200 s); then 5 runs wait: acme, globex, acme, (no key), acme."""
    declare(partner_api={"capacity": 3, "max_hold": "1h", "per_key": 1})

    def grants() -> None:
        for key in ("acme", "globex", "initech"):
            services.acquire("partner-api", run_id=f"holder-{key}", key=key)

    rolled_up_grants(clock, grants)
    for run_id, key in [("w1", "acme"), ("w2", "globex"), ("w3", "acme"), ("w4", None), ("w5", "acme")]:
        assert services.acquire("partner-api", run_id=run_id, key=key, timeout="1h").state == "waiting"


def _queue(api: Api, **params: object) -> list[dict[str, object]]:
    response = api.get("partner-api/queue/", **params)
    assert response.status_code == 200, response.content
    return response.json()["queue"]


def test_queue_rows_carry_their_position_and_eta(tenants, viewer) -> None:
    rows = _queue(viewer)
    assert [(row["run"], row["position"], row["eta_seconds"]) for row in rows] == [
        ("w1", 1, 200),
        ("w2", 2, 400),
        ("w3", 3, 600),
        ("w4", 4, 800),
        ("w5", 5, 1000),
    ]


def test_a_later_page_counts_from_its_offset(tenants, viewer) -> None:
    rows = _queue(viewer, page=2, size=2)
    assert [(row["run"], row["position"], row["eta_seconds"]) for row in rows] == [("w3", 3, 600), ("w4", 4, 800)]


def test_a_keys_rows_count_their_position_in_the_key_and_their_eta_in_the_limit(tenants, viewer) -> None:
    """The same run has the same eta_seconds whether the list is filtered by its key or not."""
    rows = _queue(viewer, key="acme")
    assert [(row["run"], row["position"], row["eta_seconds"]) for row in rows] == [
        ("w1", 1, 200),
        ("w3", 2, 600),
        ("w5", 3, 1000),
    ]
    rows = _queue(viewer, key="acme", page=2, size=2)
    assert [(row["run"], row["position"], row["eta_seconds"]) for row in rows] == [("w5", 3, 1000)]


def test_eta_seconds_is_null_when_nothing_was_granted_in_the_last_10_minutes(tenants, viewer, clock) -> None:
    clock.advance(minutes=12)
    services.sweep()
    rows = _queue(viewer)
    assert [row["eta_seconds"] for row in rows] == [None] * 5
    assert [row["position"] for row in rows] == [1, 2, 3, 4, 5]


def _count(api: Api, **params: object) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert api.get("partner-api/queue/", **params).status_code == 200
    return len(captured.captured_queries)


@pytest.mark.parametrize("params", [{"size": 3}, {"size": 3, "page": 2}, {"size": 3, "key": "acme"}])
def test_a_page_of_the_queue_reads_as_many_queries_whatever_its_length(tenants, viewer, params) -> None:
    short = _count(viewer, **params)
    for n in range(60):
        services.acquire("partner-api", run_id=f"more-{n}", key="acme" if n % 3 else None, timeout="1h")
    assert _count(viewer, **params) == short


def test_an_estimated_place_gives_the_run_pages_eta_and_the_exact_position(tenants, viewer, monkeypatch) -> None:
    """w4 left (a gap in the tickets). With the cap of exact places lowered to 1, w2 and w3 are
    estimated on their run pages (limits.selectors.queue_place: w3 is "about 2nd", its ticket
    half way from w1's to w5's); the API's eta_seconds of each run is the run page's, with or
    without the key filter, and `position` stays the exact one."""
    from limits import selectors

    services.end_run("w4")
    monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 1)
    page_etas = {}
    for run_id in ("w1", "w2", "w3", "w5"):
        (entry,) = selectors.waits_of_run(run_id)
        page_etas[run_id] = entry.eta_seconds
        assert entry.place_approximate == (run_id in ("w2", "w3"))
    assert page_etas == {"w1": 200, "w2": 400, "w3": 400, "w5": 800}  # w3: about 2nd, not 3rd
    rows = _queue(viewer)
    assert [row["position"] for row in rows] == [1, 2, 3, 4]
    assert {row["run"]: row["eta_seconds"] for row in rows} == page_etas
    keyed = _queue(viewer, key="acme")
    assert {row["run"]: row["eta_seconds"] for row in keyed} == {run: page_etas[run] for run in ("w1", "w3", "w5")}


def test_queue_rows_say_why_each_run_waits(tenants, viewer) -> None:
    """SPEC 6.5: the grant's own answer, in the one vocabulary: the limit is full for all five
    (its 3 slots are held); with room for all, the keyed runs still wait for their key's pool."""
    rows = _queue(viewer)
    assert {row["reason"]["code"] for row in rows if isinstance(row["reason"], dict)} == {"limit_full"}
    assert all(row["reason"] for row in rows)
    services.set_capacity("partner-api", 10, actor="test")  # room for all: w4 (no key) is granted
    rows = _queue(viewer)

    def pool_full(key: str) -> dict[str, str]:
        return {"code": "key_pool_full", "text": "its key's pool is full", "limit": "partner-api", "key": key}

    assert [(row["run"], row["reason"]) for row in rows] == [
        ("w1", pool_full("acme")),
        ("w2", pool_full("globex")),
        ("w3", pool_full("acme")),
        ("w5", pool_full("acme")),
    ]


@pytest.fixture
def burst(clock):
    """voice-calls (capacity 1) granted 2 slots in the last 10 rolled-up minutes (1 every 300 s);
    then, within the last 20 s, 20 runs took and gave back its slot one after the other, a 21st
    holds it, and 14 runs wait (issue 30: the queue drained in 15 s, the ETA said minutes)."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})

    def grants() -> None:
        for n in range(2):
            services.release(services.acquire("voice-calls", run_id=f"early-{n}").slot_id)

    rolled_up_grants(clock, grants)
    clock.advance(seconds=30)
    for n in range(20):
        slot = services.acquire("voice-calls", run_id=f"fast-{n}").slot_id
        clock.advance(seconds=1)
        assert services.release(slot)
    assert services.acquire("voice-calls", run_id="holder").state == "busy"
    for n in range(14):
        assert services.acquire("voice-calls", run_id=f"w{n + 1}", timeout="1h").state == "waiting"


def _voice_queue(api: Api) -> list[dict[str, object]]:
    response = api.get("voice-calls/queue/")
    assert response.status_code == 200, response.content
    return response.json()["queue"]


def test_after_a_burst_of_fast_grants_the_eta_is_in_seconds(burst, viewer) -> None:
    """21 grants in the last 60 s (at least limits.eta.RECENT_MIN_GRANTS): the rate is 21 / 60 s,
    so the 14th waits ceil(14 x 60 / 21) = 40 s; the 10-minute rate (2 / 600 s) said 4,200 s."""
    rows = _voice_queue(viewer)
    assert [row["position"] for row in rows] == list(range(1, 15))
    assert rows[0]["eta_seconds"] == 3  # ceil(60 / 21)
    assert rows[-1]["eta_seconds"] == 40


def test_a_quiet_limit_keeps_the_ten_minute_rate(clock, viewer) -> None:
    """9 grants in the last 60 s (one fewer than limits.eta.RECENT_MIN_GRANTS) say too little:
    the estimate keeps the rate of the last 10 rolled-up minutes, 3 grants / 600 s."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})

    def grants() -> None:
        for n in range(3):
            services.release(services.acquire("voice-calls", run_id=f"early-{n}").slot_id)

    rolled_up_grants(clock, grants)
    clock.advance(seconds=30)
    for n in range(8):
        slot = services.acquire("voice-calls", run_id=f"fast-{n}").slot_id
        clock.advance(seconds=1)
        assert services.release(slot)
    assert services.acquire("voice-calls", run_id="holder").state == "busy"  # the 9th grant
    for n in range(2):
        assert services.acquire("voice-calls", run_id=f"w{n + 1}", timeout="1h").state == "waiting"
    assert [row["eta_seconds"] for row in _voice_queue(viewer)] == [200, 400]


def test_after_a_burst_a_page_of_the_queue_reads_as_many_queries_whatever_its_length(burst, viewer) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get("voice-calls/queue/", size=3).status_code == 200
        return len(captured.captured_queries)

    short = count()
    for n in range(30):
        services.acquire("voice-calls", run_id=f"more-{n}", timeout="1h")
    assert count() == short
