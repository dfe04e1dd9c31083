"""SPEC 12: the box's own run concurrency. Each test names the rule it holds; each fails when its
rule breaks (on SQLite and on PostgreSQL, where the acquisition is limits_acquire_group).

Must never happen (limits verify checks the rows): more runs executing than floor(base x burst),
a workflow executing more than base runs, a run resumed from a wait without its box slot."""

from __future__ import annotations

import pytest

from limits import services
from limits.config import ConfigError, define_workspace
from limits.models import AuditEvent, Limit, QueueEntry, Slot
from limits.verify import verify
from limits.workflow import SlotTimeoutError, acquire_slot, release_slot
from stackbone.models import Run
from stackbone.runs.runtime import advance
from studio.workflows import cancel_run, start_run, step, workflow
from tests.factories import assert_counters_match_rows, holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

PARTNER = {"partner-api": {"capacity": 1, "max_hold": "1h"}}


@step
def work(label: str) -> str:
    return label


@workflow(name="box_plain")
def plain(input: dict) -> str:
    return work(input["label"])


@workflow(name="box_other")
def other(input: dict) -> str:
    return work(input["label"])


@workflow(name="box_partner")
def with_partner(input: dict) -> str:
    slot = acquire_slot("partner-api", label=input["label"])
    done = work(input["label"])
    release_slot(slot.id)
    return done


def box(base: int, burst: float = 2.0, limits: dict | None = None) -> Limit:
    services.sync_workspace(define_workspace(limits=limits or PARTNER, run_concurrency={"base": base, "burst": burst}))
    return Limit.objects.get(name="box")


def status(run: Run) -> str:
    return Run.objects.get(id=run.id).status


def executing() -> list[str]:
    """Runs holding a box slot (busy or reserved), oldest grant first."""
    return [run_id for run_id, _ in holders("box")]


def test_12_1_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"run_concurrency: burst must be from 1.0 to 10.0, not 11"):
        define_workspace(limits={}, run_concurrency={"base": 10, "burst": 11})
    with pytest.raises(ConfigError, match=r"run_concurrency: base must be"):
        define_workspace(limits={}, run_concurrency={"base": 0})
    with pytest.raises(ConfigError, match=r"run_concurrency: unknown field 'bursts'"):
        define_workspace(limits={}, run_concurrency={"base": 2, "bursts": 2})
    with pytest.raises(ConfigError, match=r"limit 'box': the name belongs to the box"):
        define_workspace(limits={"box": {"capacity": 1, "max_hold": "1m"}}, run_concurrency={"base": 2})
    assert define_workspace(limits={}, run_concurrency={"base": 3}).run_concurrency.ceiling == 6  # burst 2.0


def test_12_2_the_box_bound_is_a_limit_of_kind_box_with_the_ceiling_and_no_max_hold() -> None:
    limit = box(base=3, burst=1.5)
    assert (limit.kind, limit.capacity, limit.per_key, limit.burst) == ("box", 4, 3, 1.5)  # floor(4.5)
    assert limit.max_hold_ms >= 30 * 24 * 3600 * 1000
    services.sync_workspace(define_workspace(limits=PARTNER))  # run_concurrency left the config
    assert Limit.objects.get(name="box").declared is False
    assert Run.objects.count() == 0


def test_12_2_runs_past_the_ceiling_are_queued_and_start_in_trigger_order(no_worker) -> None:
    box(base=2, burst=1.5)  # ceiling 3, base 2
    runs = [start_run(plain if i % 2 else other, {"label": f"r{i}"}) for i in range(5)]
    assert [status(run) for run in runs] == ["pending", "pending", "pending", "queued", "queued"]
    assert queue("box") == [runs[3].id, runs[4].id]
    assert advance(runs[0].id) == "completed"
    assert holders("box")[-1] == (runs[3].id, "reserved")  # the oldest queued run gets the place
    assert verify().ok, verify().violations
    assert_counters_match_rows("box")


def test_12_3_no_workflow_executes_more_than_base_runs(no_worker) -> None:
    box(base=2, burst=3.0)  # ceiling 6
    runs = [start_run(plain, {"label": f"p{i}"}) for i in range(3)]
    assert [status(run) for run in runs] == ["pending", "pending", "queued"]
    another = start_run(other, {"label": "o"})
    assert status(another) == "pending"  # another workflow is not held back by the first's base


def test_12_2_a_run_waiting_for_a_slot_gives_its_box_slot_back_and_resumes_with_both(no_worker) -> None:
    box(base=1, burst=1.0)  # one run executes at a time
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run(with_partner, {"label": "w"})
    assert advance(waiting.id) == "suspended"  # partner-api is full: it waits, holding no box slot
    assert executing() == []
    assert Slot.objects.get(run_id=waiting.id, limit__name="box").freed_by == "wait"
    second = start_run(plain, {"label": "second"})
    assert status(second) == "pending"  # the box slot it gave back serves another run
    services.release(holder)
    # partner-api is free but the box is full: the waiting run gets neither until both are free.
    assert holders("partner-api") == [] and queue("partner-api") == [waiting.id]
    assert advance(second.id) == "completed"
    assert sorted(holders("partner-api") + holders("box")) == [(waiting.id, "reserved")] * 2
    assert advance(waiting.id) == "completed"
    assert not Slot.objects.filter(state__in=["busy", "reserved"]).exists()
    assert verify().ok, verify().violations
    assert_counters_match_rows("box")
    assert_counters_match_rows("partner-api")


def test_12_2_a_run_whose_limit_has_room_keeps_its_box_slot_and_never_suspends(no_worker) -> None:
    box(base=1, burst=1.0)
    run = start_run(with_partner, {"label": "free"})
    behind = start_run(plain, {"label": "behind"})
    assert status(behind) == "queued"
    assert advance(run.id) == "completed"
    freed = Slot.objects.filter(run_id=run.id, limit__name="box")
    assert [slot.state for slot in freed] == ["run_ended"]  # one box slot, held to the end


def test_12_4_a_resuming_run_keeps_the_place_its_wait_began(no_worker) -> None:
    box(base=2, burst=1.0)
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run(with_partner, {"label": "w"})
    assert advance(waiting.id) == "suspended"
    started = [start_run(other, {"label": f"o{i}"}) for i in range(3)]
    assert [status(run) for run in started] == ["pending", "pending", "queued"]
    services.release(holder)  # partner-api free: the waiting run is ahead of o2 in the box queue
    assert advance(started[0].id) == "completed"
    assert (waiting.id, "reserved") in holders("box") and status(started[2]) == "queued"


def test_12_5_operators_change_base_and_burst_audited_and_a_deploy_keeps_them(no_worker) -> None:
    box(base=1, burst=1.0)
    first, second = start_run(plain, {"label": "1"}), start_run(other, {"label": "2"})
    assert status(second) == "queued"
    services.set_box(base=2, burst=2.0, actor="ops")  # raising grants at once
    assert holders("box")[-1] == (second.id, "reserved")
    limit = box(base=1, burst=1.0)  # a deploy keeps the overrides
    assert (limit.per_key, limit.burst, limit.capacity) == (2, 2.0, 4)
    services.set_box(base=None, burst=None, actor="ops")  # reset: lowering takes nothing back
    limit = Limit.objects.get(name="box")
    assert (limit.per_key, limit.burst, limit.capacity, limit.in_use) == (1, 1.0, 1, 2)
    actions = list(
        AuditEvent.objects.filter(limit=limit, action="box").order_by("id").values_list("actor", "new_value")
    )
    assert actions == [("ops", "base 2, burst 2, ceiling 4"), ("ops", "base 1, burst 1, ceiling 1")]
    with pytest.raises(services.LimitsError, match="burst must be from 1.0 to 10.0") as error:
        services.set_box(burst=0.5, actor="ops")
    assert error.value.field == "burst"
    with pytest.raises(services.LimitsError, match="change its base and burst"):
        services.set_capacity("box", 9, actor="ops")
    cancel_run(first.id)


def test_12_5_the_audit_writes_a_burst_as_its_shortest_exact_text(no_worker) -> None:
    """The same text on both databases (PostgreSQL: limits_box_text), where a rounding to 5
    decimals wrote 1.01121 for 1.011205 on one and 1.0112 on the other."""
    box(base=2, burst=1.0)
    services.set_box(burst=1.011205, actor="ops")
    services.set_box(burst=2.5, actor="ops")
    texts = list(AuditEvent.objects.filter(action="box").order_by("id").values_list("old_value", "new_value"))
    assert texts == [
        ("base 2, burst 1, ceiling 2", "base 2, burst 1.011205, ceiling 2"),
        ("base 2, burst 1.011205, ceiling 2", "base 2, burst 2.5, ceiling 5"),
    ]


def test_verify_finds_a_run_that_executed_without_its_box_slot(no_worker) -> None:
    """limits verify, check k: the rows of a run that took a step after its box slot was freed."""
    box(base=1, burst=1.0)
    run = start_run(plain, {"label": "x"})
    slot = Slot.objects.get(run_id=run.id, limit__name="box")
    Slot.objects.filter(id=slot.id).update(state="released", freed_at=slot.confirmed_at)  # as if given back at once
    assert advance(run.id) == "completed"
    found = verify(["box"]).violations
    assert any("without a box slot" in violation for violation in found), found


def test_6_5_a_run_waiting_for_the_box_says_why(no_worker) -> None:
    """The reason names the box itself, on the box's queue and on a limit's queue alike."""
    box(base=1, burst=2.0)  # ceiling 2, one run per workflow
    running = start_run(plain, {"label": "p1"})
    same_workflow = start_run(plain, {"label": "p2"})
    assert status(same_workflow) == "queued"
    entry = QueueEntry.objects.get(run_id=same_workflow.id, limit__name="box", state="waiting")
    reason = services.why_waiting([entry])[entry.id]
    assert (reason.code, reason.limit, reason.key) == ("workflow_at_base", "box", "box_plain")
    other_run = start_run(other, {"label": "o1"})
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run(with_partner, {"label": "w"})  # box full: 2 execute
    entry = QueueEntry.objects.get(run_id=waiting.id, limit__name="box", state="waiting")
    assert services.why_waiting([entry])[entry.id].code == "box_full"
    services.release(holder)
    assert [status(run) for run in (running, other_run)] == ["pending", "pending"]


@workflow(name="box_total_above_base", concurrency={"total": 5})
def total_above_base(input: dict) -> str:
    slot = acquire_slot("partner-api", label=input["label"])  # waits, giving its box slot back
    release_slot(slot.id)
    return work(input["label"])


@workflow(name="box_holds_partner", limits=["wide"])
def holds_wide(input: dict) -> str:
    return work(input["label"])


@workflow(name="box_also_holds_partner", limits=["wide"])
def also_holds_wide(input: dict) -> str:
    return work(input["label"])


def test_12_3_a_total_above_the_base_acts_as_the_base_for_whole_runs(no_worker) -> None:
    """Two runs of a workflow with total 5 wait in their bodies: they execute nothing (their box
    slots are back), yet a third does not start: the base (2) caps the whole runs its bound
    serves, suspended ones included."""
    box(base=2, burst=5.0)
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    runs = [start_run(total_above_base, {"label": f"t{i}"}) for i in range(2)]
    assert [advance(run.id) for run in runs] == ["suspended", "suspended"]
    assert executing() == []
    third = start_run(total_above_base, {"label": "t2"})
    assert status(third) == "queued"
    entry = QueueEntry.objects.get(run_id=third.id, limit__name="workflow.box_total_above_base")
    assert services.why_waiting([entry])[entry.id].code == "whole_runs_at_base"
    services.release(holder)
    assert verify().ok, verify().violations


def test_12_3_a_named_limit_held_for_whole_runs_serves_at_most_the_base_across_workflows(no_worker) -> None:
    box(base=2, burst=5.0, limits={"wide": {"capacity": 10, "max_hold": "1h"}})
    first = [start_run(holds_wide, {"label": "a"}), start_run(also_holds_wide, {"label": "b"})]
    third = start_run(also_holds_wide, {"label": "c"})
    assert [status(run) for run in [*first, third]] == ["pending", "pending", "queued"]
    entry = QueueEntry.objects.get(run_id=third.id, limit__name="wide")
    assert services.why_waiting([entry])[entry.id].code == "whole_runs_at_base"
    in_body = services.acquire("wide", run_id="a-step-elsewhere")  # not a whole run: capacity 10 applies
    assert in_body.state == "busy"
    assert advance(first[0].id) == "completed"
    assert holders("wide")[-1] == (third.id, "reserved")
    assert verify().ok, verify().violations


def test_verify_finds_a_limit_that_served_more_whole_runs_than_the_base(no_worker) -> None:
    """limits verify (12.3): the rows of three whole-run slots of one limit under a base of 2."""
    box(base=2, burst=5.0, limits={"wide": {"capacity": 10, "max_hold": "1h"}})
    runs = [start_run(holds_wide, {"label": f"w{i}"}) for i in range(3)]
    assert [status(run) for run in runs] == ["pending", "pending", "queued"]
    assert verify(["wide"]).ok
    services.acquire("wide", run_id=runs[2].id, request=f"{runs[2].id}:start:again")  # as if granted past it
    Slot.objects.filter(request=f"{runs[2].id}:start:again").update(request=f"{runs[2].id}:start")
    found = verify(["wide"]).violations
    assert any("whole runs held slots" in violation for violation in found), found


@workflow(name="box_patient")
def patient(input: dict) -> str:
    """The documented pattern: a wait with a timeout, the body goes on after it times out."""
    try:
        slot = acquire_slot("partner-api", label=input["label"], timeout="10s")
        release_slot(slot.id)
    except SlotTimeoutError:
        pass
    return work(input["label"])


def test_12_2_a_run_whose_wait_timed_out_goes_on_only_in_a_box_slot(no_worker, clock) -> None:
    """Must never happen: a run takes a step without a box slot. Its wait gave the box slot
    back; when the wait times out, the body goes on (it catches SlotTimeoutError) only once it
    holds a box slot again, and the box never executes more runs than its ceiling."""
    box(base=1, burst=2.0)  # ceiling 2: one run of each workflow
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run(patient, {"label": "w"})
    assert advance(waiting.id) == "suspended"
    others = [start_run(plain, {"label": "p"}), start_run(other, {"label": "o"})]
    assert [status(run) for run in others] == ["pending", "pending"]  # the box is full: 2 execute
    clock.advance(seconds=11)
    services.sweep()  # the wait times out: partner-api and the box together
    assert advance(waiting.id) == "suspended"  # the box is full: it waits for a box slot alone
    assert waiting.id in queue("box") and waiting.id not in executing()
    assert advance(others[0].id) == "completed"
    assert holders("box")[-1] == (waiting.id, "reserved")
    assert advance(waiting.id) == "completed"
    assert Run.objects.get(id=waiting.id).output == "w"
    assert verify().ok, verify().violations
    assert_counters_match_rows("box")
    services.release(holder)


def test_12_2_a_run_granted_its_box_slot_after_the_box_left_the_config_frees_it_at_its_end(no_worker) -> None:
    """Must never happen: a box slot stays busy after its run ended. A run waiting in its body
    for a limit and a box slot together is granted both after the box was undeclared; it resumes
    in that box slot (tied to the run), and ending the run frees it."""
    box(base=1, burst=1.0)
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run(with_partner, {"label": "w"})
    assert advance(waiting.id) == "suspended"
    services.sync_workspace(define_workspace(limits=PARTNER))  # run_concurrency left the config
    services.release(holder)
    assert sorted(holders("partner-api") + holders("box")) == [(waiting.id, "reserved")] * 2
    assert advance(waiting.id) == "completed"
    assert not Slot.objects.filter(limit__name="box", state__in=["busy", "reserved"]).exists()
    assert verify().ok, verify().violations
    assert_counters_match_rows("box")


def test_12_2_a_run_that_began_its_wait_outside_the_box_resumes_after_the_box_came_back(no_worker) -> None:
    """A run started under the box keeps its box slot through a wait that began while the box
    was undeclared; declared again before the run resumes, the box takes nothing of its grant
    for the box slot (the one granted is the limit's), and the run ends freeing both."""
    box(base=1, burst=1.0)
    holder = services.acquire("partner-api", run_id="someone-else").slot_id
    waiting = start_run(with_partner, {"label": "w"})
    services.sync_workspace(define_workspace(limits=PARTNER))  # run_concurrency left the config
    assert advance(waiting.id) == "suspended"  # it waits for partner-api alone, in its box slot
    assert executing() == [waiting.id]
    box(base=1, burst=1.0)  # back in the config
    services.release(holder)
    assert advance(waiting.id) == "completed"
    assert Run.objects.get(id=waiting.id).output == "w"
    assert not Slot.objects.filter(state__in=["busy", "reserved"]).exists()
    assert verify().ok, verify().violations
