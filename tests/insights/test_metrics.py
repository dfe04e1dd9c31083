"""/metrics: the names and values after scripted operations, the token, constant queries."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from limits import insights
from limits.models import SweepState
from limits.services import acquire, release, sweep
from limits.verify import verify
from tests.factories import declare
from tests.insights.helpers import roll_up_all, start_insights

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-for-tests"


@pytest.fixture
def scraper(settings) -> Client:
    settings.STACKBONE_METRICS_TOKEN = TOKEN
    return Client(headers={"Authorization": f"Bearer {TOKEN}"})


def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def one(samples, name: str, **labels: str) -> float:
    """The sample of `name` with these labels; a limit's metric's `kind` is "limit" unless given."""
    if "limit" in labels and name.startswith("stackbone_limit_"):
        labels.setdefault("kind", "limit")
    return samples[(name, tuple(sorted(labels.items())))]


def test_the_figures_after_scripted_operations(scraper, clock) -> None:
    """Every kind of event once or more, then the rollup: each counter counts it."""
    declare(m={"capacity": 1, "max_hold": "10m"}, other={"capacity": 3, "max_hold": "1h"})
    start_insights(clock)
    first = acquire("m", run_id="r1").slot_id  # grant at once (0 s)
    assert acquire("m", run_id="r2", request="q2").state == "waiting"
    clock.advance(seconds=10)
    assert release(first)  # the workflow's release; r2 is granted after 10 s
    second = acquire("m", run_id="r2", request="q2").slot_id  # confirms
    assert release(second, actor="alice")  # an operator's release
    acquire("m", run_id="r3")  # at once
    clock.advance(minutes=10)
    assert sweep().expired == 1  # max hold
    fourth = acquire("m", run_id="r4").slot_id  # at once
    assert acquire("m", run_id="r5", request="q5").state == "waiting"
    clock.advance(seconds=5)
    assert release(fourth)  # the workflow's release; r5 granted after 5 s ...
    clock.advance(minutes=2, seconds=1)
    report = sweep()  # ... does not confirm: the reservation lapses, r5 is granted again at once
    assert (report.lapsed, report.granted) == (1, 1)
    assert acquire("m", run_id="r5", request="q5").state == "busy"
    assert acquire("m", run_id="r6", timeout="1m").state == "waiting"
    clock.advance(seconds=61)
    assert sweep().timed_out == 1
    roll_up_all(clock)

    samples = scrape(scraper)
    assert one(samples, "stackbone_limit_capacity", limit="m") == 1
    assert one(samples, "stackbone_limit_busy", limit="m") == 1
    assert one(samples, "stackbone_limit_reserved", limit="m") == 0
    assert one(samples, "stackbone_limit_waiting", limit="m") == 0
    assert one(samples, "stackbone_limit_capacity", limit="other") == 3
    # r1, r2 (queue), r3, r4, r5 (queue), r5 again after its lapse (queue)
    assert one(samples, "stackbone_limit_grants_total", limit="m") == 6
    assert one(samples, "stackbone_limit_queue_grants_total", limit="m") == 3
    assert one(samples, "stackbone_limit_releases_total", limit="m", by="workflow") == 2
    assert one(samples, "stackbone_limit_releases_total", limit="m", by="operator") == 1
    assert one(samples, "stackbone_limit_releases_total", limit="m", by="max_hold") == 1
    assert one(samples, "stackbone_limit_releases_total", limit="m", by="run_end") == 0
    assert one(samples, "stackbone_limit_lapses_total", limit="m") == 1
    assert one(samples, "stackbone_limit_timeouts_total", limit="m") == 1
    assert one(samples, "stackbone_limit_grants_total", limit="other") == 0
    # waits: 0, 10, 0, 0, 5, 0 s
    histogram = "stackbone_limit_time_to_grant_seconds"
    assert one(samples, f"{histogram}_bucket", limit="m", le="0.0") == 4
    assert one(samples, f"{histogram}_bucket", limit="m", le="1.0") == 4
    assert one(samples, f"{histogram}_bucket", limit="m", le="5.0") == 5
    assert one(samples, f"{histogram}_bucket", limit="m", le="15.0") == 6
    assert one(samples, f"{histogram}_bucket", limit="m", le="+Inf") == 6
    assert one(samples, f"{histogram}_count", limit="m") == 6
    assert one(samples, f"{histogram}_sum", limit="m") == 15
    state = SweepState.objects.get()
    assert one(samples, "stackbone_sweep_last_run_timestamp_seconds") == state.last_run_at.timestamp()
    assert one(samples, "stackbone_sweep_last_duration_seconds") == pytest.approx(state.last_duration_ms / 1000)
    assert one(samples, "stackbone_insights_rolled_until_timestamp_seconds") == state.rolled_until.timestamp()
    # The rollup only reads the engine's rows: `limits verify` finds the history as it was.
    verification = verify()
    assert verification.ok, verification.violations
    assert verification.slots == 6


def test_busy_reserved_and_in_use_have_one_meaning_and_every_limit_metric_says_its_kind(scraper, clock) -> None:
    """SPEC 6.5 on /metrics: busy is confirmed slots, reserved the unconfirmed ones, and
    stackbone_limit_in_use both; a `kind` label tells a workspace limit from a workflow's bound."""
    from limits.runs import bounds as run_bounds

    declare(m={"capacity": 2, "max_hold": "10m"})
    run_bounds.sync(["sync_tenant"])
    first = acquire("m", run_id="r1").slot_id
    acquire("m", run_id="r2")
    acquire("m", run_id="r3", timeout="1h")
    release(first)  # r3 reserved: 1 busy, 1 reserved
    samples = scrape(scraper)
    assert one(samples, "stackbone_limit_busy", limit="m", kind="limit") == 1
    assert one(samples, "stackbone_limit_reserved", limit="m", kind="limit") == 1
    assert one(samples, "stackbone_limit_in_use", limit="m", kind="limit") == 2
    bound = "workflow.sync_tenant"
    assert one(samples, "stackbone_limit_capacity", limit=bound, kind="workflow") == 100_000  # per key only
    assert one(samples, "stackbone_limit_in_use", limit=bound, kind="workflow") == 0
    assert one(samples, "stackbone_limit_grants_total", limit="m", kind="limit") == 0
    for (name, labels), _value in samples.items():
        if name.startswith("stackbone_limit_"):
            assert dict(labels).get("kind") in ("limit", "workflow"), (name, labels)


def test_the_workers_and_the_runs_pending_for_one(scraper, clock, monkeypatch) -> None:
    """Issue 30, the second ceiling: the workers that answered, each one's concurrency and busy
    processes, and the runs no worker has started yet with the oldest one's wait."""
    import datetime as dt

    from limits import workers
    from stackbone.models import Run

    found = workers.Workers(
        (workers.Worker("celery@a", "a", "prefork", 4, 3), workers.Worker("celery@b", "b", "solo", 1, 0))
    )
    monkeypatch.setattr(workers, "ask", lambda: found)
    workers.forget_answers()
    for seconds_ago in (90, 10):
        created = clock.now() - dt.timedelta(seconds=seconds_ago)
        Run.objects.create(workflow="place_call", status="pending", created_at=created, updated_at=created)
    try:
        samples = scrape(scraper)
    finally:
        workers.forget_answers()
    assert one(samples, "stackbone_workers") == 2
    assert one(samples, "stackbone_worker_concurrency", worker="celery@a", host="a", pool="prefork") == 4
    assert one(samples, "stackbone_worker_busy", worker="celery@a", host="a", pool="prefork") == 3
    assert one(samples, "stackbone_worker_concurrency", worker="celery@b", host="b", pool="solo") == 1
    assert one(samples, "stackbone_runs_pending") == 2
    assert one(samples, "stackbone_runs_pending_oldest_seconds") == 90


def test_counters_never_go_back_when_old_minutes_are_purged(scraper, clock) -> None:
    declare(m={"capacity": 1, "max_hold": "1h"})
    start_insights(clock)
    release(acquire("m", run_id="r1").slot_id)
    roll_up_all(clock)
    before = one(scrape(scraper), "stackbone_limit_grants_total", limit="m")
    insights.purge(clock.now() + insights.INSIGHTS_RETENTION + insights.MINUTE)  # every minute row
    assert one(scrape(scraper), "stackbone_limit_grants_total", limit="m") == before == 1


def test_the_acquisitions_skipped_and_refused_are_counted_per_limit_live(scraper, clock) -> None:
    """SPEC 14.6 on /metrics: stackbone_limit_skipped_total and stackbone_limit_refused_total count
    each limit's acquisitions answered at once instead of queued, read from the limit's own
    counters (no rollup needed), with HELP and TYPE lines; 0 for a limit that answered none."""
    declare(
        exports={"capacity": 1, "max_hold": "30m", "on_full": "skip"},
        partner={"capacity": 1, "max_hold": "10m", "max_waiting": 2, "max_waiting_per_key": 1},
        quiet={"capacity": 1, "max_hold": "1m"},
    )
    acquire("exports", run_id="e1")
    for n in (2, 3):
        assert acquire("exports", run_id=f"e{n}").state == "skipped"
    acquire("partner", run_id="p1")
    acquire("partner", run_id="p2", key="acme", timeout="1h")
    assert acquire("partner", run_id="p3", key="acme", timeout="1h").reason == "key_queue_full"
    acquire("partner", run_id="p4", key="globex", timeout="1h")
    assert acquire("partner", run_id="p5", key="initech", timeout="1h").reason == "queue_full"
    assert acquire("partner", run_id="p6", on_full="skip").state == "skipped"
    samples = scrape(scraper)
    assert one(samples, "stackbone_limit_skipped_total", limit="exports") == 2
    assert one(samples, "stackbone_limit_refused_total", limit="exports") == 0
    assert one(samples, "stackbone_limit_skipped_total", limit="partner") == 1
    assert one(samples, "stackbone_limit_refused_total", limit="partner") == 2
    assert one(samples, "stackbone_limit_skipped_total", limit="quiet") == 0
    assert one(samples, "stackbone_limit_refused_total", limit="quiet") == 0
    text = scraper.get("/metrics").content.decode()
    for name in ("stackbone_limit_skipped_total", "stackbone_limit_refused_total"):
        assert f"\n# TYPE {name} counter\n" in text
        assert f"\n# HELP {name} Acquisitions " in text


def test_the_entries_replaced_are_counted_per_limit_live(scraper, clock) -> None:
    """SPEC 14.3, 14.6 on /metrics: stackbone_limit_replaced_total counts the waiting entries of
    each limit's queue a newer acquisition of their key replaced; 0 for a limit that replaced none."""
    declare(syncs={"capacity": 1, "max_hold": "30m", "on_full": "replace"}, quiet={"capacity": 1, "max_hold": "1m"})
    acquire("syncs", run_id="h1", key="acme")
    for n in range(3):
        acquire("syncs", run_id=f"a{n}", key="acme", timeout="1h")
    samples = scrape(scraper)
    assert one(samples, "stackbone_limit_replaced_total", limit="syncs") == 2
    assert one(samples, "stackbone_limit_replaced_total", limit="quiet") == 0
    assert "\n# TYPE stackbone_limit_replaced_total counter\n" in scraper.get("/metrics").content.decode()


def test_a_limit_that_left_the_config_keeps_its_skipped_and_refused_counts(scraper, clock) -> None:
    declare(exports={"capacity": 1, "max_hold": "30m", "on_full": "skip"})
    first = acquire("exports", run_id="e1").slot_id
    assert acquire("exports", run_id="e2").state == "skipped"
    release(first)
    declare(other={"capacity": 1, "max_hold": "1m"})  # exports is undeclared now, idle, never rolled up
    samples = scrape(scraper)
    assert one(samples, "stackbone_limit_skipped_total", limit="exports") == 1
    assert one(samples, "stackbone_limit_refused_total", limit="exports") == 0


@pytest.mark.parametrize("limits", [2, 30])
def test_a_scrape_is_six_queries_whatever_the_number_of_limits(
    scraper, clock, django_assert_num_queries, limits
) -> None:
    declare(**{f"l{i}": {"capacity": 2, "max_hold": "1h"} for i in range(limits)})
    start_insights(clock)
    for i in range(limits):
        acquire(f"l{i}", run_id=f"a{i}")
        acquire(f"l{i}", run_id=f"b{i}")
        acquire(f"l{i}", run_id=f"c{i}")  # waits
    roll_up_all(clock)
    # the limits, their totals, the sweep's state, the limits that skipped or refused, the hosts' clock
    # skew, the runs pending for a worker
    with django_assert_num_queries(6):
        samples = scrape(scraper)
    assert one(samples, "stackbone_limit_grants_total", limit=f"l{limits - 1}") == 2
    assert one(samples, "stackbone_limit_waiting", limit="l0") == 1


def test_no_token_or_a_wrong_one_is_refused(settings, clock) -> None:
    settings.STACKBONE_METRICS_TOKEN = TOKEN
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}):
        response = Client(headers=headers).get("/metrics")
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"stackbone_" not in response.content
    assert Client(headers={"Authorization": f"bearer {TOKEN}"}).get("/metrics").status_code == 200


def test_without_a_token_set_it_is_not_found_outside_debug(settings) -> None:
    settings.STACKBONE_METRICS_TOKEN = ""
    settings.DEBUG = False
    assert Client().get("/metrics").status_code == 404
    assert Client(headers={"Authorization": "Bearer "}).get("/metrics").status_code == 404
    settings.DEBUG = True
    assert Client().get("/metrics").status_code == 200


def test_it_rejects_post(scraper) -> None:
    assert scraper.post("/metrics").status_code == 405


def test_a_paused_limit_is_1_on_stackbone_limit_paused_and_the_scrape_keeps_its_queries(
    scraper, clock, django_assert_num_queries
) -> None:
    """SPEC 5.6 on /metrics: stackbone_limit_paused is 1 while an operator has paused the limit, 0
    otherwise, for every limit with its kind; read from the same row, so no query more."""
    from limits.runs import bounds as run_bounds
    from limits.services import pause_limit, resume_limit

    declare(m={"capacity": 2, "max_hold": "10m"}, other={"capacity": 3, "max_hold": "1h"})
    run_bounds.sync(["sync_tenant"])
    pause_limit("m", actor="test")
    with django_assert_num_queries(6):
        samples = scrape(scraper)
    assert one(samples, "stackbone_limit_paused", limit="m") == 1
    assert one(samples, "stackbone_limit_paused", limit="other") == 0
    assert one(samples, "stackbone_limit_paused", limit="workflow.sync_tenant", kind="workflow") == 0
    resume_limit("m", actor="test")
    assert one(scrape(scraper), "stackbone_limit_paused", limit="m") == 0
