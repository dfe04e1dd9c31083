"""Test data through the services, so counters and rows always agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import F

from limits import services
from limits.config import define_workspace
from limits.models import Limit, QueueEntry, Slot


def declare(**limits: dict[str, object]) -> dict[str, Limit]:
    """Sync a workspace with these limits (name=dict(capacity=..., max_hold=...)), names with '_'
    written as '-'."""
    config = {name.replace("_", "-"): fields for name, fields in limits.items()}
    services.sync_workspace(define_workspace(limits=config))
    return {name: Limit.objects.get(name=name) for name in config}


def limit_named(name: str) -> Limit:
    return Limit.objects.get(name=name)


def holders(name: str) -> list[tuple[str, str]]:
    """(run_id, state) of the live slots of a limit, oldest grant first."""
    return list(
        Slot.objects.filter(limit__name=name, state__in=["busy", "reserved"])
        .order_by("granted_at", F("queue_entry__position").asc(nulls_first=True), "run_id")
        .values_list("run_id", "state")
    )


def queue(name: str) -> list[str]:
    """Run ids waiting on a limit, in queue order."""
    return list(
        QueueEntry.objects.filter(limit__name=name, state="waiting")
        .order_by("position")
        .values_list("run_id", flat=True)
    )


def assert_counters_match_rows(name: str) -> None:
    limit = Limit.objects.get(name=name)
    busy = Slot.objects.filter(limit=limit, state="busy").count()
    reserved = Slot.objects.filter(limit=limit, state="reserved").count()
    waiting = QueueEntry.objects.filter(limit=limit, state="waiting").count()
    assert (limit.busy_count, limit.reserved_count, limit.waiting_count) == (busy, reserved, waiting)
    keyed = (
        Slot.objects.filter(limit=limit, state="busy").exclude(key="").count(),
        Slot.objects.filter(limit=limit, state="reserved").exclude(key="").count(),
        QueueEntry.objects.filter(limit=limit, state="waiting").exclude(key="").count(),
        QueueEntry.objects.filter(limit=limit, state="waiting", group_size__gt=1).count(),
    )
    assert (
        limit.keyed_busy_count,
        limit.keyed_reserved_count,
        limit.keyed_waiting_count,
        limit.group_waiting_count,
    ) == keyed
    for pool in limit.keys.all():
        rows = (
            Slot.objects.filter(limit=limit, key=pool.key, state="busy").count(),
            Slot.objects.filter(limit=limit, key=pool.key, state="reserved").count(),
            QueueEntry.objects.filter(limit=limit, key=pool.key, state="waiting").count(),
        )
        assert (pool.busy_count, pool.reserved_count, pool.waiting_count) == rows, pool.key


def rolled_up_grants(clock: Any, make_grants: Callable[[], object]) -> None:
    """Let the sweep's per-minute rollup (limits.insights) count what `make_grants` does, as in
    production: a sweep starts the rollup, `make_grants` runs 10 s into that minute, and a sweep
    1 min 50 s after the start rolls the minute up. The clock must start on a whole minute; the
    grant rate then reads (grants made by `make_grants`) / 600 s per limit (insights.grant_rates
    counts the last 10 rolled-up minutes)."""
    services.sweep()
    clock.advance(seconds=10)
    make_grants()
    clock.advance(seconds=100)
    services.sweep()
