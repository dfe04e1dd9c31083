"""Reads for pages, the CLI and the API: querysets already ordered, figures from the counters."""

from __future__ import annotations

from django.db.models import Case, IntegerField, QuerySet, Value, When

from limits.models import LIVE_SLOT_STATES, AuditEvent, Limit, QueueEntry, Slot


def limits() -> QuerySet[Limit]:
    """Every limit, declared first, by name. Counters are on the rows: no joins, no counts."""
    return Limit.objects.order_by("-declared", "name")


def get_limit(name: str) -> Limit | None:
    return Limit.objects.filter(name=name).first()


def live_slots(limit: Limit) -> QuerySet[Slot]:
    """Busy slots, then reserved ones, each oldest grant first."""
    return (
        Slot.objects.filter(limit=limit, state__in=LIVE_SLOT_STATES)
        .alias(
            busy_first=Case(When(state=Slot.State.BUSY, then=Value(0)), default=Value(1), output_field=IntegerField())
        )
        .order_by("busy_first", "granted_at", "id")
    )


def waiting_entries(limit: Limit) -> QuerySet[QueueEntry]:
    """The queue in order. A page's positions are its offset + 1, + 2, ..."""
    return QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING).order_by("position")


def activity(limit: Limit) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(limit=limit).order_by("-at", "-id")


def limit_summary(limit: Limit) -> dict[str, object]:
    """A limit as the CLI and the API print it. `busy` counts busy and reserved slots together;
    `reserved` is the unconfirmed part of it."""
    return {
        "name": limit.name,
        "capacity": limit.capacity,
        "declared_capacity": limit.declared_capacity,
        "max_hold_ms": limit.max_hold_ms,
        "declared_max_hold_ms": limit.declared_max_hold_ms,
        "busy": limit.in_use,
        "reserved": limit.reserved_count,
        "waiting": limit.waiting_count,
        "capacity_overridden": limit.capacity_overridden,
        "max_hold_overridden": limit.max_hold_overridden,
        "declared": limit.declared,
    }
