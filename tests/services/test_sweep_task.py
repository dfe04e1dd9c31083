"""The sweep task as beat sends it (limits/tasks.py): a message taken within 5 s of the last
pass, by the box's clock (the database's), does nothing, so a backlog of beat's messages after an outage
costs one read each; no worker's clock decides (beat's messages carry no `expires` any more)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from limits import services, tasks
from limits.models import SweepState
from stackbone.plumbing import clock
from tests.conftest import requires_postgres
from tests.factories import declare

pytestmark = pytest.mark.django_db(transaction=True)  # the sweep's transactions are durable


def last_pass_at(offset: timedelta) -> object:
    """Record a pass at the box's time + offset; return it as stored."""
    SweepState.objects.update_or_create(id=1, defaults={"last_run_at": timezone.now()})
    SweepState.objects.filter(id=1).update(last_run_at=clock.expression(offset))
    return SweepState.objects.get(id=1).last_run_at


def swept_again(before: object) -> bool:
    tasks.sweep()
    return SweepState.objects.get(id=1).last_run_at != before


def test_a_sweep_message_taken_within_5_s_of_the_last_pass_does_nothing() -> None:
    assert not swept_again(last_pass_at(-timedelta(seconds=1)))


def test_a_sweep_message_taken_later_sweeps() -> None:
    assert swept_again(last_pass_at(-tasks.RECENT_PASS - timedelta(seconds=1)))
    assert swept_again(last_pass_at(-timedelta(hours=1)))


def test_a_last_pass_stamped_ahead_of_the_database_is_not_trusted() -> None:
    """Written by a host whose clock is ahead: the sweep runs, as with no pass recorded."""
    assert swept_again(last_pass_at(timedelta(minutes=5)))


def test_with_no_pass_recorded_the_sweep_runs() -> None:
    tasks.sweep()
    assert SweepState.objects.filter(id=1).exists()


def test_beat_sends_its_messages_with_no_expiry_and_to_the_maintenance_queue() -> None:
    """`expires` is judged by the worker's own clock: one minutes ahead dropped every message."""
    from studio.celery import app

    schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    for entry in schedule.values():
        assert "expires" not in entry.get("options", {})
        route = app.amqp.router.route({}, entry["task"])
        assert route["queue"].name == settings.STACKBONE_MAINTENANCE_QUEUE
    assert app.amqp.router.route({}, "studio.tasks.advance_run")["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE
    consumed = list(app.amqp.queues.consume_from)
    assert consumed == [settings.STACKBONE_MAINTENANCE_QUEUE, settings.CELERY_TASK_DEFAULT_QUEUE]


def last_analyzed(table: str) -> Any:
    """When `table` was last analyzed, by the statistics (this backend's flushed first)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT pg_stat_get_last_analyze_time(%s::regclass)", [table])
        return cursor.fetchone()[0]


@requires_postgres
def test_the_hourly_analyze_refreshes_the_partitioned_tables_statistics() -> None:
    """Autovacuum never analyzes a partitioned table itself (migration 0034): limits.tasks.analyze,
    on beat's hourly schedule, does."""
    from limits.beat import ANALYZE, BEAT_SCHEDULE

    assert {"task": ANALYZE, "schedule": 3600.0} in BEAT_SCHEDULE.values()
    declare(one={"capacity": 1, "max_hold": "1h"})
    services.release(services.acquire("one", run_id="r1").slot_id)
    services.acquire("one", run_id="r2")
    before = {table: last_analyzed(table) for table in ("limits_slot", "limits_queueentry")}
    tasks.analyze()
    for table, when in before.items():
        after = last_analyzed(table)
        assert after is not None and (when is None or after > when), (table, when, after)
