"""Operator actions and deploys: override or reset a limit's capacity and max hold (SPEC 5.2-5.5),
and bring the declared values in line with the workspace config (1.4, 1.5). Each is one durable
transaction that writes its audit row beside the change."""

from __future__ import annotations

from django.db import transaction

from limits.config import Workspace, check_capacity
from limits.engine import rules
from limits.engine.errors import BAD_CAPACITY, BAD_MAX_HOLD, LimitsError, duration_ms
from limits.engine.results import SyncReport
from limits.engine.rules import DEPLOY_ACTOR, Changes
from limits.models import AuditEvent, Limit


def set_capacity(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Override a limit's capacity (1..100000), or reset it to the declared value with None.
    Raising it grants waiting runs at once; lowering it takes no slot back. `value` is checked
    here (it may come straight from a request)."""
    capacity = None
    if value is not None:
        try:
            capacity = check_capacity(value)
        except ValueError as error:
            raise LimitsError(BAD_CAPACITY.format(error=error), field="capacity") from None
    with transaction.atomic(durable=True):
        limit, changes = rules.locked_limit(name), Changes()
        now = rules.clock(limit)
        old = limit.capacity
        limit.capacity_override = capacity
        limit.save(update_fields=["capacity_override", "updated_at"])
        rules.settle(limit, now, changes)
        rules.save_counters(limit)
        new = f"{limit.capacity} (declared)" if capacity is None else str(limit.capacity)
        rules.audit(limit, actor, AuditEvent.Action.CAPACITY, now, old=str(old), new=new, capacity_after=limit.capacity)
        rules.wake_on_commit(changes.woken)
        return limit


def set_max_hold(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Override a limit's max hold (same values as the config's max_hold), or reset it with None.
    Only slots granted afterwards get the new value: a slot's expiry is fixed at grant. `value`
    is checked here (it may come straight from a request)."""
    ms = None if value is None else duration_ms(value, BAD_MAX_HOLD, "max_hold")
    with transaction.atomic(durable=True):
        limit = rules.locked_limit(name)
        now = rules.clock(limit)
        old = limit.max_hold_ms
        limit.max_hold_override_ms = ms
        limit.save(update_fields=["max_hold_override_ms", "last_event_at", "updated_at"])
        new = f"{limit.max_hold_ms} (declared)" if ms is None else str(limit.max_hold_ms)
        rules.audit(limit, actor, AuditEvent.Action.MAX_HOLD, now, old=str(old), new=new)
        return limit


def sync_workspace(workspace: Workspace, *, actor: str = DEPLOY_ACTOR) -> SyncReport:
    """Bring the declared values of every limit in line with the workspace config.

    Operator overrides survive (a deploy does not clear them). Limits that left the config are
    kept and marked undeclared; a limit that comes back is declared again. A declared capacity
    that rose grants waiting runs at once.
    """
    report = SyncReport()
    with transaction.atomic(durable=True):
        existing = {limit.name: limit for limit in Limit.objects.select_for_update().order_by("id")}
        for name, spec in sorted(workspace.limits.items()):
            limit = existing.get(name)
            if limit is None:
                Limit.objects.create(name=name, declared_capacity=spec.capacity, declared_max_hold_ms=spec.max_hold_ms)
                report.created.append(name)
                continue
            before = (limit.declared, limit.declared_capacity, limit.declared_max_hold_ms)
            after = (True, spec.capacity, spec.max_hold_ms)
            if before == after:
                continue
            limit.declared, limit.declared_capacity, limit.declared_max_hold_ms = after
            limit.save(update_fields=["declared", "declared_capacity", "declared_max_hold_ms", "updated_at"])
            now, changes = rules.clock(limit), Changes()
            rules.settle(limit, now, changes)
            rules.save_counters(limit)
            rules.wake_on_commit(changes.woken)
            rules.audit(
                limit,
                actor,
                AuditEvent.Action.SYNC,
                now,
                old=_declared_text(*before),
                new=_declared_text(*after),
                capacity_after=limit.capacity,
            )
            report.updated.append(name)
        for name, limit in existing.items():
            if name not in workspace.limits and limit.declared:
                limit.declared = False
                now = rules.clock(limit)
                limit.save(update_fields=["declared", "last_event_at", "updated_at"])
                rules.audit(
                    limit,
                    actor,
                    AuditEvent.Action.SYNC,
                    now,
                    old="declared",
                    new="undeclared",
                    capacity_after=limit.capacity,
                )
                report.undeclared.append(name)
    return report


def _declared_text(declared: bool, capacity: int, max_hold_ms: int) -> str:
    return f"capacity {capacity}, max hold {max_hold_ms} ms" + ("" if declared else ", undeclared")
