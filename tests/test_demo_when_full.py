"""Issue 47: the live demo shows, within its first minute, what runs do instead of waiting when a
limit is full (SPEC 14): a run skipped, a run refused by a queue's cap, an acquisition replaced
by a newer one of its account, naming it, and a run cancelled by a newer one of its key
(cancel_running), naming it. The demo's loop part (studio/demo/when_full.py) is played
here on the test's clock, its runs moved as a worker moves them (advance, every tick), and then
Studio's pages are read as a newcomer reads them: the run pages' Outcome, the bounds' Activity,
the limit's counts. Both databases.

Must never happen: a scene that shows nothing within a minute; a skipped or refused run that
waits in a queue; a replaced run that does not name the run that replaced it; a cancelled run that does not name the
run that cancelled it, or a canceller that did not get the slot."""

from __future__ import annotations

import pytest
from django.test import Client

from limits import services
from limits.models import Limit, QueueEntry
from limits.verify import verify
from stackbone.models import Run
from stackbone.runs.runtime import advance
from studio.demo.reset import reset_demo
from studio.demo.when_full import ACCOUNT, FIRST, REFRESH_HOLD, ROUND, SCENES, WhenFull
from studio.demo.workspace import workspace
from tests.factories import assert_counters_match_rows
from tests.views.conftest import make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_worker")]

TICK = 0.5


def work() -> None:
    """A worker's turn: every run that may move, moves (a run waiting in a queue stays suspended)."""
    movable = Run.objects.filter(status__in=["queued", "pending", "running"], suspended=False)
    for run_id in movable.values_list("id", flat=True):
        advance(run_id)


def play(clock, when_full: WhenFull, seconds: float) -> None:
    now = 0.0
    while now <= seconds:
        when_full.tick(now)
        work()
        clock.advance(seconds=TICK)
        now += TICK


@pytest.fixture
def viewer() -> Client:
    client = Client()
    client.force_login(make_user("newcomer"))
    return client


@pytest.fixture
def demo(clock) -> tuple[WhenFull, list[str]]:
    services.sync_workspace(workspace)
    told: list[str] = []
    when_full = WhenFull(start=0.0, say=told.append)
    play(clock, when_full, FIRST + 10)
    return when_full, told


def test_within_a_minute_studio_shows_a_skip_a_refusal_a_replace_and_a_cancel(demo, viewer: Client) -> None:
    when_full, told = demo
    [first] = when_full.played
    assert list(first) == list(SCENES) == ["skip", "refuse", "replace", "cancel"]

    # The skip: the second rebuild ended at once, its page says why, its bound's activity shows it.
    rebuilt, skipped = first["skip"].runs
    assert first["skip"].statuses() == ["completed", "skipped"]
    page = viewer.get(f"/studio/runs/{skipped}/").content.decode()
    assert 'id="run-outcome"' in page and 'data-reason="limit_full"' in page and "The limit is full" in page
    assert 'href="/studio/limits/workflow.rebuild_search_index/"' in page
    activity = viewer.get("/studio/limits/workflow.rebuild_search_index/").content.decode()
    assert f">{skipped}</a>" in activity and "was skipped, never started" in activity

    # The refusal by the queue's cap: the third digest found the queue full.
    assert first["refuse"].statuses() == ["completed", "completed", "skipped"]
    refused = first["refuse"].runs[2]
    page = viewer.get(f"/studio/runs/{refused}/").content.decode()
    assert 'data-reason="queue_full"' in page and "The queue is full" in page
    activity = viewer.get("/studio/limits/workflow.send_digest/").content.decode()
    assert f">{refused}</a>" in activity and "the queue is full" in activity
    assert Limit.objects.get(name="workflow.send_digest").refused_count == 1

    # The replace: the second refresh of acme waited and the third took its place.
    *pair, newer = first["replace"].runs
    [(replaced, _)] = Run.objects.filter(id__in=pair, output__replaced_by_run=newer).values_list("id", "status")
    [holder] = [run_id for run_id in pair if run_id != replaced]
    assert Run.objects.get(id=replaced).output == {"account": ACCOUNT, "slot_id": None, "replaced_by_run": newer}
    assert QueueEntry.objects.get(run_id=replaced, limit__name="account-refresh").state == "replaced"
    page = viewer.get(f"/studio/runs/{replaced}/").content.decode()
    assert newer in page and "replaced_by_run" in page
    limit_page = viewer.get("/studio/limits/account-refresh/").content.decode()
    assert "0 skipped, 0 refused, 1 replaced" in limit_page
    assert Run.objects.get(id=holder).output["slot_id"]  # it holds acme's slot ...
    waiting = QueueEntry.objects.filter(limit__name="account-refresh", state="waiting")
    assert [entry.run_id for entry in waiting] == [newer]  # ... the newer waits

    # The cancel: the first deploy of the branch was cancelled by the second, which deployed.
    cancelled, canceller = first["cancel"].runs
    assert first["cancel"].statuses() == ["cancelled", "completed"]
    ended = Run.objects.get(id=cancelled)
    assert (ended.end_reason, ended.end_limit, ended.caused_by) == (
        "cancel_running",
        "workflow.deploy_branch",
        canceller,
    )
    page = viewer.get(f"/studio/runs/{cancelled}/").content.decode()
    assert 'id="run-outcome"' in page and f'href="/studio/runs/{canceller}/"' in page
    activity = viewer.get("/studio/limits/workflow.deploy_branch/").content.decode()
    assert f">{cancelled}</a>" in activity and "was cancelled by" in activity
    assert Limit.objects.get(name="workflow.deploy_branch").cancelled_count == 1

    # The demo's log names each scene's runs' pages, once.
    assert told == [
        f"when full, skip: /studio/runs/{rebuilt}/, /studio/runs/{skipped}/",
        "when full, refuse: " + ", ".join(f"/studio/runs/{run_id}/" for run_id in first["refuse"].runs),
        f"when full, cancel: /studio/runs/{cancelled}/, /studio/runs/{canceller}/",  # told as it plays
        "when full, replace: " + ", ".join(f"/studio/runs/{run_id}/" for run_id in first["replace"].runs),
    ]  # the replace is told once its third run starts, a tick or more later
    assert verify().ok, verify().violations


def test_the_scenes_play_again_each_round_and_the_refreshes_give_their_slots_back(demo, clock) -> None:
    when_full, told = demo
    play_until = ROUND + REFRESH_HOLD + 2 * FIRST
    now = FIRST + 10 + TICK
    while now <= play_until:
        when_full.tick(now)
        work()
        clock.advance(seconds=TICK)
        now += TICK

    assert len(when_full.played) == 2 and len(told) == 4  # told once
    second = when_full.played[1]
    assert second["skip"].statuses() == ["completed", "skipped"]
    assert second["refuse"].statuses() == ["completed", "completed", "skipped"]
    assert [Run.objects.get(id=run_id).status for run_id in second["replace"].runs] == ["completed"] * 3
    assert second["cancel"].statuses() == ["cancelled", "completed"]
    *pair, newer = second["replace"].runs
    replaced_by = [(Run.objects.get(id=run_id).output or {}).get("replaced_by_run") for run_id in pair]
    assert sorted(replaced_by, key=bool) == [None, newer]  # one held acme's slot, the other was replaced
    assert_counters_match_rows("account-refresh")
    assert verify().ok, verify().violations
    # --reset-demo clears them too (the demo's runs are marked).
    report = reset_demo()
    assert report.runs and not Run.objects.exists()
