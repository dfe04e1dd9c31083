"""`limits verify`: each rule it proves from the rows must fail when that rule is broken.

The healthy histories come from the services; the broken ones are hand-made rows (what a buggy
engine would have written), so each check is shown to catch its own kind of violation.
"""

from __future__ import annotations

import datetime as dt
import io

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.db.models import F
from django.utils import timezone

from limits import cli, services
from limits.models import AuditEvent, Limit, QueueEntry, Slot
from limits.services import acquire, release, set_capacity, sweep
from limits.verify import History, verify
from tests.factories import declare

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(clock):
    return declare(two={"capacity": 2, "max_hold": "10m"})["two"]


def violations(name: str = "two") -> list[str]:
    """The violations found a day after the rows, hand-made ones often written ahead of the
    test's clock (the check of times in the future has tests of its own)."""
    with time_machine.travel(timezone.now() + dt.timedelta(days=1), tick=False):
        return verify([name]).violations


def test_times_ahead_of_the_clock_expiry_before_max_hold_and_early_time_outs_are_violations(two, clock) -> None:
    now = timezone.now()
    raw_slot(two, "ahead", now + dt.timedelta(minutes=10))  # a host 10 minutes ahead stamped it
    raw_slot(two, "early", now - dt.timedelta(minutes=2), state="expired", freed_at=now)  # max hold is 10m
    raw_entry(two, "cut", now - dt.timedelta(minutes=2), state="timed_out", finished_at=now)  # deadline in 1h
    found = verify(["two"]).violations
    assert any("granted_at" in v and "is after now" in v for v in found), found
    assert any("taken back at" in v and "before its max hold ended" in v for v in found), found
    assert any("timed out at" in v and "before its deadline" in v for v in found), found
    assert len(found) == 3, found


def raw_slot(limit: Limit, request: str, granted_at: dt.datetime, **fields: object) -> Slot:
    """A slot row written behind the engine's back, counters kept in step for live ones."""
    fields.setdefault("state", "busy")
    fields.setdefault("confirmed_at", granted_at if fields["state"] == "busy" else None)
    slot = Slot.objects.create(
        limit=limit,
        run_id=f"run-{request}",
        request=request,
        granted_at=granted_at,
        expires_at=granted_at + dt.timedelta(minutes=10),
        **fields,
    )
    if slot.state == "busy":
        Limit.objects.filter(id=limit.id).update(busy_count=F("busy_count") + 1)
    return slot


def raw_entry(limit: Limit, request: str, enqueued_at: dt.datetime, **fields: object) -> QueueEntry:
    position = Limit.objects.get(id=limit.id).next_position
    fields.setdefault("deadline", enqueued_at + dt.timedelta(hours=1))
    entry = QueueEntry.objects.create(
        limit=limit,
        run_id=f"run-{request}",
        request=request,
        position=position,
        enqueued_at=enqueued_at,
        timeout_ms=3_600_000,
        **fields,
    )
    waiting = 1 if entry.state == "waiting" else 0
    Limit.objects.filter(id=limit.id).update(next_position=position + 1, waiting_count=F("waiting_count") + waiting)
    return entry


def test_a_busy_history_through_the_services_holds_every_rule(two, clock) -> None:
    """Queueing, hand-offs, a lapse, a timeout, an expiry, capacity lowered and raised."""
    first = acquire("two", run_id="r1").slot_id
    second = acquire("two", run_id="r2").slot_id
    acquire("two", run_id="r3", request="q3")
    acquire("two", run_id="r4", request="q4", timeout="1m")
    acquire("two", run_id="r5", request="q5")
    set_capacity("two", 1)
    clock.advance(seconds=1)
    release(first)  # capacity 1 and one busy: nothing is handed on
    release(second)  # now r3 gets it
    clock.advance(minutes=3)  # r3 does not confirm in 2 minutes; r4 times out
    sweep()
    set_capacity("two", None)
    assert acquire("two", run_id="r5", request="q5").state == "busy"
    clock.advance(minutes=11)
    sweep()
    assert verify().violations == []  # the other limits too (migrate declared them)
    result = verify(["two"])
    assert result.ok and result.limits == 1 and result.capacity_changes == 2
    assert result.summary().startswith("ok: 1 limit(s), ")


def test_a_grant_over_the_capacity_is_a_violation(two, clock) -> None:
    now = timezone.now()
    for request in ("a", "b", "c"):
        raw_slot(two, request, now)
    found = violations()
    assert len(found) == 1 and "brought reserved+busy to 3 over capacity 2" in found[0]


def test_lowering_capacity_takes_no_slot_back_but_a_later_grant_above_it_is_a_violation(two, clock) -> None:
    acquire("two", run_id="r1")
    acquire("two", run_id="r2")
    clock.advance(seconds=1)
    set_capacity("two", 1)  # two busy over capacity 1: allowed, nothing was granted
    assert violations() == []
    clock.advance(seconds=1)
    raw_slot(two, "late", timezone.now(), state="released", freed_at=timezone.now() + dt.timedelta(seconds=1))
    clock.advance(seconds=1)  # its free is in the past now (a time in the future is a violation of its own)
    found = violations()
    assert len(found) == 1 and "over capacity 1" in found[0]


def test_the_capacity_in_force_comes_from_the_audit_rows_even_old_ones_without_capacity_after(two, clock) -> None:
    set_capacity("two", 3)
    AuditEvent.objects.update(capacity_after=None)  # as written before the column existed
    for request in ("a", "b", "c"):
        raw_slot(two, request, timezone.now())
    assert History.load(Limit.objects.get(name="two")).capacity_timeline() == (2, [(timezone.now(), 3)])
    assert violations() == []
    clock.advance(seconds=1)
    raw_slot(two, "d", timezone.now())
    assert "over capacity 3" in violations()[0]


def test_a_grant_that_passes_over_an_earlier_waiting_run_is_a_violation(two, clock) -> None:
    start = timezone.now()
    raw_entry(two, "first", start)
    later = raw_entry(
        two, "second", start + dt.timedelta(seconds=1), state="granted", finished_at=start + dt.timedelta(seconds=2)
    )
    raw_slot(
        two,
        "second",
        start + dt.timedelta(seconds=2),
        state="released",
        queue_entry=later,
        freed_at=start + dt.timedelta(seconds=3),
    )
    found = violations()
    assert len(found) == 1 and "#2 (run-second) granted" in found[0] and "while #1 (run-first) waited" in found[0]


def test_passing_over_a_run_whose_deadline_had_passed_is_not_a_violation(two, clock) -> None:
    start = timezone.now()
    raw_entry(two, "first", start, deadline=start + dt.timedelta(seconds=1))
    later = raw_entry(two, "second", start, state="granted", finished_at=start + dt.timedelta(seconds=2))
    raw_slot(
        two,
        "second",
        start + dt.timedelta(seconds=2),
        state="released",
        queue_entry=later,
        freed_at=start + dt.timedelta(seconds=3),
    )
    assert violations() == []


def test_a_slot_granted_at_once_while_a_run_waits_is_a_violation(two, clock) -> None:
    start = timezone.now()
    raw_entry(two, "first", start)
    raw_slot(two, "barger", start + dt.timedelta(seconds=1))
    found = violations()
    assert len(found) == 1 and "granted at once" in found[0] and "1 run(s) waited" in found[0]


def test_one_request_granted_twice_is_a_violation(two, clock) -> None:
    start = timezone.now()
    raw_slot(two, "twice", start, state="released", confirmed_at=start, freed_at=start + dt.timedelta(seconds=5))
    raw_slot(two, "twice", start + dt.timedelta(seconds=1))
    found = violations()
    assert any("request twice had two live slots at once" in v for v in found), found
    assert any("was confirmed twice" in v for v in found), found


def test_counters_that_differ_from_the_rows_are_a_violation(two, clock) -> None:
    acquire("two", run_id="r1")
    Limit.objects.filter(name="two").update(busy_count=2, waiting_count=1)
    assert violations() == ["two: counters busy/reserved/waiting (2, 0, 1) but the rows say (1, 0, 0)"]


def test_a_slot_freed_before_its_grant_is_a_violation(two, clock) -> None:
    start = timezone.now()
    raw_slot(two, "odd", start, state="released", freed_at=start - dt.timedelta(seconds=1))
    assert "before its grant" in violations()[0]


def test_history_trimmed_by_retention_is_not_a_violation(two, clock, settings) -> None:
    """The sweep deletes slots before their entries: a granted entry whose slot is gone, past
    the retention, is history being trimmed, not a grant without a slot."""
    settings.STACKBONE_HISTORY_RETENTION = "1h"
    slot_id = acquire("two", run_id="r1").slot_id
    acquire("two", run_id="r2")
    acquire("two", run_id="r3")
    release(slot_id)  # r3 is granted from the queue
    Slot.objects.filter(run_id="r3").update(state="released", freed_at=timezone.now())
    Limit.objects.filter(name="two").update(reserved_count=0)
    clock.advance(hours=2)
    Slot.objects.filter(run_id="r3").delete()  # as the sweep's first batch would
    assert violations() == []
    settings.STACKBONE_HISTORY_RETENTION = "7d"
    assert "granted without a slot" in violations()[0]


def test_an_unknown_limit_is_reported(two) -> None:
    assert verify(["nope"]).violations == ["unknown limit 'nope'"]


def test_manage_py_limits_verify_says_ok_or_lists_the_violations_and_exits_1(two, clock) -> None:
    acquire("two", run_id="r1")
    out = io.StringIO()
    call_command("limits", "verify", "two", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("ok: 1 limit(s), 1 slot(s), 0 queue entries")
    Limit.objects.filter(name="two").update(busy_count=0)
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("limits", "verify", "two", stdout=out, stderr=io.StringIO())
    assert caught.value.returncode == 1
    assert "1 violation(s) found" in str(caught.value)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("two: counters") and lines[1].startswith("1 violation(s) in 1 limit(s)")


def test_stackbone_limits_verify_with_json_and_refused_for_an_agent(two, tmp_path, monkeypatch) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["verify", "--json"], streams=cli.Streams(stdout=out, stderr=err)) == 0
    assert '"ok": true' in out.getvalue()
    agents = tmp_path / "agents.toml"
    agents.write_text('[agents.far]\nurl = "http://127.0.0.1:9"\ntoken = "sbk_x"\n')
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(agents))
    err = io.StringIO()
    assert cli.main(["verify", "--agent", "far"], streams=cli.Streams(stdout=io.StringIO(), stderr=err)) == 2
    assert "run it there" in err.getvalue()


def test_verify_reads_one_snapshot_and_writes_nothing(two, clock) -> None:
    acquire("two", run_id="r1")
    before = (Slot.objects.count(), QueueEntry.objects.count(), AuditEvent.objects.count())
    verify()
    assert (Slot.objects.count(), QueueEntry.objects.count(), AuditEvent.objects.count()) == before
    assert services.sweep() is not None


def test_a_join_past_the_queues_cap_is_a_violation_but_a_lowering_is_not(clock) -> None:
    """Check m (SPEC 14.5): the queue capped at 2, a third run joined behind two waiting is
    caught, as is a key's second run past max_waiting_per_key 1; a cap lowered below a longer
    queue takes nobody out and is no violation; a lapsed reservation's return is not judged."""
    capped = declare(capped={"capacity": 1, "max_hold": "10m", "max_waiting": 2})["capped"]
    acquire("capped", run_id="holder")
    acquire("capped", run_id="w1", request="w1:1")
    acquire("capped", run_id="w2", request="w2:1")
    assert violations("capped") == []
    start = timezone.now() + dt.timedelta(seconds=1)
    raw_entry(capped, "barger:1", start)  # what an engine ignoring the cap would have written
    found = violations("capped")
    assert len(found) == 1 and "barger:1 joined" in found[0] and "(max_waiting 2)" in found[0]

    keyed = declare(keyed={"capacity": 1, "max_hold": "10m", "max_waiting_per_key": 1})["keyed"]
    acquire("keyed", run_id="holder", key="acme")
    acquire("keyed", run_id="a1", request="a1:1", key="acme")
    acquire("keyed", run_id="g1", request="g1:1", key="globex")
    raw_entry(keyed, "a2:1", start, key="acme")
    found = [found for found in violations("keyed") if "max_waiting" in found]  # the hand-made row's
    assert len(found) == 1 and "key 'acme'" in found[0] and "(max_waiting_per_key 1)" in found[0]  # counters aside


def test_a_lowered_cap_and_a_lapsed_reservation_back_in_a_full_queue_are_not_violations(clock) -> None:
    declare(low={"capacity": 1, "max_hold": "10m"})
    held = acquire("low", run_id="holder").slot_id
    for n in range(3):
        acquire("low", run_id=f"w{n}", request=f"w{n}:1")
    services.set_max_waiting("low", 1)  # three wait: a lowering takes nobody out
    assert acquire("low", run_id="late", request="late:1").state == "refused"
    release(held)  # w0 is reserved a slot ...
    clock.advance(minutes=3)
    sweep()  # ... which lapses: w0 goes back to the end of a queue past its cap, as 3.6 says
    assert QueueEntry.objects.filter(request="w0:1", state="waiting").exists()
    assert violations("low") == []


def test_a_run_that_fits_joins_a_full_queue_and_is_granted_at_once_without_a_violation(clock) -> None:
    """Check m against SPEC 14.5 as the engine applies it (the model test's seed 3680926626 found
    the check too strict): a keyed limit whose queue is at its cap with runs of a key whose pool is
    full; a run of another key fits the free slot, joins and is granted in the same call, never
    having waited: not a join past the cap."""
    declare(pools={"capacity": 3, "max_hold": "10m", "per_key": 1, "max_waiting": 2})
    acquire("pools", run_id="a0", key="acme")
    acquire("pools", run_id="a1", request="a1:1", key="acme")
    acquire("pools", run_id="a2", request="a2:1", key="acme")  # the queue at its cap of 2
    assert acquire("pools", run_id="g1", request="g1:1", key="globex").state == "busy"
    assert QueueEntry.objects.get(request="g1:1").state == "granted"  # it joined, granted at once
    assert acquire("pools", run_id="a3", request="a3:1", key="acme").state == "refused"
    assert violations("pools") == []


def test_a_replace_that_left_its_keys_run_waiting_and_a_replaced_entry_naming_no_one_are_violations(clock) -> None:
    """Check n (SPEC 14.3): the engine's replacements hold the rule; a hand-made join with on_full
    'replace' beside a run of its key still waiting is caught (another key's is not), as is a
    replaced entry that names no replacer; a join with on_full 'wait' beside it is no violation,
    nor one granted at the instant it joined (it fitted: it replaces nobody)."""
    limit = declare(syncs={"capacity": 1, "max_hold": "10m", "on_full": "replace"})["syncs"]
    acquire("syncs", run_id="holder", key="acme")
    acquire("syncs", run_id="a1", request="a1:1", key="acme")
    acquire("syncs", run_id="a2", request="a2:1", key="acme")  # replaces a1
    acquire("syncs", run_id="g1", request="g1:1", key="globex")
    acquire("syncs", run_id="a3", request="a3:1", key="acme", on_full="wait")  # the call's own: two wait
    assert violations("syncs") == []
    start = timezone.now() + dt.timedelta(seconds=1)
    raw_entry(limit, "a4:1", start, key="acme", replacing=True)  # what an engine replacing nobody would write
    raw_entry(limit, "g2:1", start, key="other", replacing=True)
    found = [v for v in violations("syncs") if "on_full 'replace'" in v]
    assert len(found) == 1 and "a4:1 joined" in found[0] and "2 other run(s) of key 'acme'" in found[0]
    raw_entry(limit, "x1:1", start, key="acme", state="replaced", finished_at=start)
    assert any("(x1:1) was replaced by no one named" in v for v in violations("syncs"))
    # one the room left fitted, granted as it joined, replaced nobody: no violation (the model
    # test found it: a run keeping its box slot needs only the limit, SPEC 12.2)
    later = start + dt.timedelta(seconds=1)
    raw_entry(limit, "a5:1", later, key="acme", replacing=True, state="granted", finished_at=later)
    assert not [v for v in violations("syncs") if "a5:1" in v]


def test_a_replace_in_the_instant_its_queue_filled_is_not_a_join_past_the_cap(clock) -> None:
    """Check m and replace (the model test's seed 55 found the check too strict): the runs that
    fill a capped queue and the one that replaces the oldest of them, all in one instant of the
    database's clock. The replaced entry's row of history moves to a new ticket at the end (its
    place, the smaller position, is its replacer's now), so ordered by position inside the instant
    it looked as if it joined last, behind a full queue. It joined first: its replacer's place."""
    declare(replacing={"capacity": 1, "max_hold": "10m", "max_waiting": 3, "on_full": "replace"})
    acquire("replacing", run_id="holder", key="flood")
    for run_id, key in (("f1", "flood"), ("k2", "k2"), ("k3", "k3")):
        assert acquire("replacing", run_id=run_id, request=f"{run_id}:1", key=key).state == "waiting"
    assert acquire("replacing", run_id="f2", request="f2:1", key="flood").state == "waiting"  # replaces f1
    assert QueueEntry.objects.get(request="f1:1").state == "replaced"
    assert violations("replacing") == []
    start = timezone.now() + dt.timedelta(seconds=1)
    raw_entry(Limit.objects.get(name="replacing"), "barger:1", start, key="k4")  # still caught after it
    found = [found for found in violations("replacing") if "max_waiting" in found]  # the hand-made row's
    assert len(found) == 1 and "barger:1 joined" in found[0] and "(max_waiting 3)" in found[0]  # counters aside
