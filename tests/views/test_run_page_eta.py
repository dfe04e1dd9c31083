"""A waiting run's page shows, for each limit it waits for, its place in the queue, its key's
place, and an estimated wait (limits.eta) from the grant rate the sweep's rollup recorded; its
queries do not grow with the queue."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from limits import insights, selectors, services
from limits.models import Limit
from stackbone.models import Run, Step
from tests.factories import declare, rolled_up_grants

pytestmark = pytest.mark.django_db


def waiting_run(limits: list[str], *, key: str | None = None) -> Run:
    """A running run suspended on its wait for `limits` (one, or several at once)."""
    now = timezone.now()
    run = Run.objects.create(
        workflow="place_call", status=Run.Status.RUNNING, suspended=True, created_at=now, started_at=now, updated_at=now
    )
    Step.objects.create(
        run=run, seq=1, name="Esperando hueco · " + " + ".join(limits), kind="hook", status="waiting", started_at=now
    )
    if len(limits) == 1:
        assert services.acquire(limits[0], run_id=run.id, key=key, timeout="1h").state == "waiting"
    else:
        assert services.acquire_group(limits, run_id=run.id, key=key, timeout="1h").state == "waiting"
    return run


def wait_card(page: str, limit: str) -> str:
    cards = re.findall(r'<li class="wait".*?</li>', page, re.S)
    (card,) = [card for card in cards if f'href="/studio/limits/{limit}/">{limit}</a>' in card]
    return re.sub(r"\s+", " ", card)


def fill(limit: str, holders: int, *, waiting: int = 0, prefix: str = "") -> None:
    for n in range(holders):
        assert services.acquire(limit, run_id=f"{prefix}holder-{n}").state == "busy"
    for n in range(waiting):
        assert services.acquire(limit, run_id=f"{prefix}waiter-{n}", timeout="1h").state == "waiting"


@pytest.fixture
def calls(clock) -> Run:
    """voice-calls (capacity 2) granted 2 slots in the last 10 rolled-up minutes (1 every 300 s),
    then runs joined its queue: this run is 3rd of 5."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    rolled_up_grants(clock, lambda: fill("voice-calls", 2, waiting=2))
    run = waiting_run(["voice-calls"])
    fill("voice-calls", 0, waiting=2, prefix="late-")
    return run


def test_the_rate_comes_from_the_sweeps_rollup(calls) -> None:
    limit = Limit.objects.get(name="voice-calls")
    assert insights.grant_rates([limit.id]) == {limit.id: 2 / 600}


def test_a_waiting_run_shows_its_place_and_estimated_wait(calls, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{calls.id}/").content.decode()
    card = wait_card(page, "voice-calls")
    assert "<strong>3rd of 5</strong> in the queue" in card
    assert '<dd class="eta"><strong>about 15 min</strong></dd>' in card  # 3 / (2 / 600 s) = 900 s
    assert '<dt>Why</dt><dd class="reason" data-reason="limit_full">The limit is full</dd>' in card  # SPEC 6.5
    assert "Key's place" not in card


def test_deeper_than_the_cap_from_both_ends_the_place_and_its_wait_are_estimated(
    calls, operator_client, monkeypatch
) -> None:
    """With the cap of exact places lowered to 2, the 3rd of 5 is 2 from the head and 2 from the
    tail: its page says "about", and the wait counts from that estimated place."""
    monkeypatch.setattr("limits.selectors.places.EXACT_PLACES", 2)
    (entry,) = selectors.waits_of_run(calls.id)
    assert entry.place_approximate and entry.place == 3
    card = wait_card(operator_client.get(f"/studio/runs/{calls.id}/").content.decode(), "voice-calls")
    assert "<strong>about 3rd of 5</strong> in the queue" in card and "estimated" in card
    assert '<dd class="eta"><strong>about 15 min</strong></dd>' in card


def test_the_estimate_is_unknown_when_nothing_was_granted_recently(calls, clock, operator_client) -> None:
    clock.advance(minutes=12)  # the rolled-up minute left the 10-minute window
    services.sweep()
    page = operator_client.get(f"/studio/runs/{calls.id}/").content.decode()
    card = wait_card(page, "voice-calls")
    assert "<strong>unknown</strong>" in card and "no slot granted in the last 10 minutes" in card
    assert "<strong>3rd of 5</strong>" in card


def test_the_place_moves_up_as_runs_ahead_get_their_slots(calls, operator_client) -> None:
    (first,) = selectors.live_slots_of_run("holder-0")
    services.release(first.id)  # waiter-0 is granted (reserved): this run is now 2nd of 4
    card = wait_card(operator_client.get(f"/studio/runs/{calls.id}/").content.decode(), "voice-calls")
    assert "<strong>2nd of 4</strong> in the queue" in card
    assert "<strong>about 10 min</strong>" in card  # 2 x 300 s


def test_a_run_with_a_key_shows_its_keys_place_and_counts_its_estimate_from_the_limits_queue(
    clock, operator_client
) -> None:
    declare(partner_api={"capacity": 3, "max_hold": "10m", "per_key": 1})

    def grants() -> None:
        for key in ("acme", "globex", "initech"):
            assert services.acquire("partner-api", run_id=f"holder-{key}", key=key).state == "busy"
        services.acquire("partner-api", run_id="acme-1", key="acme", timeout="1h")
        services.acquire("partner-api", run_id="globex-1", key="globex", timeout="1h")

    rolled_up_grants(clock, grants)  # 3 grants in 10 minutes: one every 200 s
    run = waiting_run(["partner-api"], key="acme")
    card = wait_card(operator_client.get(f"/studio/runs/{run.id}/").content.decode(), "partner-api")
    assert "<strong>3rd of 3</strong> in the queue" in card
    assert "<strong>2nd of 2</strong> for key" in card and ">acme<" in card
    assert "<strong>about 10 min</strong>" in card  # 3rd in the limit's queue x 200 s


def test_a_run_waiting_for_several_limits_expects_the_longest_of_their_waits(clock, operator_client) -> None:
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})

    def grants() -> None:
        for n in range(3):  # a: 4 grants (one every 150 s), b: 1 (one in 600 s)
            services.release(services.acquire("a", run_id=f"quick-{n}").slot_id)
        fill("a", 1, waiting=1, prefix="a-")
        fill("b", 1, prefix="b-")

    rolled_up_grants(clock, grants)
    run = waiting_run(["a", "b"])
    page = operator_client.get(f"/studio/runs/{run.id}/").content.decode()
    a, b = wait_card(page, "a"), wait_card(page, "b")
    assert "<strong>2nd of 2</strong>" in a and "<strong>about 5 min</strong>" in a  # 2 x 150 s
    assert "<strong>1st of 1</strong>" in b and "<strong>about 10 min</strong>" in b  # 1 x 600 s
    assert re.search(r'id="run-eta">[^<]*expected wait <strong>about 10 min</strong>', page)


def test_the_wait_step_keeps_its_name_and_says_what_it_means(calls, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{calls.id}/").content.decode()
    (name,) = re.findall(r'<span class="step-name">(.*?)</span>', page, re.S)
    assert name == 'Esperando hueco · <a href="/studio/limits/voice-calls/">voice-calls</a>'
    assert re.search(r'</span>\s*<span class="muted small step-meaning" lang="en">waiting for a slot</span>', page)


def test_no_time_on_the_page_reads_just_now_ago(calls, operator_client) -> None:
    """A wait, a held slot and a step that began this very second."""
    services.acquire("voice-calls", run_id=calls.id, request="another", timeout="1h")
    page = operator_client.get(f"/studio/runs/{calls.id}/").content.decode()
    assert "just now ago" not in page and "since just now ago" not in page
    assert "started just now" in page and "Waiting</dt><dd>since just now" in page


def test_times_a_while_ago_read_with_ago_and_for(calls, clock, operator_client) -> None:
    clock.advance(seconds=75)
    page = operator_client.get(f"/studio/runs/{calls.id}/").content.decode()
    assert "started 1m 15s ago" in page and "Waiting</dt><dd>for 1m 15s" in page


def test_a_held_slot_granted_this_second_reads_just_now(clock, operator_client) -> None:
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    now = timezone.now()
    run = Run.objects.create(workflow="w", status="running", created_at=now, started_at=now, updated_at=now)
    services.acquire("voice-calls", run_id=run.id)
    page = operator_client.get(f"/studio/runs/{run.id}/").content.decode()
    assert "<td>just now</td>" in page and " ago" not in page
    clock.advance(seconds=5)
    assert "<td>5s ago</td>" in operator_client.get(f"/studio/runs/{run.id}/").content.decode()


def test_the_page_refreshes_its_places_live(calls, operator_client, htmx) -> None:
    page = operator_client.get(f"/studio/runs/{calls.id}/").content.decode()
    assert re.search(r'<div id="run-live"[^>]*hx-trigger="every 3s', page, re.S)
    partial = operator_client.get(f"/studio/runs/{calls.id}/", headers=htmx).content.decode()
    assert partial.lstrip().startswith('<div id="run-live"') and "<strong>3rd of 5</strong>" in partial


def _queries(operator_client, run: Run) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert operator_client.get(f"/studio/runs/{run.id}/").status_code == 200
    return [query["sql"] for query in captured.captured_queries]


def test_the_page_reads_as_many_queries_whatever_the_length_of_the_queues(
    clock, operator_client, django_assert_num_queries
) -> None:
    declare(a={"capacity": 1, "max_hold": "1h", "per_key": 1}, b={"capacity": 1, "max_hold": "1h"})

    def grants() -> None:
        fill("a", 1, prefix="a-")
        fill("b", 1, prefix="b-")

    rolled_up_grants(clock, grants)
    run = waiting_run(["a", "b"], key="acme")
    short = _queries(operator_client, run)
    for n in range(40):  # 40 more in each queue (20 of them in acme's), then another run
        services.acquire("a", run_id=f"more-a-{n}", key="acme" if n % 2 else None, timeout="1h")
        services.acquire("b", run_id=f"more-b-{n}", timeout="1h")
    run2 = waiting_run(["a", "b"], key="acme")  # 42nd in each queue, 22nd in acme's
    with django_assert_num_queries(len(short)):
        page = operator_client.get(f"/studio/runs/{run2.id}/").content.decode()
    assert "<strong>42nd of 42</strong>" in wait_card(page, "a")
    assert "<strong>22nd of 22</strong> for key" in wait_card(page, "a")
    assert "<strong>42nd of 42</strong>" in wait_card(page, "b")
    assert "Key's place" not in wait_card(page, "b") and "only the total applies" in wait_card(page, "b")


def test_a_runs_waits_are_read_in_two_queries(calls, django_assert_num_queries) -> None:
    with django_assert_num_queries(2):  # the entries with their places, then the grant rates
        (entry,) = selectors.waits_of_run(calls.id)
    assert (entry.place, entry.key_place, entry.eta_seconds) == (3, None, 900)


def test_after_a_burst_of_fast_grants_the_page_says_under_a_minute(
    clock, operator_client, django_assert_num_queries
) -> None:
    """Issue 30: a queue of 14 behind 20 hand-offs in the last 20 s drained in seconds, but the
    10-minute rate (2 grants / 600 s) said "about 70 min". With 21 grants in the last 60 s the
    rate is 21 / 60 s (limits.eta.grant_rate): the 14th expects 40 s; still two queries."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    rolled_up_grants(
        clock, lambda: [services.release(services.acquire("voice-calls", run_id=f"e{n}").slot_id) for n in range(2)]
    )
    clock.advance(seconds=30)
    for n in range(20):
        slot = services.acquire("voice-calls", run_id=f"fast-{n}").slot_id
        clock.advance(seconds=1)
        assert services.release(slot)
    fill("voice-calls", 1, waiting=13)
    run = waiting_run(["voice-calls"])
    with django_assert_num_queries(2):
        (entry,) = selectors.waits_of_run(run.id)
    assert (entry.place, entry.eta_seconds) == (14, 40)
    card = wait_card(operator_client.get(f"/studio/runs/{run.id}/").content.decode(), "voice-calls")
    assert '<dd class="eta"><strong>under a minute</strong></dd>' in card
