"""limits/sql/engine.sql is the current definition of the engine's PL/pgSQL functions: the migrated
database holds exactly its functions, and the newest migration that installs it was written for the
file as it is (limits/sql/__init__.py says how a change is made).

The two checks catch different mistakes. The test database is built by running the migrations, and
a migration that installs the file reads it at migrate time, so a fresh database always has the
file's text: the comparison with the database cannot see an edit of the file that has no migration
(a database migrated before the edit would keep the old functions). The fingerprint check does.
The comparison catches what a migration does to the functions besides installing the file: a later
migration that creates or replaces a `limits_` function with its own text, or leaves one the file
no longer defines."""

from __future__ import annotations

import sys

import pytest
from django.db import connection, transaction
from django.db.migrations.loader import MigrationLoader

from limits import sql
from tests.conftest import requires_postgres

SCRATCH = "limits_sql_file_scratch"

# Each `limits_` function of one schema: its name and argument types, and its definition as
# pg_get_functiondef writes it, without the schema before the name.
FUNCTIONS = r"""
SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       regexp_replace(pg_get_functiondef(p.oid), '(FUNCTION|PROCEDURE) ' || quote_ident(n.nspname) || '\.', '\1 ')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %s AND p.proname LIKE 'limits\_%%' AND p.prokind IN ('f', 'p')
"""


def _functions(schema: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(FUNCTIONS, [schema])
        return {name: "\n".join(line.rstrip() for line in definition.splitlines()) for name, definition in cursor}


def _defined_by_the_file() -> dict[str, str]:
    """The functions engine.sql defines, as the server writes them: the file run in a scratch
    schema (first in search_path, so the functions are created there; the migrated schema after it,
    for the row types they declare), read back, then rolled back with its savepoint."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (migrated,) = cursor.fetchone()
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        cursor.execute("SELECT set_config('search_path', %s, true)", [f"{SCRATCH}, {migrated}"])
        cursor.execute(sql.engine_sql(), None)
        defined = _functions(SCRATCH)
        cursor.execute(f"DROP SCHEMA {SCRATCH} CASCADE")
        transaction.set_rollback(True)  # the search_path too
    return defined


@requires_postgres
@pytest.mark.django_db
def test_the_migrated_database_has_exactly_the_functions_of_engine_sql() -> None:
    """Each function of the file is in the migrated database with the same definition (body,
    arguments, result, language and attributes), and no other `limits_` function is there."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (migrated,) = cursor.fetchone()
    installed = _functions(migrated)
    defined = _defined_by_the_file()
    assert any(name.startswith("limits_acquire(") for name in defined)  # the file was read and run
    assert sorted(defined) == sorted(installed), (
        "the functions the migrations leave differ from limits/sql/engine.sql: "
        f"missing {sorted(set(defined) - set(installed))}, not in the file {sorted(set(installed) - set(defined))}"
    )
    for name, definition in defined.items():
        assert installed[name] == definition, f"{name} differs from limits/sql/engine.sql"


@requires_postgres
@pytest.mark.django_db
def test_every_function_that_reads_the_tables_plans_with_its_indexes() -> None:
    """Every VOLATILE PL/pgSQL function of the engine (each reads or writes the engine's tables)
    runs with `enable_seqscan = off` (migration 0016): a session that cached its plans while the
    tables were small must never keep sequential scans of the queue or slot history; and with
    `enable_bitmapscan = off` (migration 0018), and with `jit = off` (migration 0036). The helper
    expressions (IMMUTABLE or STABLE) need no setting of their own: they run inside those. The
    procedure limits_sweep may have none (a procedure with a SET clause cannot COMMIT): it reads
    the tables only through functions that do."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, p.provolatile, coalesce(p.proconfig, '{}') FROM pg_proc p "
            "JOIN pg_language l ON l.oid = p.prolang JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = current_schema() AND p.proname LIKE %s AND l.lanname = 'plpgsql' AND p.prokind = 'f'",
            ["limits\\_%"],
        )
        functions = cursor.fetchall()
    volatile = {name: config for name, kind, config in functions if kind == "v"}
    assert {"limits_acquire", "limits_acquire_group", "limits_release", "limits_confirm"} <= set(volatile)
    assert {name for name, config in volatile.items() if "enable_seqscan=off" not in config} == set()
    # Plain index scans only (migration 0018): a bitmap scan leaves the dead entries of the
    # partial live-slot and waiting indexes unmarked, and every later probe walks them again.
    assert {name for name, config in volatile.items() if "enable_bitmapscan=off" not in config} == set()
    # No JIT (migration 0036): a sequential scan priced out by enable_seqscan = off lifts the
    # estimate past jit_above_cost, and compiling took ~150 ms of each idle sweep.
    assert {name for name, config in volatile.items() if "jit=off" not in config} == set()


def test_the_newest_migration_that_installs_engine_sql_was_written_for_it() -> None:
    """The newest limits migration with ENGINE_SQL_FINGERPRINT (one that runs limits.sql.install)
    carries the fingerprint of engine.sql as it is. When this fails, engine.sql was edited (other
    than its comments) with no migration: add one that runs limits.sql.install with the new
    fingerprint, like limits/migrations/0009_engine_sql_file.py."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph  # from the files, no database
    (leaf,) = graph.leaf_nodes("limits")
    installing = []
    for app, name in graph.forwards_plan(leaf):  # in the order they apply
        module = sys.modules[graph.nodes[(app, name)].__module__]
        if app == "limits" and hasattr(module, "ENGINE_SQL_FINGERPRINT"):
            installing.append((name, module.ENGINE_SQL_FINGERPRINT))
    assert installing, "no limits migration installs limits/sql/engine.sql"
    newest, recorded = installing[-1]
    assert recorded == sql.fingerprint(), (
        f"limits/sql/engine.sql changed since {newest} installed it: add a migration that runs "
        f'limits.sql.install with ENGINE_SQL_FINGERPRINT = "{sql.fingerprint()}"'
    )


def test_the_fingerprint_ignores_comments_and_blank_lines_but_not_code() -> None:
    text = sql.engine_sql()
    assert sql.fingerprint(text) == sql.fingerprint()
    assert sql.fingerprint("-- a note\n\n" + text.replace("\n", "  \n")) == sql.fingerprint(text)
    assert sql.fingerprint(text + "SELECT 1;\n") != sql.fingerprint(text)
    assert sql.fingerprint(text.replace("\n    ", "\n  ")) != sql.fingerprint(text)


@requires_postgres
@pytest.mark.django_db
def test_the_sql_homes_of_the_shared_rules_answer_as_their_python_homes(clock) -> None:
    """limits_capacity, limits_max_hold, limits_clock and limits_new_slot_id against
    Limit.capacity, Limit.max_hold_ms, rules.clock and new_slot_id."""
    import datetime as dt
    import re

    from limits import services
    from limits.engine import rules
    from limits.models import SLOT_ID_FORMAT, Limit
    from tests.factories import declare

    declare(plain={"capacity": 3, "max_hold": "90s"}, overridden={"capacity": 5, "max_hold": "1h"})
    services.set_capacity("overridden", 2)
    services.set_max_hold("overridden", "45m")
    with connection.cursor() as cursor:
        for limit in Limit.objects.all():
            cursor.execute(
                "SELECT limits_capacity(l), extract(epoch FROM limits_max_hold(l)) * 1000 "
                "FROM limits_limit l WHERE id = %s",
                [limit.id],
            )
            capacity, max_hold_ms = cursor.fetchone()
            assert (capacity, int(max_hold_ms)) == (limit.capacity, limit.max_hold_ms)
        now = dt.datetime.now(dt.UTC)
        for last in (None, now - dt.timedelta(seconds=1), now + dt.timedelta(seconds=1)):
            limit = Limit(last_event_at=last)
            cursor.execute("SELECT limits_clock(%s, %s)", [now, last])
            assert cursor.fetchone()[0] == rules.clock(limit)
        cursor.execute("SELECT limits_new_slot_id()")
        assert re.fullmatch(SLOT_ID_FORMAT, cursor.fetchone()[0])


@requires_postgres
@pytest.mark.django_db
def test_the_sql_homes_of_pools_shares_the_box_and_the_caps_answer_as_their_python_homes(clock) -> None:
    """Each small rule engine.sql spells once (issue 48), against its Python home, on limits that
    take each branch: the capacity in force in every dialect (limits_capacity, the Python value,
    the query expression, the raw SQL the insights sample reads), limits_per_key, limits_pool_size,
    limits_share, limits_is_fair, limits_room (paused, full, free), limits_is_plain,
    limits_burst and limits_box_override (the box's kept ceiling), limits_box_ceiling and the
    caps."""
    from limits import services
    from limits.config import MAX_CAPACITY, MIN_CAPACITY, box_ceiling, define_workspace
    from limits.engine import keys
    from limits.models import CAPACITY_IN_FORCE, CAPACITY_IN_FORCE_SQL, Limit, LimitKey, pool_size

    services.sync_workspace(
        define_workspace(
            limits={
                "plain": {"capacity": 3, "max_hold": "90s"},
                "tenants": {"capacity": 5, "max_hold": "1h", "per_key": 2, "share": "fair"},
                "paused": {"capacity": 2, "max_hold": "1h"},
            },
            run_concurrency={"base": 3, "burst": 1.5},
        )
    )
    services.set_capacity("plain", 1)
    services.acquire("plain", run_id="holder")  # full: room 0
    services.set_per_key("tenants", 4, key="big")  # a key's own pool over the limit's per_key
    services.acquire("tenants", run_id="small", key="small")
    services.pause_limit("paused")
    services.set_box(burst=2.5)  # the box's ceiling kept in capacity_override while overridden
    rows = "FROM limits_limit l WHERE l.id = %s"
    with connection.cursor() as cursor:
        in_force = dict(Limit.objects.annotate(in_force=CAPACITY_IN_FORCE).values_list("id", "in_force"))
        for limit in Limit.objects.all():
            cursor.execute(
                "SELECT limits_capacity(l), limits_per_key(l), limits_share(l), limits_is_fair(l), limits_room(l), "
                f"limits_is_plain(l), limits_burst(l), {CAPACITY_IN_FORCE_SQL} {rows}",
                [limit.id],
            )
            in_sql = cursor.fetchone()
            in_python = (limit.capacity, limit.per_key, limit.share, limit.is_fair, limit.room, limit.is_plain)
            assert in_sql == (*in_python, limit.burst, in_force[limit.id]), limit.name
            assert in_force[limit.id] == limit.capacity
        box = Limit.objects.get(name="box")
        cursor.execute(f"SELECT limits_box_override(l) {rows}", [box.id])
        assert cursor.fetchone()[0] == box_ceiling(box.per_key, box.burst) == box.capacity_override == 7
        services.set_box(burst=None)  # nothing overridden: the declared ceiling rules
        cursor.execute(f"SELECT limits_box_override(l) {rows}", [box.id])
        assert cursor.fetchone()[0] is None
        tenants = Limit.objects.get(name="tenants")
        for row in LimitKey.objects.filter(limit=tenants):
            cursor.execute(f"SELECT limits_pool_size(l, %s) {rows}", [row.pool_override, tenants.id])
            assert (
                cursor.fetchone()[0]
                == pool_size(row.pool_override, tenants.per_key)
                == keys.Pools(tenants).size(row.key)
            )
        cursor.execute(f"SELECT limits_pool_size(l, NULL) {rows}", [Limit.objects.get(name="plain").id])
        assert cursor.fetchone()[0] is None  # no per_key: only the total applies
        for base, burst in ((3, 1.5), (7, 1.1), (10, 2.3), (3, 2.9999999999), (33333, 3.0000000001), (100000, 10.0)):
            cursor.execute("SELECT limits_box_ceiling(%s, %s)", [base, burst])
            assert cursor.fetchone()[0] == box_ceiling(base, burst), (base, burst)
        cursor.execute("SELECT limits_min_capacity(), limits_max_capacity()")
        assert cursor.fetchone() == (MIN_CAPACITY, MAX_CAPACITY)


@requires_postgres
@pytest.mark.django_db
def test_limits_lock_locks_what_keys_lock_locks_and_reads_the_clock_as_rules_clock_all(clock) -> None:
    """limits_lock, the one SQL home of "lock the limits with their groups' other limits, then read
    the clock", against keys.lock and rules.clock_all: the same limits (a group waiting in `a` and
    `b` makes `b` a partner of `a`; `c` stays out), one time for them all that is never before a
    limit's last change, and what limits_release asks of them."""
    import datetime as dt

    from limits import services
    from limits.engine import keys, rules
    from limits.models import Limit
    from tests.factories import declare

    limits = declare(
        a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"}, c={"capacity": 1, "max_hold": "1h"}
    )
    services.acquire("a", run_id="holder")
    assert services.acquire_group(["a", "b"], run_id="group").state == "waiting"
    a, b, c = (limits[name].id for name in "abc")
    clock.advance(seconds=-30)  # a clock behind the limits' last change
    with transaction.atomic(), connection.cursor() as cursor:
        for partners in (True, False):
            cursor.execute(
                "SELECT ids, clock, plain, waiting FROM limits_lock(%s, %s, %s)",
                [[a], dt.datetime.now(dt.UTC), partners],
            )
            ids, at, plain, waiting = cursor.fetchone()
            locked = keys.lock([a]) if partners else {a: Limit.objects.get(id=a)}
            assert set(ids) == set(locked) == ({a, b} if partners else {a})
            assert c not in ids
            assert at == rules.clock_all(locked) > dt.datetime.now(dt.UTC)
            assert (plain, waiting) == (False, True)  # a group waits in them
        cursor.execute("SELECT ids, clock FROM limits_lock(%s, %s)", [[c], None])
        ids, at = cursor.fetchone()
        assert ids == [c] and at is not None  # the database's clock when given none


@requires_postgres
@pytest.mark.django_db
def test_the_sql_homes_of_on_full_and_the_queue_caps_answer_as_their_python_homes(clock) -> None:
    """SPEC 14: limits_on_full, limits_max_waiting(_per_key), limits_queue_full and limits_refusal
    against Limit.on_full, Limit.max_waiting(_per_key), full.queue_full and full.refusal, on
    limits that take each branch (declared and overridden values, a full queue, a key's full
    share, the no-key runs' share, paused, full, a key's full pool, room)."""
    from limits import services
    from limits.config import MAX_WAITING, check_max_waiting, define_workspace
    from limits.engine import full, keys
    from limits.models import Limit

    services.sync_workspace(
        define_workspace(
            limits={
                "capped": {"capacity": 1, "max_hold": "1h", "max_waiting": 2, "on_full": "skip"},
                "per-key": {"capacity": 1, "max_hold": "1h", "per_key": 1, "max_waiting_per_key": 1},
                "paused": {"capacity": 2, "max_hold": "1h"},
                "free": {"capacity": 3, "max_hold": "1h", "per_key": 1},
            }
        )
    )
    Limit.objects.filter(name="free").update(on_full_override="skip", max_waiting_override=5)
    services.acquire("capped", run_id="holder")
    services.acquire("capped", run_id="w1", on_full="wait")
    services.acquire("capped", run_id="w2", on_full="wait")  # full at its cap of 2
    services.acquire("per-key", run_id="holder", key="acme")
    services.acquire("per-key", run_id="w1", key="acme")  # acme's share full; no-key share free
    services.acquire("free", run_id="holder", key="acme")  # acme's pool of 1 full
    services.pause_limit("paused")
    rows = "FROM limits_limit l WHERE l.id = %s"
    with connection.cursor() as cursor:
        for limit in Limit.objects.all():
            cursor.execute(
                f"SELECT limits_on_full(l), limits_max_waiting(l), limits_max_waiting_per_key(l) {rows}", [limit.id]
            )
            assert cursor.fetchone() == (limit.on_full, limit.max_waiting, limit.max_waiting_per_key), limit.name
            for key in ("", "acme", "globex"):
                cursor.execute(
                    f"SELECT limits_queue_full(l, %s), limits_refusal(l, %s, 'r:1', NULL, %s, %s) {rows}",
                    [key, key, clock.now(), keys.OWED_AFTER_MS, limit.id],
                )
                python = (full.queue_full(limit, key), full.refusal(limit, key, "r:1", None, clock.now()))
                assert cursor.fetchone() == python, (limit.name, key)
    assert check_max_waiting(MAX_WAITING) == 1_000_000


@requires_postgres
@pytest.mark.django_db
def test_limits_replaceable_answers_as_full_replaceable(clock) -> None:
    """SPEC 14.3, 14.7: limits_replaceable (limits_acquire_group's replace, before and after it
    joins) against full.replaceable, for one limit and two in either order, each key ('' the runs
    without one), a new request and one that waits (never itself): the same requests, oldest first
    in the first limit's queue. The queues hold groups of the same limits in another order, with
    another key, without one, and single entries on one of them."""
    from limits import services
    from limits.engine import full
    from limits.models import Limit, QueueEntry
    from tests.factories import declare

    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h"})
    services.acquire_group(["a", "b"], run_id="holder")
    waiting = [
        (["a", "b"], "g1", "acme"),
        (["a", "b"], "g2", None),
        (["b", "a"], "g3", "acme"),
        (["a"], "s1", "acme"),
        (["a", "b"], "g4", "globex"),
        (["b"], "s2", None),
        (["a", "b"], "g5", "acme"),
        (["a"], "s3", None),
    ]
    for names, run, key in waiting:
        assert services.acquire_group(names, run_id=run, key=key, on_full="wait").state == "waiting"
    a, b = Limit.objects.get(name="a"), Limit.objects.get(name="b")
    g1 = QueueEntry.objects.get(run_id="g1", limit=a).request
    seen = set()
    with connection.cursor() as cursor:
        for limits in ([a], [b], [a, b], [b, a]):
            for key in ("", "acme", "globex", "initech"):
                for request in ("r:new", g1):
                    members = [(limit, key) for limit in limits]
                    cursor.execute(
                        "SELECT ARRAY(SELECT r FROM limits_replaceable(%s::bigint[], %s::text[], %s) AS r)",
                        [[limit.id for limit in limits], [key] * len(limits), request],
                    )
                    entries = full.replaceable(members, request)
                    python = [entry.request for entry in entries if entry.limit_id == limits[0].id]
                    assert cursor.fetchone()[0] == python, ([limit.name for limit in limits], key, request)
                    seen.add(len(python))
    assert seen >= {0, 1, 2}  # answers with none, one and several requests were compared
