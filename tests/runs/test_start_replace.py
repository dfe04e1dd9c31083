"""SPEC 14.3, 14.6, 14.7 for a run's start: under a bound (a workflow's own, or a named limit)
whose on_full is 'replace', or a start_run(on_full="replace"), a run that cannot start at once
takes the queue place of its key's runs queued to start under the same bounds (the runs without
a key replace each other): they end 'replaced', never started, naming the run that replaced them
(Run.end_reason, end_limit, caused_by), counted on the limit (replaced_count, /metrics). A run
holding its slots (started, or granted and not yet started) is never touched. A batch is judged
run by run in order: a later run of it replaces an earlier one of its key. Both databases,
through the public names."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from limits.models import Limit, QueueEntry, Slot
from limits.runs import bounds as run_bounds
from limits.runs import start_run, start_runs, workflow
from limits.verify import verify
from limits.workflow import SlotReplacedError, acquire_slot
from stackbone.models import Run, Step
from stackbone.runs import runtime
from stackbone.runs.runtime import advance
from studio.workflows import step
from tests.conftest import requires_postgres
from tests.factories import assert_counters_match_rows, declare, queue
from tests.insights.test_metrics import TOKEN, one, scrape
from tests.services.test_verify import raw_entry
from tests.services.test_verify import violations as planted_violations

pytestmark = pytest.mark.django_db(transaction=True)

KEYED = "workflow.test_start_replaces"
KEYLESS = "workflow.test_start_replaces_keyless"
WAITS = "workflow.test_start_replace_waits"


@step
def noted(label: str) -> str:
    return label


@workflow(name="test_start_replaces", concurrency={"total": 3, "per_key": 1, "on_full": "replace"})
def replaces(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_start_replaces_keyless", concurrency={"total": 1, "on_full": "replace"})
def replaces_keyless(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_start_replace_waits", concurrency={"total": 1})
def waits(input: dict) -> str:
    return noted(input.get("label", ""))


@workflow(name="test_start_replace_body")
def body_replaces(input: dict) -> str:
    acquire_slot("syncs", key=input["key"], on_full="replace")
    return "held"


@pytest.fixture
def bounds(clock, no_worker):
    run_bounds.sync(["test_start_replaces", "test_start_replaces_keyless", "test_start_replace_waits"])


def fresh(run: Run) -> Run:
    return Run.objects.get(id=run.id)


def assert_replaced(run: Run, by: Run, reason: str, limit: str, request: str = "start") -> None:
    row = fresh(run)
    assert (row.status, row.end_reason, row.end_limit, row.caused_by) == ("replaced", reason, limit, by.id)
    assert row.is_finished and row.started_at is None and row.finished_at is not None
    assert not row.suspended and row.waiting_for == "" and row.lease_owner == ""
    assert not QueueEntry.objects.filter(run_id=run.id, state="waiting").exists()
    assert set(QueueEntry.objects.filter(run_id=run.id).values_list("state", "replaced_by")) == {
        ("replaced", f"{by.id}:{request}")
    }
    assert not Slot.objects.filter(run_id=run.id).exists()
    assert not Step.objects.filter(run_id=run.id).exists()
    assert advance(run.id) == "skipped"  # finished: not runnable, nothing of it runs


def test_a_start_replaces_its_key_s_queued_run_and_takes_its_place(bounds) -> None:
    holder = start_run(replaces, {"label": "a1"}, concurrency_key="acme")
    a2 = start_run(replaces, {"label": "a2"}, concurrency_key="acme")
    b1 = start_run(replaces, {"label": "b1"}, concurrency_key="globex")
    b2 = start_run(replaces, {"label": "b2"}, concurrency_key="globex")
    assert [fresh(run).status for run in (holder, a2, b1, b2)] == ["pending", "queued", "pending", "queued"]
    assert queue(KEYED) == [a2.id, b2.id]
    a3 = start_run(replaces, {"label": "a3"}, concurrency_key="acme")
    assert a3.status == "queued"
    assert_replaced(a2, a3, "key_pool_full", KEYED)
    assert queue(KEYED) == [a3.id, b2.id]  # in the place of the run it replaced, before globex's
    assert [fresh(run).status for run in (holder, b1, b2)] == ["pending", "pending", "queued"]
    assert Limit.objects.get(name=KEYED).replaced_count == 1
    assert_counters_match_rows(KEYED)
    assert verify().ok, verify().violations
    # the holder ends: the run that replaced is the one that starts, and runs
    assert advance(holder.id) == "completed"
    assert advance(a3.id) == "completed"
    assert fresh(a3).output == "a3"


def test_each_newer_start_replaces_the_one_before(bounds) -> None:
    start_run(replaces, {}, concurrency_key="acme")
    older = [start_run(replaces, {}, concurrency_key="acme") for _ in range(3)]
    assert_replaced(older[0], older[1], "key_pool_full", KEYED)
    assert_replaced(older[1], older[2], "key_pool_full", KEYED)
    assert queue(KEYED) == [older[2].id]
    assert Limit.objects.get(name=KEYED).replaced_count == 2
    assert verify().ok, verify().violations


def test_runs_without_a_key_replace_each_other_and_no_keyed_run(bounds) -> None:
    holder = start_run(replaces_keyless, {})
    keyless = start_run(replaces_keyless, {})
    keyed = start_run(replaces_keyless, {}, concurrency_key="acme")
    newer = start_run(replaces_keyless, {})
    assert_replaced(keyless, newer, "limit_full", KEYLESS)
    assert fresh(holder).status == "pending" and fresh(keyed).status == "queued"
    assert queue(KEYLESS) == [newer.id, keyed.id]
    assert verify().ok, verify().violations


def test_a_run_holding_its_slots_is_never_touched(bounds) -> None:
    """Neither a run that started nor a queued run granted its slots (woken, not yet started)."""
    holder = start_run(replaces_keyless, {"label": "holder"})
    granted = start_run(replaces_keyless, {"label": "granted"})
    assert advance(holder.id) == "completed"  # its slot goes to `granted`, reserved for it
    assert Slot.objects.get(run_id=granted.id, limit__name=KEYLESS).state == "reserved"
    newer = start_run(replaces_keyless, {"label": "newer"})
    assert fresh(newer).status == "queued" and queue(KEYLESS) == [newer.id]
    assert fresh(granted).status == "queued" and advance(granted.id) == "completed"
    assert Limit.objects.get(name=KEYLESS).replaced_count == 0
    assert advance(newer.id) == "completed"


def test_the_start_chooses_replace_for_itself(bounds) -> None:
    start_run(waits, {})
    older = start_run(waits, {})
    waiting = start_run(waits, {}, on_full="wait")  # waits, whatever came before
    assert queue(WAITS) == [older.id, waiting.id]
    newer = start_run(waits, {}, on_full="replace")
    assert_replaced(older, newer, "limit_full", WAITS)
    assert_replaced(waiting, newer, "limit_full", WAITS)
    assert queue(WAITS) == [newer.id]
    # a bound that replaces, and a start that waits: it waits
    start_run(replaces, {}, concurrency_key="acme")
    first = start_run(replaces, {}, concurrency_key="acme")
    second = start_run(replaces, {}, concurrency_key="acme", on_full="wait")
    assert queue(KEYED) == [first.id, second.id]


def test_a_batch_replaces_its_own_earlier_runs_of_a_key(bounds) -> None:
    runs = start_runs(replaces, [{"n": n} for n in range(5)], ["a", "a", "a", "b", "b"])
    assert [run.status for run in runs] == ["pending", "replaced", "queued", "pending", "queued"]
    assert [fresh(run).status for run in runs] == ["pending", "replaced", "queued", "pending", "queued"]
    assert (runs[1].caused_by, runs[1].end_reason, runs[1].end_limit) == (runs[2].id, "key_pool_full", KEYED)
    assert_replaced(runs[1], runs[2], "key_pool_full", KEYED)
    assert queue(KEYED) == [runs[2].id, runs[4].id]
    later = start_runs(replaces, [{}, {}], ["a", "b"])
    assert [run.status for run in later] == ["queued", "queued"]
    assert_replaced(runs[2], later[0], "key_pool_full", KEYED)
    assert_replaced(runs[4], later[1], "key_pool_full", KEYED)
    assert queue(KEYED) == [later[0].id, later[1].id]
    assert Limit.objects.get(name=KEYED).replaced_count == 3
    assert_counters_match_rows(KEYED)
    assert verify().ok, verify().violations


def test_a_named_limit_that_replaces_replaces_the_starts_queued_for_the_same_limits(bounds) -> None:
    """SPEC 14.7: only the key's runs queued for the same limits (here 'syncs' alone, against
    'syncs' with the workflow's own bound)."""
    declare(syncs={"capacity": 1, "max_hold": "1h", "on_full": "replace"})
    holder = start_run(waits, {}, limits=["syncs"], concurrency_key="acme")  # holds 'syncs' and its bound
    alone = start_run(body_replaces, {"key": "acme"}, limits=["syncs"], concurrency_key="acme")
    grouped = start_run(waits, {}, limits=["syncs"], concurrency_key="acme")
    newer = start_run(body_replaces, {"key": "acme"}, limits=["syncs"], concurrency_key="acme")
    assert_replaced(alone, newer, "limit_full", "syncs")
    assert fresh(holder).status == "pending" and fresh(grouped).status == "queued"
    assert queue("syncs") == [newer.id, grouped.id]
    assert verify().ok, verify().violations


def test_a_body_acquisition_that_replaces_ends_a_start_queued_for_the_same_limit(bounds) -> None:
    """SPEC 14.3: a new acquisition of a key takes the place of the key's runs waiting for that
    limit, a run queued to start under it included (which ends replaced, naming that run)."""
    declare(syncs={"capacity": 1, "max_hold": "1h", "on_full": "replace"})
    holder = start_run(body_replaces, {"key": "acme"}, limits=["syncs"], concurrency_key="acme")
    queued = start_run(body_replaces, {"key": "acme"}, limits=["syncs"], concurrency_key="acme")
    acquiring = start_run(body_replaces, {"key": "acme"})  # no bounds: it acquires in its body
    assert advance(acquiring.id) == "suspended"
    assert_replaced(queued, acquiring, "limit_full", "syncs", request="1")
    assert [fresh(holder).status, fresh(acquiring).status] == ["pending", "running"]
    assert verify().ok, verify().violations


def test_a_deferred_start_that_finds_its_bound_full_replaces(bounds) -> None:
    """A run deferred to its start time asks for its place when its time has come: under a bound
    that replaces it takes the place of its key's run queued then."""
    start_run(replaces, {}, concurrency_key="acme")
    queued = start_run(replaces, {}, concurrency_key="acme")
    deferred = runtime.start_run_at(
        replaces, {}, not_before=dt.datetime(2020, 1, 1, tzinfo=dt.UTC), bounds=[KEYED], concurrency_key="acme"
    )
    assert runtime.start_if_due(deferred.id)
    assert advance(deferred.id) == "queued"  # it waits in the queue, in the place of the run it replaced
    assert_replaced(queued, deferred, "key_pool_full", KEYED)
    assert queue(KEYED) == [deferred.id]


def test_metrics_count_the_starts_replaced(bounds, settings) -> None:
    settings.STACKBONE_METRICS_TOKEN = TOKEN
    start_run(replaces, {}, concurrency_key="acme")
    for _ in range(3):
        start_run(replaces, {}, concurrency_key="acme")
    samples = scrape(Client(headers={"Authorization": f"Bearer {TOKEN}"}))
    assert one(samples, "stackbone_limit_replaced_total", limit=KEYED, kind="workflow") == 2
    assert one(samples, "stackbone_limit_replaced_total", limit=KEYLESS, kind="workflow") == 0


def test_verify_holds_the_starts_replaced_and_catches_planted_violations(bounds) -> None:
    """limits verify: a start that joined replacing must leave no run of its key queued to start
    under the same bounds (check o, from the queue's rows), and every run ended 'replaced' names
    its reason, its limit and the run that replaced it (check n, from the runs' rows)."""
    start_run(replaces, {}, concurrency_key="acme")
    replaced = start_run(replaces, {}, concurrency_key="acme")
    newer = start_run(replaces, {}, concurrency_key="acme")
    assert_replaced(replaced, newer, "key_pool_full", KEYED)
    assert verify().ok, verify().violations
    bound = Limit.objects.get(name=KEYED)
    later = timezone.now() + dt.timedelta(seconds=1)
    planted = raw_entry(bound, "run-planted:start", later, key="acme", replacing=True)
    found = [v for v in planted_violations(KEYED) if "on_full 'replace'" in v]
    assert len(found) == 1 and f"{planted.request} joined" in found[0] and "1 other run(s) of key 'acme'" in found[0]
    QueueEntry.objects.filter(id=planted.id).delete()
    Limit.objects.filter(id=bound.id).update(waiting_count=1)
    assert verify().ok, verify().violations
    Run.objects.filter(id=replaced.id).update(caused_by=None)
    assert verify().violations == [f"run {replaced.id} ended replaced without the run that replaced it recorded"]


@requires_postgres
def test_a_run_whose_row_is_held_is_left_to_its_start_gate_which_ends_it_replaced(bounds) -> None:
    """The replacing call never waits for a queued run's row another transaction holds (a worker at
    its start gate, or a cancel, locks the run before the limits: waiting would deadlock): that
    run's start is replaced in the queues, and its start gate ends it 'replaced' with its cause."""
    start_run(replaces_keyless, {})
    older = start_run(replaces_keyless, {})
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(id=older.id)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(10)
        newer = start_run(replaces_keyless, {})
    finally:
        release.set()
        holder.join()
    assert fresh(older).status == "queued"  # left to its gate
    assert queue(KEYLESS) == [newer.id]
    assert advance(older.id) == "ended"
    assert_replaced(older, newer, "limit_full", KEYLESS)
    assert verify().ok, verify().violations


@workflow(name="test_start_replace_body_waits")
def body_waits(input: dict) -> dict:
    try:
        acquire_slot("syncs", key=input["key"], on_full="wait")
    except SlotReplacedError as error:
        return {"replaced_by": error.replaced_by_run, "request": error.replaced_by}
    return {"replaced_by": None}


def test_a_start_that_replaces_ends_a_body_s_wait_for_the_same_limit(bounds) -> None:
    """The other way: a start under 'syncs' (its only bound) replaces the key's acquisition of
    'syncs' waiting in a workflow body, which raises SlotReplacedError naming the start."""
    declare(syncs={"capacity": 1, "max_hold": "1h", "on_full": "replace"})
    holder = start_run(body_replaces, {"key": "acme"}, limits=["syncs"], concurrency_key="acme")
    waiting = start_run(body_waits, {"key": "acme"})
    assert advance(waiting.id) == "suspended"
    newer = start_run(body_replaces, {"key": "acme"}, limits=["syncs"], concurrency_key="acme")
    assert fresh(newer).status == "queued" and queue("syncs") == [newer.id]
    assert advance(waiting.id) == "completed"
    assert fresh(waiting).output == {"replaced_by": newer.id, "request": f"{newer.id}:start"}
    assert fresh(holder).status == "pending"
    assert verify().ok, verify().violations
