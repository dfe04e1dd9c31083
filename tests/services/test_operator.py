"""SPEC 1.4, 1.5 and 5.2-5.5: operator overrides, sync, and the audit trail."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.db import transaction

from limits import services
from limits.config import define_workspace
from limits.models import AuditEvent, Limit, Slot
from limits.services import LimitsError, acquire, release, set_capacity, set_max_hold, sync_workspace
from tests.factories import assert_counters_match_rows, declare, holders, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(clock):
    return declare(calls={"capacity": 2, "max_hold": "1h"})["calls"]


def test_an_override_wins_and_a_reset_returns_to_the_declared_value(calls) -> None:
    limit = set_capacity("calls", 7, actor="user:ana")
    assert (limit.capacity, limit.capacity_overridden) == (7, True)
    limit = set_capacity("calls", None, actor="user:ana")
    assert (limit.capacity, limit.capacity_overridden) == (2, False)
    limit = set_max_hold("calls", "5m", actor="user:ana")
    assert (limit.max_hold_ms, limit.max_hold_overridden) == (300_000, True)
    limit = set_max_hold("calls", None, actor="user:ana")
    assert (limit.max_hold_ms, limit.max_hold_overridden) == (3_600_000, False)


def test_a_sync_does_not_clear_an_override(calls) -> None:
    set_capacity("calls", 9)
    set_max_hold("calls", "2m")
    declare(calls={"capacity": 3, "max_hold": "2h"})
    limit = Limit.objects.get(name="calls")
    assert (limit.capacity, limit.declared_capacity) == (9, 3)
    assert (limit.max_hold_ms, limit.declared_max_hold_ms) == (120_000, 7_200_000)


@pytest.mark.parametrize("value", [0, 100_001, -1, True, 2.5, "3", "abc"])
def test_a_bad_capacity_is_refused_and_changes_nothing(calls, value) -> None:
    with pytest.raises(LimitsError) as error:
        set_capacity("calls", value)
    assert error.value.field == "capacity"
    assert "from 1 to 100000" in error.value.message
    assert Limit.objects.get(name="calls").capacity_override is None
    assert not AuditEvent.objects.filter(action="capacity").exists()


@pytest.mark.parametrize("value", [0, "0s", "31d", "45x", "abc", "", 2_592_000_001, True])
def test_a_bad_max_hold_is_refused_and_changes_nothing(calls, value) -> None:
    with pytest.raises(LimitsError) as error:
        set_max_hold("calls", value)
    assert error.value.field == "max_hold"
    assert Limit.objects.get(name="calls").max_hold_override_ms is None


def test_the_capacity_bounds_are_allowed(calls) -> None:
    assert set_capacity("calls", 1).capacity == 1
    assert set_capacity("calls", 100_000).capacity == 100_000
    assert set_max_hold("calls", "30d").max_hold_ms == 30 * 86_400_000


def test_operator_actions_on_an_unknown_limit_are_clear_errors(calls) -> None:
    with pytest.raises(LimitsError, match="unknown limit 'nope'"):
        set_capacity("nope", 3)
    with pytest.raises(LimitsError, match="unknown limit 'nope'"):
        set_max_hold("nope", "1m")


def test_raising_capacity_grants_waiting_runs_at_once(calls) -> None:
    for run in ("a", "b", "c", "d", "e"):
        acquire("calls", run_id=run)
    set_capacity("calls", 4)
    assert holders("calls") == [("a", "busy"), ("b", "busy"), ("c", "reserved"), ("d", "reserved")]
    assert queue("calls") == ["e"]
    assert_counters_match_rows("calls")


def test_lowering_capacity_takes_no_slot_back(calls) -> None:
    first = acquire("calls", run_id="a").slot_id
    acquire("calls", run_id="b")
    acquire("calls", run_id="c")
    set_capacity("calls", 1)
    assert holders("calls") == [("a", "busy"), ("b", "busy")]
    release(first)
    assert holders("calls") == [("b", "busy")]  # still at the new capacity: c keeps waiting
    assert queue("calls") == ["c"]
    assert acquire("calls", run_id="d").state == "waiting"


def test_capacity_is_read_every_time_a_slot_is_handed_out(calls) -> None:
    set_capacity("calls", 3)
    assert [acquire("calls", run_id=r).state for r in "abcd"] == ["busy", "busy", "busy", "waiting"]


def test_a_slot_expiry_is_fixed_at_grant_and_a_new_max_hold_applies_only_to_new_slots(calls, clock) -> None:
    """4.3 and 5.4"""
    old = acquire("calls", run_id="a").slot_id
    assert Slot.objects.get(id=old).expires_at == clock.now() + dt.timedelta(hours=1)
    set_max_hold("calls", "10m")
    new = acquire("calls", run_id="b").slot_id
    assert Slot.objects.get(id=old).expires_at == clock.now() - dt.timedelta() + dt.timedelta(hours=1)
    assert Slot.objects.get(id=new).expires_at == clock.now() + dt.timedelta(minutes=10)
    clock.advance(minutes=11)
    services.sweep()
    assert Slot.objects.get(id=new).state == "expired"
    assert Slot.objects.get(id=old).state == "busy"


def test_every_operator_action_is_recorded_with_who_what_old_new_and_when(calls, clock) -> None:
    slot_id = acquire("calls", run_id="a").slot_id
    set_capacity("calls", 5, actor="user:ana")
    clock.advance(seconds=1)
    set_capacity("calls", None, actor="user:ana")
    set_max_hold("calls", "90s", actor="cli:root")
    release(slot_id, actor="user:bo")
    events = [
        (e.actor, e.action, e.old_value, e.new_value, e.slot_id)
        for e in AuditEvent.objects.filter(limit__name="calls").exclude(action="sync").order_by("at", "id")
    ]
    assert events == [
        ("user:ana", "capacity", "2", "5", ""),
        ("user:ana", "capacity", "5", "2 (declared)", ""),
        ("cli:root", "max_hold", "3600000", "90000", ""),
        ("user:bo", "release", "busy", "released", slot_id),
    ]
    assert AuditEvent.objects.filter(action="capacity").first().at == clock.now()


def test_an_operator_action_with_no_actor_named_is_recorded_as_the_system(calls) -> None:
    """None or an empty actor: 'system' in the audit row, on both databases (PostgreSQL's
    functions recorded the empty name as it came)."""
    slot_id = acquire("calls", run_id="a").slot_id
    set_capacity("calls", 3, actor="")
    set_max_hold("calls", "2m", actor=None)
    release(slot_id, actor="")
    events = list(AuditEvent.objects.exclude(action="sync").order_by("id").values_list("actor", "action"))
    assert events == [("system", "capacity"), ("system", "max_hold"), ("system", "release")]


def test_sync_creates_updates_and_marks_removed_limits_undeclared(clock) -> None:
    report = sync_workspace(
        define_workspace(limits={"a": {"capacity": 1, "max_hold": "1m"}, "b": {"capacity": 1, "max_hold": "1m"}})
    )
    assert sorted(report.created) == ["a", "b"]
    slot_id = acquire("b", run_id="r1").slot_id
    report = sync_workspace(define_workspace(limits={"a": {"capacity": 3, "max_hold": "1m"}}))
    assert (report.updated, report.undeclared) == (["a"], ["b"])
    b = Limit.objects.get(name="b")
    assert b.declared is False
    assert holders("b") == [("r1", "busy")]  # 1.5: its slots stay visible
    with pytest.raises(LimitsError, match="no longer declared"):
        acquire("b", run_id="r2")
    assert release(slot_id, actor="user:ana") is True  # ... and releasable
    sync_workspace(define_workspace(limits={"b": {"capacity": 1, "max_hold": "1m"}}))
    assert Limit.objects.get(name="b").declared is True


def test_a_sync_that_raises_declared_capacity_grants_waiting_runs(calls) -> None:
    for run in "abc":
        acquire("calls", run_id=run)
    declare(calls={"capacity": 3, "max_hold": "1h"})
    assert holders("calls")[-1] == ("c", "reserved")


def test_migrate_and_limits_sync_bring_the_workspace_to_the_database(settings, tmp_path, monkeypatch) -> None:
    """1.4: declared values reach the box at deploy."""
    (tmp_path / "ws_for_sync.py").write_text(
        "from limits.config import define_workspace\n"
        "workspace = define_workspace(limits={'sms': {'capacity': 4, 'max_hold': '2m'}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.STACKBONE_WORKSPACE = "ws_for_sync"
    call_command("migrate", verbosity=0)
    assert Limit.objects.get(name="sms").declared_capacity == 4
    (tmp_path / "ws_for_sync2.py").write_text(
        "from limits.config import define_workspace\n"
        "workspace = define_workspace(limits={'sms': {'capacity': 6, 'max_hold': '2m'}})\n"
    )
    settings.STACKBONE_WORKSPACE = "ws_for_sync2"
    call_command("limits", "sync")
    assert Limit.objects.get(name="sms").declared_capacity == 6


def test_a_deploy_audits_each_change_with_the_declared_values_before_and_after(clock) -> None:
    """1.4, 1.5, 11.5, 12.1: what a deploy writes in the audit trail, the same text on both
    databases (PostgreSQL's is limits_sync_workspace's and limits_sync_bounds', SQLite's the Python
    track's): a limit's, a workflow bound's and the box's declared values before and after, the
    capacity in force after; an unchanged one writes nothing; one left out is marked undeclared."""
    services.sync_workspace(
        define_workspace(
            limits={"calls": {"capacity": 2, "max_hold": "1m"}, "sms": {"capacity": 1, "max_hold": "1m"}},
            run_concurrency={"base": 2},
        )
    )
    services.sync_workflow_bounds({"workflow.a": (3, None), "workflow.b": (None, 1)})
    services.set_box(base=3, actor="user:ana")  # an override the next deploy keeps (ceiling 3 x 2.0)
    report = services.sync_workspace(
        define_workspace(
            limits={"calls": {"capacity": 5, "max_hold": "2m", "per_key": 2, "share": "fair"}},
            run_concurrency={"base": 4, "burst": 2.5},
        )
    )
    assert (report.created, report.updated, report.undeclared) == ([], ["calls", "box"], ["sms"])
    bounds = services.sync_workflow_bounds({"workflow.a": (4, 2)})
    assert (bounds.created, bounds.updated, bounds.undeclared) == ([], ["workflow.a"], ["workflow.b"])
    assert services.sync_workflow_bounds({"workflow.a": (4, 2)}) == type(bounds)()  # unchanged: nothing
    rows = list(
        AuditEvent.objects.filter(action="sync", limit__name__in=["calls", "sms", "box", "workflow.a", "workflow.b"])
        .order_by("id")
        .values_list("limit__name", "actor", "old_value", "new_value", "capacity_after")
    )
    assert rows == [
        (
            "calls",
            "deploy",
            "capacity 2, max hold 60000 ms",
            "capacity 5, max hold 120000 ms, per_key 2, share fair",
            5,
        ),
        ("box", "deploy", "base 3, burst 2, ceiling 6", "base 3, burst 2.5, ceiling 7", 7),
        ("sms", "deploy", "declared", "undeclared", 1),
        ("workflow.a", "deploy", "total 3", "total 4, per_key 2", 4),
        ("workflow.b", "deploy", "declared", "undeclared", 100_000),
    ]
    box = Limit.objects.get(name="box")
    assert (box.per_key, box.burst, box.capacity, box.declared_capacity) == (3, 2.5, 7, 10)


def test_a_deploy_drops_a_box_override_the_new_burst_would_take_past_the_maximum(clock) -> None:
    """12.1, 12.5: an operator's base that the newly declared burst would carry past 100,000
    cannot stand: the deploy resets the overrides (audited), where it otherwise keeps them."""
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 2, "burst": 1.0}))
    services.set_box(base=40_000, actor="user:ana")
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 2, "burst": 3.0}))
    box = Limit.objects.get(name="box")
    assert (box.per_key_override, box.burst_override, box.capacity_override) == (None, None, None)
    assert (box.per_key, box.capacity) == (2, 6)
    assert AuditEvent.objects.filter(action="sync", limit=box).latest("id").new_value == "base 2, burst 3, ceiling 6"


def test_a_deploy_that_names_a_taken_name_is_refused_and_changes_nothing(clock) -> None:
    """A workflow's bound whose name a declared limit holds, or a box run concurrency while a plain
    limit is named 'box', is refused with the field named, before the deploy writes anything: no
    limit created, updated or undeclared, no audit row."""
    services.sync_workspace(
        define_workspace(limits={"box": {"capacity": 1, "max_hold": "1m"}, "calls": {"capacity": 1, "max_hold": "1m"}})
    )
    before = list(Limit.objects.order_by("id").values())
    audit = AuditEvent.objects.count()
    with pytest.raises(LimitsError) as refused:
        services.sync_workspace(
            define_workspace(limits={"sms": {"capacity": 2, "max_hold": "1m"}}, run_concurrency={"base": 2})
        )
    assert refused.value.field == "run_concurrency" and "rename that limit first" in refused.value.message
    with pytest.raises(LimitsError) as refused:
        services.sync_workflow_bounds({"calls": (2, None), "workflow.a": (1, None)})
    assert (refused.value.field, refused.value.message) == (
        "name",
        "limit 'calls': the name belongs to a workflow's own bound (names starting 'workflow.')",
    )
    assert list(Limit.objects.order_by("id").values()) == before
    assert AuditEvent.objects.count() == audit


def test_a_deploy_refuses_to_run_inside_a_callers_transaction_and_a_plain_limit_cannot_take_the_boxs_name(
    clock,
) -> None:
    """A deploy is its own transaction on both databases (durable: the locks of every limit end
    with its commit, never held on by a caller). And a plain limit cannot take the name of the
    box's run concurrency once the box has declared it (its row keeps the name): refused with
    the field named, nothing changed."""
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 2}))
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        services.sync_workspace(define_workspace(limits={"calls": {"capacity": 1, "max_hold": "1m"}}))
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        services.sync_workflow_bounds({"workflow.a": (1, None)})
    assert not Limit.objects.filter(name__in=["calls", "workflow.a"]).exists()
    before = list(Limit.objects.order_by("id").values())
    with pytest.raises(LimitsError) as refused:
        services.sync_workspace(define_workspace(limits={"box": {"capacity": 5, "max_hold": "1h"}}))
    assert (refused.value.field, refused.value.message) == (
        "name",
        "limit 'box': the name belongs to the box's run concurrency, declared in this box before; "
        "give the limit another name",
    )
    assert list(Limit.objects.order_by("id").values()) == before
