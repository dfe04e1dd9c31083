"""The database refuses a limit or key row out of its bounds, each bound written once.

Must never happen: a counter below zero or a capacity, per-key or pool size out of its range
stored in a row, whatever wrote it (the ORM, raw SQL, a PL/pgSQL function). The counters and sizes
are plain IntegerFields since migration 0017 (a PositiveIntegerField adds a second `>= 0` CHECK
per field, and PostgreSQL evaluates them all at each hot-path UPDATE), so each bound below is held
by exactly one Meta constraint: a CHECK, or on PostgreSQL for the configuration's ranges a trigger
generated from it (migration 0019, limits/sql/bounds.py); this test fails if one of them is lost."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import CheckConstraint

from limits.config import MAX_CAPACITY, MIN_CAPACITY
from limits.durations import MAX_DURATION_MS
from limits.models import Limit, LimitKey
from limits.sql import bounds
from tests.factories import declare

LIMIT_COUNTERS = (
    "busy_count",
    "reserved_count",
    "waiting_count",
    "keyed_busy_count",
    "keyed_reserved_count",
    "keyed_waiting_count",
    "group_waiting_count",
)
LIMIT_OUT_OF_RANGE = [
    *((counter, -1) for counter in LIMIT_COUNTERS),
    ("declared_capacity", MIN_CAPACITY - 1),
    ("declared_capacity", MAX_CAPACITY + 1),
    ("capacity_override", MIN_CAPACITY - 1),
    ("capacity_override", MAX_CAPACITY + 1),
    ("declared_per_key", MIN_CAPACITY - 1),
    ("per_key_override", MIN_CAPACITY - 1),
    ("declared_max_hold_ms", 0),
    ("declared_max_hold_ms", MAX_DURATION_MS + 1),
    ("max_hold_override_ms", 0),
    ("max_hold_override_ms", MAX_DURATION_MS + 1),
]
LIMIT_AT_THE_EDGE = [
    ("declared_capacity", MIN_CAPACITY),
    ("declared_capacity", MAX_CAPACITY),
    ("capacity_override", None),
    ("capacity_override", MIN_CAPACITY),
    ("capacity_override", MAX_CAPACITY),
    ("declared_per_key", None),
    ("declared_per_key", MIN_CAPACITY),
    ("per_key_override", MIN_CAPACITY),
    ("declared_max_hold_ms", 1),
    ("declared_max_hold_ms", MAX_DURATION_MS),
    ("max_hold_override_ms", None),
    ("max_hold_override_ms", MAX_DURATION_MS),
]
KEY_OUT_OF_RANGE = [("busy_count", -1), ("reserved_count", -1), ("waiting_count", -1), ("pool_override", 0)]
CONFIG_COLUMNS = [
    "declared_capacity",
    "declared_max_hold_ms",
    "capacity_override",
    "max_hold_override_ms",
    "declared_per_key",
    "per_key_override",
]


def _refused(table: str, column: str, value: int | None, pk: int) -> bool:
    """Whether a raw UPDATE setting one column is refused by the database (and changes nothing)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f'UPDATE "{table}" SET "{column}" = %s WHERE id = %s', [value, pk])
    except IntegrityError:
        return True
    return False


@pytest.mark.django_db
@pytest.mark.parametrize(("column", "value"), LIMIT_OUT_OF_RANGE)
def test_a_limit_row_out_of_bounds_is_refused(column: str, value: int) -> None:
    limit = declare(voice_calls={"capacity": 2, "max_hold": "1h", "per_key": 1})["voice-calls"]
    assert _refused(Limit._meta.db_table, column, value, limit.pk), f"{column} = {value} was stored"
    limit.refresh_from_db()
    assert (limit.busy_count, limit.declared_capacity, limit.declared_per_key) == (0, 2, 1)


@pytest.mark.django_db
@pytest.mark.parametrize(("column", "value"), LIMIT_AT_THE_EDGE)
def test_a_limit_row_at_the_edge_of_its_bounds_is_stored(column: str, value: int | None) -> None:
    """The bounds refuse no more than they say: each value at the edge of its range is stored."""
    limit = declare(voice_calls={"capacity": 2, "max_hold": "1h", "per_key": 1})["voice-calls"]
    assert not _refused(Limit._meta.db_table, column, value, limit.pk), f"{column} = {value} was refused"
    assert Limit.objects.values_list(column, flat=True).get(pk=limit.pk) == value


@pytest.mark.django_db
@pytest.mark.parametrize(("column", "value"), KEY_OUT_OF_RANGE)
def test_a_key_row_out_of_bounds_is_refused(column: str, value: int) -> None:
    limit = declare(voice_calls={"capacity": 2, "max_hold": "1h", "per_key": 1})["voice-calls"]
    key = LimitKey.objects.create(limit=limit, key="tenant-a")
    assert _refused(LimitKey._meta.db_table, column, value, key.pk), f"{column} = {value} was stored"


@pytest.mark.django_db
def test_a_new_limit_out_of_range_is_refused() -> None:
    """An INSERT is held to the same bounds as an UPDATE (on PostgreSQL the trigger fires on both)."""
    with pytest.raises(IntegrityError, match="limit_declared_capacity_range"), transaction.atomic():
        Limit.objects.create(name="too-small", declared_capacity=0, declared_max_hold_ms=1000)
    assert not Limit.objects.filter(name="too-small").exists()


@pytest.mark.django_db
def test_each_bound_has_one_home_and_the_database_holds_it_once() -> None:
    """No field adds a CHECK of its own beside the Meta constraints (the PositiveIntegerField
    kind): PostgreSQL runs every CHECK of the row at each UPDATE of a counter. On PostgreSQL the
    configuration's ranges are a trigger instead (limits/sql/bounds.py), and the installed one is
    exactly what the current Meta constraints generate: edit one of them and this fails until a
    migration runs bounds.install again."""
    meta_checks = sorted(c.name for c in Limit._meta.constraints if isinstance(c, CheckConstraint))
    with connection.cursor() as cursor:
        installed = connection.introspection.get_constraints(cursor, Limit._meta.db_table)
    checks = sorted(name for name, info in installed.items() if info["check"])
    if connection.vendor != "postgresql":
        assert checks == meta_checks
        return
    assert checks == sorted(set(meta_checks) - set(bounds.CONFIG_BOUNDS)) == ["limit_counters_not_negative"]
    with connection.schema_editor(atomic=False, collect_sql=True) as editor:
        expected = bounds.body(Limit, editor)
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", [bounds.FUNCTION])
        (body,) = cursor.fetchone()
        cursor.execute(
            "SELECT array_agg(a.attname ORDER BY k.n) FROM pg_trigger t "
            "CROSS JOIN LATERAL unnest(t.tgattr::int2[]) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = k.attnum "
            "WHERE t.tgname = %s AND t.tgrelid = %s::regclass",
            [bounds.FUNCTION, Limit._meta.db_table],
        )
        (watched,) = cursor.fetchone()
    assert body == expected, "the installed trigger differs from Limit.Meta: add a migration that runs bounds.install"
    # The configuration's columns and no other: the hot path's UPDATEs never name one.
    assert sorted(watched) == sorted(bounds.columns(Limit)) == sorted(CONFIG_COLUMNS)


@pytest.mark.django_db
def test_the_key_row_carries_only_its_meta_checks() -> None:
    with connection.cursor() as cursor:
        installed = connection.introspection.get_constraints(cursor, LimitKey._meta.db_table)
    checks = sorted(name for name, info in installed.items() if info["check"])
    assert checks == sorted(c.name for c in LimitKey._meta.constraints if isinstance(c, CheckConstraint))


def test_the_trigger_watches_columns_read_through_f_expressions() -> None:
    """A bound comparing two columns (an F()) makes the trigger watch both."""
    from django.db.models import F, Q

    class Model:  # the shape bounds.columns reads
        class _meta:  # noqa: N801 - the Django attribute name
            constraints = [CheckConstraint(condition=Q(capacity_override__lte=F("declared_capacity")), name="x")]
            concrete_fields = Limit._meta.concrete_fields

    assert bounds.columns(Model, ["x"]) == ["declared_capacity", "capacity_override"]
