"""How the engine locks a limit's row on PostgreSQL: FOR NO KEY UPDATE, never FOR UPDATE.

What must never happen: a transaction that wrote a row referencing a limit it does not hold (a
slot, a queue entry, an insights minute) waits at COMMIT for an engine transaction that holds the
limit. The foreign key check runs at COMMIT (Django's constraints are DEFERRABLE INITIALLY
DEFERRED) and locks the referenced limit FOR KEY SHARE, in the order the rows were written: if
the engine's lock blocked it, that commit would hold KEY SHARE on one limit while it waited for
another, out of the engine's id order, and deadlock. The sweep's insights rollup writes a row for
every limit without locking any (tests/concurrency/test_stress.py found three such deadlocks in
a few runs when the engine locked FOR UPDATE).

And what must still hold: two engine transactions never hold one limit at once."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from limits import insights, services
from limits.engine import keys, python, rules
from limits.models import Limit, LimitMinute, SweepState
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = [requires_postgres, pytest.mark.django_db(transaction=True)]


@contextmanager
def other_connection() -> Iterator[psycopg.Connection[Any]]:
    settings = connection.settings_dict
    other = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"], autocommit=True
    )
    try:
        yield other
    finally:
        other.close()


def can_lock(other: psycopg.Connection[Any], limit_id: int, mode: str) -> bool:
    try:
        other.execute(f"SELECT 1 FROM limits_limit WHERE id = %s FOR {mode} NOWAIT", [limit_id])
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def _holding() -> dict[str, Callable[[], Any]]:
    """Every way the engine takes a limit's row lock, each left open inside the caller's
    transaction: the Python rules (keys.lock, locked_limit, python._locked_slot, locked_by_name, a
    deploy) and the PostgreSQL functions that keep it (a grant, a release, a keyed grant, a
    deploy's)."""
    declare(calls={"capacity": 5, "max_hold": "1h"}, api={"capacity": 5, "max_hold": "1h", "per_key": 2})
    held = services.acquire("calls", run_id="held").slot_id
    keyed = services.acquire("api", run_id="keyed", key="acme").slot_id
    limit = Limit.objects.get(name="calls")

    def sql(text: str, params: list[Any]) -> Callable[[], Any]:
        def call() -> Any:
            with connection.cursor() as cursor:
                cursor.execute(text, params)
                return cursor.fetchone()

        return call

    return {
        "keys.lock": lambda: keys.lock([limit.id]),
        "rules.locked_limit": lambda: rules.locked_limit(limit.name),
        "rules.locked_by_name": lambda: rules.locked_by_name(limit.name),
        "python._locked_slot": lambda: python._locked_slot(held),
        "limits_acquire": sql(
            "SELECT outcome FROM limits_acquire('calls', 'r', 'req-a', '', 1000, now(), 120000, 120000)", []
        ),
        "limits_release": sql("SELECT outcome FROM limits_release(%s, now(), 120000, 120000, NULL)", [held]),
        "limits_acquire_group": sql(
            "SELECT outcome FROM limits_acquire_group("
            "'{calls}', 'r', 'req-g', '', '{k1}', 1000, now(), 120000, 120000, false)",
            [],
        ),
        "keyed limits_release": sql("SELECT outcome FROM limits_release(%s, now(), 120000, 120000, NULL)", [keyed]),
        "limits_sync_workspace": sql(  # a deploy that changes nothing still holds every limit
            "SELECT outcome FROM limits_sync_workspace('{api,calls}', '{5,5}', '{3600000,3600000}', '{2,NULL}', "
            "'{fifo,fifo}', NULL, NULL, NULL, 1000, 'deploy', now(), 120000, 120000)",
            [],
        ),
        "limits_sync_bounds": sql(
            "SELECT outcome FROM limits_sync_bounds('{}', '{}', '{}', 1000, false, 'deploy', now(), 120000, 120000)", []
        ),
    }


def test_every_engine_lock_on_a_limit_lets_a_foreign_key_check_pass_and_excludes_other_engine_locks() -> None:
    ways = _holding()
    with other_connection() as other:
        for name, take in ways.items():
            with transaction.atomic():
                answer = take()
                assert answer != ("slow",), f"{name} left the case to Python: the test needs a function that keeps it"
                limit_id = Limit.objects.get(name="api" if name.startswith("keyed") else "calls").id
                assert can_lock(other, limit_id, "KEY SHARE"), f"{name} blocks a foreign key check (FOR UPDATE?)"
                assert not can_lock(other, limit_id, "NO KEY UPDATE"), f"{name} does not exclude another engine lock"
                transaction.set_rollback(True)


def test_the_insights_rollup_commits_while_an_acquisition_holds_every_limit() -> None:
    """The deadlock's first half, made to wait: an engine transaction holds the limits; the
    sweep's sample writes a minute row for each of them and commits at once (with FOR UPDATE it
    waited for the engine's commit, holding KEY SHARE on the limits it had checked so far)."""
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})
    ids = list(Limit.objects.order_by("id").values_list("id", flat=True))
    SweepState.objects.create(id=1, last_run_at=timezone.now())  # as the first sweep leaves it
    holding, done = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                keys.lock(ids)
                holding.set()
                done.wait(30)
        except BaseException as error:  # noqa: BLE001 - shown by the main thread
            failures.append(error)
            holding.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(30) and not failures, failures
        minute = insights.floor_minute(timezone.now()) + dt.timedelta(minutes=1)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")
        try:
            assert insights.sample(minute)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
    finally:
        done.set()
        thread.join(30)
    assert not failures, failures
    declared = set(Limit.objects.filter(declared=True).values_list("id", flat=True))
    assert set(LimitMinute.objects.filter(minute=minute).values_list("limit_id", flat=True)) == declared
