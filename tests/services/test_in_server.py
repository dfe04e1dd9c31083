"""The engine's database functions (PostgreSQL, limits/sql/engine.sql): one round trip per hot
operation, and one limit's timestamps in lock order whichever path wrote them.

Every other rule is tested through the services on both databases (tests/services, tests/model),
so on PostgreSQL the same tests drive the functions and the Python rules they fall back to."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.models import AuditEvent, Limit, QueueEntry, Slot
from tests.conftest import START, requires_postgres
from tests.factories import assert_counters_match_rows, declare


def _engine_statements(operation):
    """The operation's result and the SQL it sent, without the run layer's wake (a receiver of
    runs_woken, after commit)."""
    with CaptureQueriesContext(connection) as captured:
        result = operation()
    return result, [q["sql"] for q in captured.captured_queries if "studio_run" not in q["sql"]]


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_each_hot_operation_is_one_statement_in_autocommit_on_postgres() -> None:
    """Outside a caller's transaction: no BEGIN, no COMMIT round trip, no second statement while
    the limit's row is locked (the lock is taken and released inside the server)."""
    declare(calls={"capacity": 1, "max_hold": "1h"})
    first, sent = _engine_statements(lambda: services.acquire("calls", run_id="r1"))
    assert first.state == "busy" and len(sent) == 1 and "limits_acquire(" in sent[0]
    waiting, sent = _engine_statements(lambda: services.acquire("calls", run_id="r2", request="r2:1"))
    assert waiting.state == "waiting" and len(sent) == 1
    released, sent = _engine_statements(lambda: services.release(first.slot_id))
    assert released is True and len(sent) == 1 and "limits_release(" in sent[0]
    confirmed, sent = _engine_statements(lambda: services.acquire("calls", run_id="r2", request="r2:1"))
    assert confirmed.state == "busy" and len(sent) == 1
    assert Slot.objects.get(id=confirmed.slot_id).state == "busy"
    _, sent = _engine_statements(lambda: services.release(confirmed.slot_id))
    assert len(sent) == 1
    assert_counters_match_rows("calls")


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_keyed_acquisition_and_several_free_limits_are_one_statement_each_on_postgres() -> None:
    """The common cases of SPEC 9 and 10 (issue 13): one limit with a key, and several limits all
    free, granted in one round trip; their release too while nobody waits."""
    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 1}, calls={"capacity": 2, "max_hold": "1h"})
    keyed, sent = _engine_statements(lambda: services.acquire("api", run_id="r1", key="acme"))
    assert keyed.state == "busy" and len(sent) == 1 and "limits_acquire_group(" in sent[0]
    group, sent = _engine_statements(lambda: services.acquire_group(["calls", "api"], run_id="r2", key="zeta"))
    assert group.state == "busy" and len(sent) == 1
    assert [name for name, _ in group.slots] == ["calls", "api"]
    plain_on_keyed, sent = _engine_statements(lambda: services.acquire("api", run_id="r3"))
    assert plain_on_keyed.state == "busy" and len(sent) == 1  # not plain: limits_acquire_group, same call
    assert "limits_acquire(" in sent[0] and plain_on_keyed.slots == ()  # acquire's answer, as on SQLite
    waiting, sent = _engine_statements(lambda: services.acquire("api", run_id="r4", request="q4", timeout="1s"))
    assert waiting.state == "waiting" and len(sent) == 1 and waiting.limits == ()
    for slot_id in (keyed.slot_id, *(slot_id for _, slot_id in group.slots)):
        released, sent = _engine_statements(lambda slot_id=slot_id: services.release(slot_id))
        assert released is True and len(sent) == 1 and "limits_release(" in sent[0]
    assert_counters_match_rows("api")
    assert_counters_match_rows("calls")


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_queueing_handing_over_and_confirming_with_keys_or_groups_are_one_statement_each_on_postgres() -> None:
    """Issue 26: joining a keyed queue or two queues at once (limits_acquire_group), the release
    that grants the freed capacity to them (limits_release, with limits_grant inside) and the
    woken run's confirm (limits_confirm_group) are one statement each, where they were the Python
    rules' 15-44 statements under the limits' locks."""
    declare(api={"capacity": 2, "max_hold": "1h", "per_key": 1}, calls={"capacity": 1, "max_hold": "1h"})
    first = services.acquire("api", run_id="r1", key="acme").slot_id
    services.acquire("api", run_id="r2", key="zeta")
    waiting, sent = _engine_statements(lambda: services.acquire("api", run_id="r3", request="q3", key="acme"))
    assert waiting.state == "waiting" and len(sent) == 1 and "limits_acquire_group(" in sent[0]
    assert services.acquire("api", run_id="r4", request="q4", key="omega").state == "waiting"
    released, sent = _engine_statements(lambda: services.release(first))
    assert released is True and len(sent) == 1 and "limits_release(" in sent[0]
    assert Slot.objects.get(request="q3").state == "reserved"  # acme's own queue: first in order
    assert QueueEntry.objects.get(request="q4").state == "waiting"
    confirmed, sent = _engine_statements(lambda: services.acquire("api", run_id="r3", request="q3", key="acme"))
    assert confirmed.state == "busy" and len(sent) == 1 and Slot.objects.get(request="q3").state == "busy"

    declare(x={"capacity": 1, "max_hold": "1h"}, y={"capacity": 1, "max_hold": "1h"})
    held = services.acquire("y", run_id="r5").slot_id  # y is locked with x: the group waits in both
    group, sent = _engine_statements(lambda: services.acquire_group(["x", "y"], run_id="r6", request="g6"))
    assert group.state == "waiting" and len(sent) == 1
    released, sent = _engine_statements(lambda: services.release(held))
    assert released is True and len(sent) == 1
    assert sorted(Slot.objects.filter(request="g6").values_list("state", flat=True)) == ["reserved", "reserved"]
    group, sent = _engine_statements(lambda: services.acquire_group(["y", "x"], run_id="r6", request="g6"))
    assert group.state == "busy" and len(sent) == 1  # confirmed together, in the order asked
    assert [name for name, _ in group.slots] == ["y", "x"]
    assert set(Slot.objects.filter(request="g6").values_list("state", flat=True)) == {"busy"}
    for name in ("api", "x", "y"):
        assert_counters_match_rows(name)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_releasing_a_reservation_an_operators_release_and_a_runs_end_are_one_statement_each() -> None:
    """Issue 26: the release of a reservation (its run back to the queue, a group's whole), an
    operator's release (audited) and a run's end (end_run over every limit it touched) are one
    call each (limits_release, limits_end_run), where they were the Python rules under the locks."""
    declare(x={"capacity": 1, "max_hold": "1h"}, y={"capacity": 1, "max_hold": "1h", "per_key": 1})
    held = services.acquire("y", run_id="r1", key="k").slot_id
    services.acquire_group(["x", "y"], run_id="r2", request="g2", key="k")
    released, sent = _engine_statements(lambda: services.release(held, actor="user:ana"))  # g2 reserved on both
    assert released is True and len(sent) == 1 and "limits_release(" in sent[0]
    services.acquire("x", run_id="r3", request="q3")  # waits behind g2's reservation
    reserved = Slot.objects.get(request="g2", limit__name="x").id
    released, sent = _engine_statements(lambda: services.release(reserved, actor="user:bob"))
    assert released is True and len(sent) == 1
    assert sorted(Slot.objects.filter(request="g2").values_list("state", "freed_by")) == [
        ("released", "user:bob"),
        ("released", "user:bob"),
    ]
    # g2 goes back to the end of both queues, behind q3 on x, which gets x's freed slot.
    assert Slot.objects.get(request="q3").state == "reserved"
    assert QueueEntry.objects.filter(request="g2", state="waiting").count() == 2
    audit = list(AuditEvent.objects.filter(action="release").order_by("id").values_list("actor", "old_value"))
    assert audit == [("user:ana", "busy"), ("user:bob", "reserved")]
    ended, sent = _engine_statements(lambda: services.end_run("r3"))  # its reservation of x
    assert ended == 1 and len(sent) == 1 and "limits_end_run(" in sent[0]
    assert sorted(Slot.objects.filter(request="g2").exclude(state="released").values_list("state", flat=True)) == [
        "reserved",
        "reserved",
    ]
    ended, sent = _engine_statements(lambda: services.end_run("r2"))  # its reservations
    assert ended == 2 and len(sent) == 1
    ended, sent = _engine_statements(lambda: services.end_run("r2"))
    assert ended == 0 and len(sent) == 1
    for name in ("x", "y"):
        assert_counters_match_rows(name)


@requires_postgres
@pytest.mark.django_db
def test_the_sql_pool_room_answers_as_pools_has_room(clock) -> None:
    """limits_pool_room (engine.sql) against its Python home, limits.engine.keys.Pools.has_room,
    over pools empty, full, overridden, and the no-key pool, with and without per_key."""
    from django.db import connection

    from limits.engine import keys
    from limits.models import Limit

    declare(keyed={"capacity": 4, "max_hold": "1h", "per_key": 1}, open={"capacity": 4, "max_hold": "1h"})
    services.acquire("keyed", run_id="r1", key="full")
    services.acquire("keyed", run_id="r2")  # the no-key pool is full too
    services.set_per_key("keyed", 2, key="big", actor="test")
    services.acquire("keyed", run_id="r3", key="big")
    services.set_per_key("open", 1, key="capped", actor="test")
    services.acquire("open", run_id="r4", key="capped")
    for limit in Limit.objects.all():
        for key in ("", "full", "big", "capped", "never-seen"):
            with connection.cursor() as cursor:
                cursor.execute("SELECT limits_pool_room(l, %s) FROM limits_limit l WHERE id = %s", [key, limit.id])
                in_sql = cursor.fetchone()[0]
            assert in_sql == keys.Pools(Limit.objects.get(id=limit.id)).has_room(key), (limit.name, key)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_late_confirm_lapses_in_one_statement_and_the_fast_check_changes_nothing_first() -> None:
    """A late confirm: limits_confirm answers 'slow' without touching a row; the one call
    services.confirm makes (limits_confirm_or_lapse) then lapses the reservation (SPEC 3.6) and
    hands the freed slot on (here to the same run, re-queued at the end: granted again)."""
    import time_machine

    with time_machine.travel(START, tick=False) as traveller:
        declare(calls={"capacity": 1, "max_hold": "1h"})
        holder = services.acquire("calls", run_id="r1")
        services.acquire("calls", run_id="r2", request="r2:1")
        services.release(holder.slot_id)
        reserved = Slot.objects.get(request="r2:1")
        traveller.shift(dt.timedelta(minutes=2, seconds=1))
        with connection.cursor() as cursor:
            cursor.execute("SELECT limits_confirm(%s, %s)", [reserved.id, START + dt.timedelta(minutes=3)])
            assert cursor.fetchone() == ("slow",)
        assert Slot.objects.get(id=reserved.id).state == "reserved"
        confirmed, sent = _engine_statements(lambda: services.confirm(reserved.id))
        assert confirmed is False and len(sent) == 1 and "limits_confirm_or_lapse(" in sent[0]
        assert Slot.objects.get(id=reserved.id).state == "lapsed"
        assert list(QueueEntry.objects.filter(state="waiting").values_list("run_id", flat=True)) == []
        again = Slot.objects.get(request="r2:1", state="reserved")  # re-queued, granted again
        assert again.id != reserved.id
        confirmed, sent = _engine_statements(lambda: services.confirm(again.id))
        assert confirmed is True and len(sent) == 1
    assert_counters_match_rows("calls")


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_groups_late_replay_lapses_it_whole_in_one_call(clock) -> None:
    """A woken run asks again after its group's 2 minutes: limits_acquire_group lapses the group
    whole, sends it to the end of both queues, grants it again and confirms it, in the one call
    (limits_previous with limits_confirm_or_lapse), not the ORM under the locks."""
    declare(x={"capacity": 1, "max_hold": "1h"}, y={"capacity": 1, "max_hold": "1h"})
    held = services.acquire("x", run_id="r1").slot_id
    services.acquire_group(["x", "y"], run_id="g1", request="g1")
    services.release(held)
    assert sorted(Slot.objects.filter(request="g1").values_list("state", flat=True)) == ["reserved", "reserved"]
    clock.advance(minutes=2, seconds=1)
    got, sent = _engine_statements(lambda: services.acquire_group(["x", "y"], run_id="g1", request="g1"))
    assert len(sent) == 1 and "limits_acquire_group(" in sent[0]
    assert sorted(Slot.objects.filter(request="g1").values_list("state", flat=True)) == [
        "busy",
        "busy",
        "lapsed",
        "lapsed",
    ]
    assert got.state == "busy"  # back at the end of both queues, granted again at once and confirmed
    for name in ("x", "y"):
        assert_counters_match_rows(name)


@pytest.mark.django_db
def test_a_limits_timestamps_never_go_back_whatever_the_clock_says(clock) -> None:
    """The invariant limits.verify relies on: the time written for a change is never earlier than
    the limit's previous change (the database functions read the caller's clock before they
    take the lock). Here the clock itself steps back, the extreme case of that race."""
    declare(calls={"capacity": 1, "max_hold": "1h"})
    clock.advance(seconds=10)
    first = services.acquire("calls", run_id="r1")
    later = START + dt.timedelta(seconds=10)
    clock.advance(seconds=-5)
    assert services.release(first.slot_id) is True
    assert Slot.objects.get(id=first.slot_id).freed_at == later
    second = services.acquire("calls", run_id="r2")
    assert Slot.objects.get(id=second.slot_id).granted_at == later
    services.acquire("calls", run_id="r3")
    assert QueueEntry.objects.get(run_id="r3").enqueued_at == later
    services.set_capacity("calls", 2, actor="user:ada")  # the Python path: grants r3 at the same time
    assert Slot.objects.get(run_id="r3").granted_at == later
    assert Limit.objects.get(name="calls").last_event_at == later
    clock.advance(seconds=20)
    services.release(second.slot_id)
    assert Slot.objects.get(id=second.slot_id).freed_at == START + dt.timedelta(seconds=25)
    assert_counters_match_rows("calls")


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_function_that_refuses_or_answers_slow_inside_a_transaction_keeps_no_limit_locked() -> None:
    """Each function that takes a limit's row lock and then refuses (an undeclared limit) or
    leaves the case to Python (a late group confirm) gives the lock back first (engine.sql: the
    lock is taken in a subtransaction that the answer rolls back): the Python rules lock every
    limit they need in id order, and a lock kept from the function could be out of that order
    (two such transactions deadlocked in the chaos run)."""
    import psycopg

    declare(
        a={"capacity": 1, "max_hold": "1h"},
        b={"capacity": 2, "max_hold": "1h", "per_key": 1},
        c={"capacity": 1, "max_hold": "1h"},
    )
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 2, "max_hold": "1h", "per_key": 1})  # no c
    blocker = services.acquire("a", run_id="blocker").slot_id
    services.acquire("b", run_id="holder", key="k1")
    services.acquire_group(["a", "b"], run_id="group", request="group", key="k2")  # b is not plain now
    settings = connection.settings_dict
    other = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"], autocommit=True
    )

    def locked(limit_id: int) -> bool:
        try:
            other.execute("SELECT 1 FROM limits_limit WHERE id = %s FOR UPDATE NOWAIT", [limit_id])
        except psycopg.errors.LockNotAvailable:
            return True
        return False

    def answer(sql: str) -> str:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
            outcome: str = cursor.fetchone()[0]
            kept = [limit.name for limit in Limit.objects.filter(name__in="abc") if locked(limit.id)]
            assert not kept, f"{sql} kept a lock on {kept}"
        return outcome

    try:
        # c is undeclared: found once c is locked
        assert answer("SELECT outcome FROM limits_acquire('c', 'r', 'req-1', '', 1000, now(), 120000, 120000)") == (
            "undeclared"
        )
        assert (  # found once every limit is locked
            answer(
                "SELECT outcome FROM limits_acquire_group("
                "'{b,c}', 'r', 'req-2', '', '{k9,k9}', 1000, now(), 120000, 120000, false)"
            )
            == "undeclared"
        )
        assert services.release(blocker) is True  # the group is reserved on a and b
        late = "SELECT outcome FROM limits_confirm_group('{a,b}', 'group', now() + interval '1 day')"
        assert answer(late) == "slow"  # late: limits.engine.slots lapses it (limits_confirm_or_lapse)
    finally:
        other.close()
    with pytest.raises(services.LimitsError) as refused:
        services.acquire_group(["b", "c"], run_id="r", request="req-3")
    assert (refused.value.field, refused.value.message) == (
        "limit",
        "limit 'c' is no longer declared in the workspace, so it cannot be acquired",
    )
    with CaptureQueriesContext(connection) as captured, pytest.raises(services.LimitsError) as refused:
        services.acquire("nope", run_id="r", request="req-4")
    assert (refused.value.field, refused.value.message) == ("limit", "unknown limit 'nope'")
    assert len(captured.captured_queries) == 1  # the refusal is the one call's answer


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_the_functions_keep_index_plans_made_while_the_tables_were_empty() -> None:
    """PL/pgSQL caches a generic plan per statement and session after a few calls. Made while
    limits_queueentry and limits_slot held a page, it was a sequential scan, kept for the life of
    the connection however long the history grew (every acquire read the whole queue history:
    migration 0016). Never: a sequential scan of those tables inside the engine's functions.

    The plans are read with auto_explain (nested statements, sent to this client as notices).
    The foreign-key checks of a commit are PostgreSQL's own statements, planned the same way and
    out of the functions' reach: they are left out here (docs/performance.md)."""
    declare(calls={"capacity": 1, "max_hold": "1h"})
    with connection.cursor() as cursor:
        # What autovacuum (or the bench's VACUUM) does to a young installation: the statistics
        # say the tables are as small as they are now.
        cursor.execute("ANALYZE limits_queueentry, limits_slot")

    def queued_cycle(n: int) -> None:
        held = services.acquire("calls", run_id=f"h{n}", request=f"h{n}:1")
        services.acquire("calls", run_id=f"w{n}", request=f"w{n}:1")  # joins the queue
        services.release(held.slot_id)  # hands the slot over: reserved for w
        mine = services.acquire("calls", run_id=f"w{n}", request=f"w{n}:1")  # confirms
        assert mine.state == "busy"
        services.release(mine.slot_id)

    for n in range(8):  # the tables hold a few rows: the plans this session caches are made now
        queued_cycle(n)
    plans: list[str] = []
    connection.connection.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    with connection.cursor() as cursor:
        for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice"):
            cursor.execute(f"SET auto_explain.{setting}")
        cursor.execute("LOAD 'auto_explain'")
    try:
        for n in range(8, 12):
            queued_cycle(n)
    finally:
        connection.close()  # auto_explain and the notice handler go with the connection
    assert any("limits_acquire" in plan for plan in plans), "auto_explain sent no plans"
    scans = [plan for plan in plans if "Seq Scan on limits_" in plan and "FOR KEY SHARE OF x" not in plan]
    assert scans == []


def _before_insights(sent: list[str]) -> list[str]:
    """A sweep pass's statements before insights (limits.insights.record reads SweepState first)."""
    return sent[: next(n for n, sql in enumerate(sent) if "limits_sweepstate" in sql)]


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_sweep_pass_is_one_statement_whatever_the_number_of_limits_and_nothing_else_locks(clock) -> None:
    """Issue 26: finding the limits with work and sweeping each (expiries, a group's lapse,
    time-outs, grants) is one statement, the procedure limits_sweep, for 2 limits as for 12; each
    limit's sweep commits before the next (the pass runs in autocommit, as the task does), so the
    first limit's changes are visible from another connection before the pass ends. The rest of
    the pass reads without locks (the history purge, insights)."""
    declare(
        x={"capacity": 1, "max_hold": "1m"},
        y={"capacity": 2, "max_hold": "1h"},
        idle={"capacity": 1, "max_hold": "1h"},
        **{f"m{n}": {"capacity": 1, "max_hold": "1m"} for n in range(10)},
    )
    services.acquire("x", run_id="r1")  # past its max hold below
    services.acquire("y", run_id="r2")
    services.acquire_group(["x", "y"], run_id="g1", request="g1", timeout="10m")
    services.acquire("x", run_id="r3", timeout="30s")  # times out
    clock.advance(minutes=2)
    report, sent = _engine_statements(services.sweep)
    assert report.limits == 2  # x (expiry, time-out) and y (room, g1 waiting)
    calls = [sql for sql in sent if "limits_sweep(" in sql]
    assert len(calls) == 1 and calls[0].startswith("CALL ")
    assert not [sql for sql in sent if re.search(r"FOR (NO KEY )?UPDATE|limits_sweep_limit", sql)]
    assert (report.expired, report.timed_out, report.granted) == (1, 1, 2)
    assert sorted(Slot.objects.filter(request="g1").values_list("state", flat=True)) == ["reserved", "reserved"]
    clock.advance(minutes=3)  # g1's reservations lapse together: back to the end of both queues, granted again
    report, sent_again = _engine_statements(services.sweep)
    assert report.lapsed == 2 and len([sql for sql in sent_again if "limits_sweep(" in sql]) == 1
    for n in range(10):  # ten more limits with work: the same statements
        services.acquire(f"m{n}", run_id=f"m{n}")
    clock.advance(minutes=2)
    report, sent_many = _engine_statements(services.sweep)
    assert (report.limits, report.expired, report.lapsed) == (12, 10, 2)  # and x, y: g1 lapses again
    # steps 1-3 (find, sweep, purge) come before insights, whose statements follow the minutes
    assert len(_before_insights(sent_many)) == len(_before_insights(sent))
    assert [sql.split()[0] for sql in _before_insights(sent)] == ["CALL", "SELECT", "SELECT"]  # the purge reads
    for name in ("x", "y", "idle", "m0", "m9"):
        assert_counters_match_rows(name)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_sweep_pass_commits_each_limit_before_it_sweeps_the_next(clock) -> None:
    """A limit late in the pass never keeps the ones before it locked: while another connection
    holds m1's row lock, the pass sweeps m0, commits it (seen from a third connection, with m0's
    row free to lock) and waits on m1."""
    import threading
    import time

    import psycopg

    declare(m0={"capacity": 1, "max_hold": "1m"}, m1={"capacity": 1, "max_hold": "1m"})
    services.acquire("m0", run_id="a")
    services.acquire("m1", run_id="b")
    clock.advance(minutes=2)
    settings = connection.settings_dict
    holder = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"], autocommit=True
    )
    reports = []

    def sweep_in_a_thread() -> None:
        try:
            reports.append(services.sweep())
        finally:
            connection.close()

    with holder.transaction():
        holder.execute("SELECT 1 FROM limits_limit WHERE name = 'm1' FOR NO KEY UPDATE")
        sweeper = threading.Thread(target=sweep_in_a_thread)
        sweeper.start()
        deadline = time.monotonic() + 30
        while not holder.execute("SELECT 1 FROM limits_slot WHERE run_id = 'a' AND state = 'expired'").fetchone():
            assert time.monotonic() < deadline, "m0 was not swept and committed while m1 was locked"
            time.sleep(0.02)
        assert holder.execute(
            "SELECT busy_count FROM limits_limit WHERE name = 'm0' FOR NO KEY UPDATE NOWAIT"
        ).fetchone() == (0,)
        assert sweeper.is_alive()  # waiting for m1
        assert holder.execute("SELECT state FROM limits_slot WHERE run_id = 'b'").fetchone() == ("busy",)
    sweeper.join(timeout=30)
    holder.close()
    assert [(report.limits, report.expired) for report in reports] == [(2, 2)]
    assert Slot.objects.get(run_id="b").state == "expired"


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_an_operators_capacity_pause_and_resume_are_one_call_each(django_capture_on_commit_callbacks) -> None:
    """Issue 26: set_capacity, pause_limit and resume_limit lock, change, grant and audit in one
    call (limits_operate); the limit they return is read after the commit, without a lock."""
    declare(x={"capacity": 1, "max_hold": "1h"}, y={"capacity": 1, "max_hold": "1h"})
    services.acquire("x", run_id="r1")
    services.acquire_group(["x", "y"], run_id="g1", request="g1")  # y is locked with x: g1 waits in both
    for action, check in [
        (lambda: services.pause_limit("x", actor="user:ana"), lambda limit: limit.paused),
        (lambda: services.set_capacity("x", 2, actor="user:ana"), lambda limit: limit.capacity == 2),
        (lambda: services.resume_limit("x", actor="user:ana"), lambda limit: not limit.paused),
    ]:
        limit, sent = _engine_statements(action)
        assert check(limit)
        assert [sql for sql in sent if "limits_operate(" in sql] == sent[:1] and len(sent) == 2, sent
        assert not [sql for sql in sent if re.search(r"FOR (NO KEY )?UPDATE", sql)]
    assert sorted(Slot.objects.filter(request="g1").values_list("state", flat=True)) == ["reserved", "reserved"]
    audit = list(AuditEvent.objects.order_by("id").values_list("action", "old_value", "new_value", "capacity_after"))
    assert audit[-3:] == [
        ("pause", "running", "paused", 1),
        ("capacity", "1", "2", 2),
        ("resume", "paused", "running", 2),
    ]
    for name in ("x", "y"):
        assert_counters_match_rows(name)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_an_operators_per_key_and_max_hold_are_one_call_each(django_capture_on_commit_callbacks) -> None:
    """Issue 26: set_per_key (a limit's per_key or one key's pool size; raising it grants at once)
    and set_max_hold lock, change, grant and audit in one call (limits_operate), as set_capacity
    does; the limit they return is read after the commit, without a lock. A refusal the function
    answers (no such limit, a pool size above the capacity, a workflow's own bound) is the Python
    track's error, from the same one call, and changes nothing."""
    from limits.engine.operator_actions import NO_MAX_HOLD

    declare(api={"capacity": 3, "max_hold": "1h", "per_key": 1}, x={"capacity": 1, "max_hold": "1h"})
    services.sync_workflow_bounds({"workflow.w": (2, None)})
    services.acquire("api", run_id="r1", key="acme")
    services.acquire("api", run_id="r2", request="q2", key="acme")  # acme's pool (1) is full: waits
    services.acquire("api", run_id="r3", request="q3", key="acme")
    services.acquire("x", run_id="r4")
    services.acquire_group(["x", "api"], run_id="g5", request="g5", key="zeta")  # api is locked with x
    for action, check in [
        (lambda: services.set_per_key("api", 2, actor="user:ana"), lambda limit: limit.per_key == 2),
        (lambda: services.set_per_key("api", 3, key="acme", actor="user:ana"), lambda limit: limit.per_key == 2),
        (lambda: services.set_per_key("api", None, key="acme", actor="user:ana"), lambda limit: True),
        (lambda: services.set_per_key("api", None, actor="user:ana"), lambda limit: limit.per_key == 1),
        (lambda: services.set_per_key("api", 2, key="new", actor="user:ana"), lambda limit: True),
        (lambda: services.set_max_hold("api", "30m", actor="user:ana"), lambda limit: limit.max_hold_ms == 1_800_000),
        (lambda: services.set_max_hold("api", None, actor="user:ana"), lambda limit: limit.max_hold_ms == 3_600_000),
    ]:
        limit, sent = _engine_statements(action)
        assert check(limit)
        assert [sql for sql in sent if "limits_operate(" in sql] == sent[:1] and len(sent) == 2, sent
        assert not [sql for sql in sent if re.search(r"FOR (NO KEY )?UPDATE", sql)]
    assert Slot.objects.get(request="q2").state == "reserved"  # per_key 2: acme's second slot
    assert Slot.objects.get(request="q3").state == "reserved"  # acme's own pool of 3
    assert QueueEntry.objects.filter(request="g5", state="waiting").count() == 2  # x stays full
    audit = list(
        AuditEvent.objects.filter(action__in=["per_key", "max_hold"])
        .order_by("id")
        .values_list("action", "key", "old_value", "new_value", "capacity_after")
    )
    assert audit == [
        ("per_key", "", "1", "2", None),
        ("per_key", "acme", "2", "3", None),
        ("per_key", "acme", "3", "2 (per_key)", None),
        ("per_key", "", "2", "1 (declared)", None),
        ("per_key", "new", "1", "2", None),
        ("max_hold", "", "3600000", "1800000", None),
        ("max_hold", "", "1800000", "3600000 (declared)", None),
    ]
    not_a_number = "per_key must be a whole number from 1 to capacity (3), not '2'"
    refusals = [
        (lambda: services.set_per_key("nope", 1), "limit", "unknown limit 'nope'"),
        (lambda: services.set_per_key("api", 4, key="acme"), "per_key", "per_key must be at most capacity (3)"),
        (lambda: services.set_per_key("api", 0), "per_key", "per_key must be at least 1, not 0"),
        (lambda: services.set_per_key("api", "2"), "per_key", not_a_number),
        (lambda: services.set_max_hold("nope", "1h"), "limit", "unknown limit 'nope'"),
        (lambda: services.set_max_hold("workflow.w", "1h"), "max_hold", NO_MAX_HOLD.format(name="workflow.w")),
    ]  # fmt: skip
    for action, field, message in refusals:
        with pytest.raises(services.LimitsError) as refused:
            _engine_statements(action)
        assert (refused.value.field, refused.value.message) == (field, message)
    assert AuditEvent.objects.filter(action__in=["per_key", "max_hold"]).count() == len(audit)
    for name in ("api", "x"):
        assert_counters_match_rows(name)


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_an_operators_share_weight_and_min_are_one_call_each(django_capture_on_commit_callbacks) -> None:
    """Issue 26: set_share, set_weight and set_min (SPEC 13.5) lock, change, grant and audit in
    one call (limits_operate), as set_capacity does, with the audit rows the Python track writes
    on SQLite; a min above the capacity read under the lock, or no such limit, is the Python
    track's error from the same one call, and changes nothing."""
    declare(api={"capacity": 2, "max_hold": "1h"})
    held = services.acquire("api", run_id="a1", key="a").slot_id
    services.acquire("api", run_id="a2", key="a")
    for run, key in (("a3", "a"), ("b1", "b"), ("a4", "a"), ("b2", "b")):
        assert services.acquire("api", run_id=run, request=f"{run}:0", key=key).state == "waiting"
    for action, check in [
        (lambda: services.set_share("api", "fair", actor="user:ana"), lambda limit: limit.share == "fair"),
        (lambda: services.set_weight("api", 3, key="a", actor="user:ana"), lambda limit: True),
        (lambda: services.set_min("api", 1, key="b", actor="user:ana"), lambda limit: True),
        (lambda: services.set_min("api", None, key="b", actor="user:ana"), lambda limit: True),
        (lambda: services.set_weight("api", None, key="a", actor="user:ana"), lambda limit: True),
        (lambda: services.set_min("api", 2, key="new", actor="user:ana"), lambda limit: True),
        (lambda: services.set_share("api", None, actor="user:ana"), lambda limit: limit.share == "fifo"),
        (lambda: services.set_share("api", "fair", actor="user:ana"), lambda limit: limit.share == "fair"),
    ]:
        limit, sent = _engine_statements(action)
        assert check(limit)
        assert [sql for sql in sent if "limits_operate(" in sql] == sent[:1] and len(sent) == 2, sent
    services.release(held)  # fair: b holds none (a holds 1): b's oldest, not a3
    assert Slot.objects.get(request="b1:0").state == "reserved"
    assert QueueEntry.objects.get(request="a3:0").state == "waiting"
    audit = list(
        AuditEvent.objects.filter(action__in=["share", "weight", "min"])
        .order_by("id")
        .values_list("action", "key", "old_value", "new_value", "capacity_after")
    )
    assert audit == [
        ("share", "", "fifo", "fair", None),
        ("weight", "a", "1", "3", None),
        ("min", "b", "0", "1", None),
        ("min", "b", "1", "0 (default)", None),
        ("weight", "a", "3", "1 (default)", None),
        ("min", "new", "0", "2", None),
        ("share", "", "fair", "fifo (declared)", None),
        ("share", "", "fifo", "fair", None),
    ]
    out_of_range = "min must be a whole number from 0 to capacity (2), not "
    refusals = [
        (lambda: services.set_min("api", 3, key="a"), "min", out_of_range + "3"),
        (lambda: services.set_min("api", "1", key="a"), "min", out_of_range + "'1'"),
        (lambda: services.set_min("nope", 1, key="a"), "limit", "unknown limit 'nope'"),
        (lambda: services.set_weight("nope", 2, key="a"), "limit", "unknown limit 'nope'"),
        (lambda: services.set_share("nope", "fair"), "limit", "unknown limit 'nope'"),
    ]  # fmt: skip
    for action, field, message in refusals:
        with pytest.raises(services.LimitsError) as refused:
            _engine_statements(action)
        assert (refused.value.field, refused.value.message) == (field, message)
    assert AuditEvent.objects.filter(action__in=["share", "weight", "min"]).count() == len(audit)
    assert_counters_match_rows("api")


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_an_operators_box_change_is_one_call(django_capture_on_commit_callbacks) -> None:
    """Issue 26: set_box (SPEC 12.5) locks the box, writes its base and burst, keeps its ceiling,
    grants and audits in one call (limits_operate, action 'box'), with the audit text the Python
    track writes on SQLite (a burst as Python's "g" writes it); a ceiling past 100,000 read under
    the lock, or no box declared, is the Python track's error from the same one call, and changes
    nothing."""
    from limits.config import define_workspace
    from limits.engine.operator_actions import NO_BOX

    with pytest.raises(services.LimitsError) as refused:
        _engine_statements(lambda: services.set_box(base=2, actor="user:ana"))
    assert (refused.value.field, refused.value.message) == ("base", NO_BOX)
    services.sync_workspace(define_workspace(limits={}, run_concurrency={"base": 1, "burst": 1.0}))
    services.acquire("box", run_id="r1", key="workflow.a")
    assert services.acquire("box", run_id="r2", request="q2", key="workflow.b").state == "waiting"
    assert services.acquire("box", run_id="r3", request="q3", key="workflow.a").state == "waiting"
    for action, expected in [
        (lambda: services.set_box(base=2, actor="user:ana"), (2, 1.0, 2)),  # grants r2 (b's pool)
        (lambda: services.set_box(burst=1.75, actor="user:ana"), (2, 1.75, 3)),  # grants r3 (a's 2nd)
        (lambda: services.set_box(burst=1.011205, actor="user:ana"), (2, 1.011205, 2)),  # takes nothing back
        (lambda: services.set_box(base=None, burst=None, actor="user:ana"), (1, 1.0, 1)),
    ]:
        limit, sent = _engine_statements(action)
        assert (limit.per_key, limit.burst, limit.capacity) == expected
        assert [sql for sql in sent if "limits_operate(" in sql] == sent[:1] and len(sent) == 2, sent
        assert not [sql for sql in sent if re.search(r"FOR (NO KEY )?UPDATE", sql)]
    assert Slot.objects.get(request="q2").state == "reserved"
    assert Slot.objects.get(request="q3").state == "reserved"
    audit = list(
        AuditEvent.objects.filter(action="box").order_by("id").values_list("old_value", "new_value", "capacity_after")
    )
    assert audit == [
        ("base 1, burst 1, ceiling 1", "base 2, burst 1, ceiling 2", 2),
        ("base 2, burst 1, ceiling 2", "base 2, burst 1.75, ceiling 3", 3),
        # a float's shortest exact text on both databases (config.burst_text), not a rounding
        ("base 2, burst 1.75, ceiling 3", "base 2, burst 1.011205, ceiling 2", 2),
        ("base 2, burst 1.011205, ceiling 2", "base 1, burst 1, ceiling 1", 1),
    ]
    with pytest.raises(services.LimitsError) as refused:
        services.set_box(base=60_000, burst=2.0, actor="user:ana")
    assert (refused.value.field, refused.value.message) == ("base", "base x burst must be at most 100000, not 120000")
    services.set_box(base=20_000, actor="user:ana")
    with pytest.raises(services.LimitsError) as refused:  # the base in force, read under the lock
        services.set_box(burst=6.0, actor="user:ana")
    assert (refused.value.field, refused.value.message) == ("burst", "base x burst must be at most 100000, not 120000")
    services.set_box(base=None, actor="user:ana")
    audit += [
        ("base 1, burst 1, ceiling 1", "base 20000, burst 1, ceiling 20000", 20_000),
        ("base 20000, burst 1, ceiling 20000", "base 1, burst 1, ceiling 1", 1),
    ]
    assert AuditEvent.objects.filter(action="box").count() == len(audit)
    assert (Limit.objects.get(name="box").per_key, Limit.objects.get(name="box").capacity) == (1, 1)
    assert_counters_match_rows("box")


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_deploy_is_one_call() -> None:
    """Issue 26: sync_workspace and sync_workflow_bounds (SPEC 1.4, 1.5, 11.5, 12.1) lock every
    limit, write the declared values, grant what a raise frees (a group's other limit included,
    its run woken after the commit) and audit in one call each (limits_sync_workspace,
    limits_sync_bounds), no row lock sent from Python; ensure_workflow_bound (11.6) is one call
    inside the caller's transaction, in a savepoint as on SQLite; a taken name is refused by the
    same one call."""
    from limits.config import define_workspace
    from limits.signals import runs_woken

    def deploy(capacity: int, box: dict[str, object] | None):
        config = {"calls": {"capacity": capacity, "max_hold": "1h"}, "sms": {"capacity": 1, "max_hold": "1h"}}
        return services.sync_workspace(define_workspace(limits=config, run_concurrency=box))

    woken: list[list[str]] = []
    runs_woken.connect(lambda sender, run_ids, **_: woken.append(run_ids), weak=False, dispatch_uid="deploy-woken")
    try:
        report, sent = _engine_statements(lambda: deploy(1, {"base": 1}))
        assert "calls" in report.created and "box" in report.created
        assert len(sent) == 1 and "limits_sync_workspace(" in sent[0]
        services.acquire("calls", run_id="r1")
        assert services.acquire_group(["sms", "calls"], run_id="r2", request="g2").state == "waiting"
        woken.clear()
        report, sent = _engine_statements(lambda: deploy(2, {"base": 2, "burst": 1.5}))
        assert (report.updated, len(sent)) == (["calls", "box"], 1)
        assert woken == [["r2"]]  # after the commit: the group granted on both limits
    finally:
        runs_woken.disconnect(dispatch_uid="deploy-woken")
    assert not [sql for sql in sent if re.search(r"FOR (NO KEY )?UPDATE", sql)]
    assert sorted(Slot.objects.filter(request="g2").values_list("state", flat=True)) == ["reserved", "reserved"]
    assert Limit.objects.get(name="box").capacity == 3
    report, sent = _engine_statements(lambda: services.sync_workflow_bounds({"workflow.w": (2, None)}))
    assert (report.created, len(sent)) == (["workflow.w"], 1) and "limits_sync_bounds(" in sent[0]
    services.sync_workflow_bounds({})  # undeclared: the next start syncs it
    with transaction.atomic():  # start_run's: the bound it syncs is its own, in its transaction
        _, sent = _engine_statements(lambda: services.ensure_workflow_bound("workflow.w", 2, None))
    sent = [sql for sql in sent if "SAVEPOINT" not in sql]
    assert len(sent) == 2 and "limits_sync_bounds(" in sent[1]  # the read that finds it undeclared, the sync
    assert Limit.objects.get(name="workflow.w").declared
    with CaptureQueriesContext(connection) as captured, pytest.raises(services.LimitsError):
        services.sync_workflow_bounds({"calls": (2, None)})
    assert len(captured.captured_queries) == 1 and "limits_sync_bounds(" in captured.captured_queries[0]["sql"]
    for name in ["calls", "sms", "box"]:
        assert_counters_match_rows(name)


@pytest.mark.django_db(transaction=True)
def test_asking_again_what_became_of_a_request_is_one_call_in_every_case(clock) -> None:
    """Issue 26: a run that asks again with the same request (a replay, SPEC 2.2, 3.4) is answered
    by the one call (limits_previous inside limits_acquire and limits_acquire_group), whatever
    became of it: still waiting (its own timeout and deadline, not the call's), timed out,
    cancelled by its run's end, granted and released since (the slots it was granted), and a
    reservation past its 2 minutes (lapsed, back at the end of the queue). The answers are the
    Python track's: the same steps run on SQLite, where only the count of calls differs."""
    one = connection.vendor == "postgresql"
    declare(calls={"capacity": 1, "max_hold": "1h"}, sms={"capacity": 1, "max_hold": "1h"})
    held = services.acquire("calls", run_id="h", request="h").slot_id
    services.acquire("sms", run_id="hs", request="hs")
    first = services.acquire("calls", run_id="w", request="w", timeout="10m")
    group = services.acquire_group(["sms", "calls"], run_id="g", request="g", timeout="1h", key="acme")

    again, sent = _engine_statements(lambda: services.acquire("calls", run_id="w", request="w", timeout="5m"))
    assert (len(sent) == 1 or not one) and (again.state, again.timeout_ms, again.deadline) == (
        "waiting",
        600_000,
        first.deadline,
    )
    again, sent = _engine_statements(lambda: services.acquire_group(["calls", "sms"], run_id="g", request="g"))
    assert (len(sent) == 1 or not one) and again.state == "waiting" and again.limits == ("calls", "sms")
    assert (again.key, again.timeout_ms, again.deadline) == ("acme", 3_600_000, group.deadline)

    services.end_run("g")
    again, sent = _engine_statements(lambda: services.acquire_group(["sms", "calls"], run_id="g", request="g"))
    assert (len(sent) == 1 or not one) and (again.state, again.limits) == ("cancelled", ("sms", "calls"))

    clock.advance(minutes=11)
    services.sweep()  # w's 10 minutes are over
    again, sent = _engine_statements(lambda: services.acquire("calls", run_id="w", request="w"))
    assert (len(sent) == 1 or not one) and (again.state, again.limit, again.timeout_ms) == (
        "timed_out",
        "calls",
        600_000,
    )

    late = services.acquire("calls", run_id="l", request="l")
    services.release(held)  # l is reserved; it comes back after its 2 minutes
    clock.advance(minutes=2, seconds=1)
    again, sent = _engine_statements(lambda: services.acquire("calls", run_id="l", request="l"))
    assert (len(sent) == 1 or not one) and again.state == "busy"  # lapsed, back at the end, granted again: confirmed
    assert sorted(Slot.objects.filter(request="l").values_list("state", flat=True)) == ["busy", "lapsed"]
    services.release(again.slot_id)
    replayed, sent = _engine_statements(lambda: services.acquire("calls", run_id="l", request="l"))
    assert (len(sent) == 1 or not one) and (replayed.state, replayed.slot_id) == (
        "busy",
        again.slot_id,
    )  # what it was granted
    assert late.state == "waiting"
    for name in ("calls", "sms"):
        assert_counters_match_rows(name)


@pytest.mark.django_db(transaction=True)
def test_a_replay_answers_the_key_and_the_limit_of_the_request_as_made(clock) -> None:
    """What became of a request is told as it was made, whichever call asks (found by a fresh-eye
    review): a plain acquire of one member of a keyed group answers that member first and the
    group's key, waiting or busy; a replay without the key answers the slots' key."""
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})
    held = services.acquire("a", run_id="h", request="h").slot_id
    assert services.acquire_group(["b", "a"], run_id="g", request="g", key="k1").state == "waiting"
    waiting = services.acquire("a", run_id="g", request="g")
    assert (waiting.state, waiting.limit, waiting.key, waiting.limits) == ("waiting", "a", "k1", ())
    services.release(held)
    busy = services.acquire("a", run_id="g", request="g")  # confirms the group's reservations
    assert (busy.state, busy.limit, busy.key) == ("busy", "a", "k1")
    assert busy.slot_id == Slot.objects.get(request="g", limit__name="a").id
    again = services.acquire_group(["a", "b"], run_id="g", request="g")  # no key given
    assert (again.state, again.key, [name for name, _ in again.slots]) == ("busy", "k1", ["a", "b"])
    other = services.acquire("b", run_id="g", request="g")
    assert (other.limit, other.slot_id, other.key) == ("b", Slot.objects.get(request="g", limit__name="b").id, "k1")
