"""The live demo shows keys and several limits (issue 13): `partner-api` has a pool per account,
and `partner_call` takes `partner-api` and `voice-calls` together with the account's key, so a
busy account waits for both, holding neither, while the other accounts go on."""

from __future__ import annotations

import pytest

from limits import services
from limits.models import Slot
from limits.verify import verify
from studio.demo.workspace import workspace
from studio.models import Run
from studio.runs.runtime import advance
from studio.workflows import start_run
from tests.factories import assert_counters_match_rows, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

BOTH = "Esperando hueco · partner-api + voice-calls"


@pytest.fixture
def demo_limits() -> None:
    services.sync_workspace(workspace)


def test_the_demo_gives_each_account_a_pool_of_partner_api() -> None:
    partner_api = workspace.limits["partner-api"]
    assert (partner_api.capacity, partner_api.per_key) == (5, 2)


def test_a_partner_call_takes_both_limits_with_the_accounts_key_and_gives_them_back(demo_limits) -> None:
    run = start_run("partner_call", {"call_id": "bridge-1", "account": "acme"})

    done = Run.objects.get(id=run.id)
    assert done.status == "completed" and done.output == {"call_id": "bridge-1", "account": "acme"}
    assert [s.name for s in done.steps][0] == BOTH
    taken = Slot.objects.filter(run_id=run.id)
    assert sorted(taken.values_list("limit__name", "key", "state")) == [
        ("box", "partner_call", "run_ended"),  # the place it executed in (SPEC 12), freed at its end
        ("partner-api", "acme", "released"),
        ("voice-calls", "acme", "released"),
    ]


def test_a_busy_accounts_partner_call_waits_for_both_holding_neither_while_others_go_on(demo_limits, no_worker) -> None:
    sessions = [start_run("open_session", {"label": f"s{i}", "account": "acme", "demo": True}) for i in range(2)]
    for session in sessions:
        assert advance(session.id) == "completed"
    waiting = start_run("partner_call", {"call_id": "bridge-acme", "account": "acme", "demo": True})
    other = start_run("partner_call", {"call_id": "bridge-globex", "account": "globex", "demo": True})

    assert advance(waiting.id) == "suspended"
    assert advance(other.id) == "completed"  # another account's pool had room
    assert [s.name for s in Run.objects.get(id=waiting.id).steps] == [BOTH]
    assert queue("partner-api") == [waiting.id] and queue("voice-calls") == [waiting.id]
    assert queue("box") == [waiting.id]  # it gave its box slot back to wait (SPEC 12.2)
    assert not Slot.objects.filter(run_id=waiting.id, state__in=["busy", "reserved"]).exists()

    services.release(Run.objects.get(id=sessions[0].id).output["slot_id"])  # acme's pool has room again
    assert (waiting.id, "reserved") in holders("partner-api") and holders("voice-calls") == [(waiting.id, "reserved")]
    assert advance(waiting.id) == "completed"
    assert holders("voice-calls") == []
    assert verify().ok, verify().violations
    assert_counters_match_rows("partner-api")
    assert_counters_match_rows("voice-calls")


def test_the_demo_box_runs_nine_at_once_and_no_workflow_more_than_six(demo_limits, no_worker) -> None:
    """SPEC 12 in the demo: base 6, burst 1.5; the Limits list shows the box moving."""
    box = workspace.run_concurrency
    assert box is not None and (box.base, box.burst, box.ceiling) == (6, 1.5, 9)
    runs = [start_run("sync_tenant", {"tenant": f"t{i}"}, concurrency_key=f"t{i}") for i in range(7)]
    assert [Run.objects.get(id=run.id).status for run in runs] == ["pending"] * 6 + ["queued"]
    assert queue("box") == [runs[6].id]
    assert advance(runs[0].id) == "completed"
    assert holders("box")[-1] == (runs[6].id, "reserved")
    assert verify(["box"]).ok
