"""The engine's lock on limit rows has one home in Python: `Limit.objects.locked()`.

Must never happen: an engine path that locks a limit row in another mode than the one the
engine's other paths and its PL/pgSQL functions take (a `FOR UPDATE` beside the others' `FOR NO
KEY UPDATE` blocks a commit's foreign-key checks and deadlocked the sweep; docs/engine.md). So
no module writes the lock itself, and the one home sends `FOR NO KEY UPDATE`
(tests/concurrency/test_lock_modes.py checks every path against a second connection)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from limits.models import Limit
from tests.factories import declare

ROOT = Path(__file__).resolve().parents[2]
LIMIT_LOCK = re.compile(r"Limit\.objects\b[^\n]*?\.select_for_update\(")


def test_no_module_but_the_models_writes_the_limit_row_lock() -> None:
    written = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("limits", "studio")
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if LIMIT_LOCK.search(line)
    ]
    assert written == [], f"lock limits with Limit.objects.locked(), not by hand: {written}"


@pytest.mark.django_db(transaction=True)
def test_the_one_home_locks_for_no_key_update() -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        locked = list(Limit.objects.locked().filter(name="voice-calls"))
    assert [limit.name for limit in locked] == ["voice-calls"]
    select = next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT"))
    if connection.vendor == "postgresql":
        assert select.endswith("FOR NO KEY UPDATE"), select
    else:
        assert "FOR " not in select  # SQLite locks the whole database per write transaction instead
