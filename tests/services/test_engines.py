"""One engine per database, chosen once (limits.engine.engines): PostgresEngine on PostgreSQL,
PythonEngine elsewhere, and neither hands a case to the other. A limit name no database can store
(a NUL, a lone surrogate) names no limit: both engines refuse it as an unknown limit, naming the
field, before anything is written (it was a database error on PostgreSQL, and a UnicodeEncodeError
on SQLite, until the Python track stopped running on PostgreSQL for it)."""

from __future__ import annotations

import pytest
from django.db import connection

from limits import services
from limits.engine.engines import engine
from limits.engine.python import PythonEngine
from limits.engine.server import PostgresEngine
from limits.models import QueueEntry, Slot
from tests.factories import declare

pytestmark = pytest.mark.django_db


def test_the_engine_is_the_databases_and_made_once() -> None:
    assert type(engine()) is (PostgresEngine if connection.vendor == "postgresql" else PythonEngine)
    assert engine() is engine()


@pytest.mark.parametrize("name", ["a\x00b", "a\ud800"])
def test_a_name_no_database_can_store_is_an_unknown_limit_and_nothing_is_written(name: str) -> None:
    declare(one={"capacity": 1, "max_hold": "1h"})
    calls = (
        lambda: services.acquire(name, run_id="r1"),
        lambda: services.acquire_group([name], run_id="r1", key="tenant"),
        lambda: services.acquire_group(["one", name], run_id="r1"),
    )
    for call in calls:
        with pytest.raises(services.LimitsError) as raised:
            call()
        assert raised.value.field == "limit" and str(raised.value) == f"unknown limit {name!r}"
    assert not Slot.objects.exists() and not QueueEntry.objects.exists()
