"""What the rollups and the reads of insights share: the minute and the 10-minute key span as the
rows store them, how long after its end a minute is rolled up, and the counters each row holds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from limits.models import WAIT_BUCKETS_S, Limit, LimitKeySpan, LimitMinute, LimitTotals, QueueEntry, Slot

MINUTE = timedelta(minutes=1)
ROLLUP_GRACE = timedelta(seconds=30)
SWEEP_PERIOD = timedelta(seconds=15)
KEY_SPAN = timedelta(minutes=10)

BUCKET_FIELDS = tuple(f"wait_le_{bound}" for bound in WAIT_BUCKETS_S)
COUNT_FIELDS = (
    "grants",
    "queue_grants",
    "released_by_workflow",
    "released_by_operator",
    "released_by_max_hold",
    "released_by_run_end",
    "lapses",
    "timeouts",
    "wait_ms_sum",
    *BUCKET_FIELDS,
)
KEY_FIELDS = ("grants", "queue_grants", "wait_ms_sum", *BUCKET_FIELDS)

MINUTE_TABLE = LimitMinute._meta.db_table
KEY_SPAN_TABLE = LimitKeySpan._meta.db_table
TOTALS_TABLE = LimitTotals._meta.db_table
LIMIT_TABLE = Limit._meta.db_table
SLOT_TABLE = Slot._meta.db_table
QUEUE_TABLE = QueueEntry._meta.db_table


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def floor_span(moment: datetime) -> datetime:
    """The start of the 10-minute span holding `moment` (per-key rows)."""
    minute = floor_minute(moment)
    return minute.replace(minute=minute.minute - minute.minute % 10)


def db_time(moment: datetime) -> Any:
    """A datetime as the backend stores it (SQLite compares text: naive UTC, no offset)."""
    return connection.ops.adapt_datetimefield_value(moment)


def minute_of(column: str) -> str:
    """SQL: the start of the minute holding `column`, as the backend stores a minute."""
    if connection.vendor == "postgresql":
        return f"date_trunc('minute', {column})"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:00', {column})"
