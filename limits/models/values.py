"""The values the limits' rows are made of: text every backend stores, slot ids, the capacity and
pool size in force (one home per dialect; engine.sql holds the PostgreSQL one)."""

from __future__ import annotations

import secrets
from typing import TypeGuard

from django.db.models.functions import Coalesce

LABEL_MAX_LENGTH = 200
RUN_ID_MAX_LENGTH = 64
REQUEST_MAX_LENGTH = 128


def is_storable_text(value: object) -> TypeGuard[str]:
    """A string every database backend can store and compare: PostgreSQL refuses NUL characters,
    and no backend can encode a lone surrogate (what a non-UTF-8 command-line argument becomes)."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


SLOT_ID_FORMAT = r"^slot_[0-9a-f]{32}$"


def new_slot_id() -> str:
    """Slot ids travel to outside providers and come back in webhooks: opaque and unguessable,
    'slot_' and 128 random bits as 32 hex digits. The engine's SQL mints the same format where
    it inserts slots set-based (grant.SQLITE_NEW_SLOT_ID, engine.sql's gen_random_uuid();
    tests/services/test_slot_ids.py holds them to SLOT_ID_FORMAT)."""
    return "slot_" + secrets.token_hex(16)


# The capacity in force (SPEC 5.2): an operator's override wins over the declared value until it
# is reset. One home in each dialect, held to one another and to engine.sql's limits_capacity by
# tests/services/test_sql_file.py: `capacity_in_force` for values (Limit.capacity, /metrics),
# CAPACITY_IN_FORCE in a query (the sweep's work, the workers' panel), CAPACITY_IN_FORCE_SQL in
# raw SQL (the insights sample, on both databases).
def capacity_in_force(override: int | None, declared: int) -> int:
    return declared if override is None else override


CAPACITY_IN_FORCE = Coalesce("capacity_override", "declared_capacity")
CAPACITY_IN_FORCE_SQL = "coalesce(capacity_override, declared_capacity)"


def pool_size(pool_override: int | None, per_key: int | None) -> int | None:
    """A key's pool size in force (SPEC 9.1, 9.4): its own (LimitKey.pool_override), else its
    limit's per_key; None when only the total applies. engine.sql: limits_pool_size."""
    return per_key if pool_override is None else pool_override
