"""The Python engine's operator actions and deploys (limits.engine.python.PythonEngine inherits
them): each one durable transaction that locks the limit with the other limits of its groups,
changes it, grants what the change freed and writes its audit row beside the change
(`_settle_and_audit`). The checks that need no lock ran before (limits.engine.operator_actions);
the ones against the capacity in force run here, under the lock (limits.engine.refusals)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from limits.config import BOX_NAME, MAX_CAPACITY, RunConcurrency, Workspace, burst_text, check_ceiling
from limits.durations import MAX_DURATION_MS
from limits.engine import keys, rules
from limits.engine.errors import LimitsError
from limits.engine.refusals import (
    BOUND_NAME_TAKEN,
    BOX_LIMIT_TAKEN,
    BOX_NAME_TAKEN,
    NO_BOX,
    NO_MAX_HOLD,
    checked_minimum,
    checked_per_key,
)
from limits.engine.results import BoundValues, SyncReport
from limits.engine.rules import Changes
from limits.models import AuditEvent, Limit


class OperatorActions:
    """The operator actions and deploys of limits.engine.engines.Engine, in Python."""

    def set_capacity(self, name: str, capacity: int | None, actor: str | None) -> Limit:
        with transaction.atomic(durable=True):
            limit, locked = rules.locked_by_name(name)
            now = rules.clock_all(locked)
            old = limit.capacity
            limit.capacity_override = capacity
            limit.save(update_fields=["capacity_override", "updated_at"])
            new = f"{limit.capacity} (declared)" if capacity is None else str(limit.capacity)
            _settle_and_audit(
                locked, now, limit, actor, AuditEvent.Action.CAPACITY, old=str(old), new=new,
                capacity_after=limit.capacity,
            )  # fmt: skip
            return limit

    def set_paused(self, name: str, paused: bool, actor: str | None) -> Limit:
        with transaction.atomic(durable=True):
            limit, locked = rules.locked_by_name(name)
            if limit.paused == paused:
                return limit
            now = rules.clock_all(locked)
            limit.paused_at = now if paused else None
            limit.save(update_fields=["paused_at", "updated_at"])
            old, new = ("running", "paused") if paused else ("paused", "running")
            action = AuditEvent.Action.PAUSE if paused else AuditEvent.Action.RESUME
            # a pause grants nothing; a resume, the free capacity
            _settle_and_audit(locked, now, limit, actor, action, old=old, new=new, capacity_after=limit.capacity)
            return limit

    def set_max_hold(self, name: str, ms: int | None, actor: str | None) -> Limit:
        with transaction.atomic(durable=True):
            limit = rules.locked_limit(name)
            if limit.is_workflow_bound:
                raise LimitsError(NO_MAX_HOLD.format(name=name), field="max_hold")
            now = rules.clock(limit)
            old = limit.max_hold_ms
            limit.max_hold_override_ms = ms
            limit.save(update_fields=["max_hold_override_ms", "last_event_at", "updated_at"])
            new = f"{limit.max_hold_ms} (declared)" if ms is None else str(limit.max_hold_ms)
            rules.audit(limit, actor, AuditEvent.Action.MAX_HOLD, now, old=str(old), new=new)
            return limit

    def set_per_key(self, name: str, value: object, key: str | None, actor: str | None) -> Limit:
        with transaction.atomic(durable=True):
            limit, locked = rules.locked_by_name(name)
            size = None if value is None else checked_per_key(value, limit.capacity)
            now = rules.clock_all(locked)
            if key is None:
                old = "none" if limit.per_key is None else str(limit.per_key)
                limit.per_key_override = size
                limit.save(update_fields=["per_key_override", "updated_at"])
                declared = "none" if limit.declared_per_key is None else str(limit.declared_per_key)
                new = f"{declared} (declared)" if size is None else str(size)
            else:
                pools = keys.pools(limit)
                row = pools.row(key, create=True)
                assert row is not None
                old = _pool_text(pools.size(key))
                row.pool_override = size
                row.save(update_fields=["pool_override"])
                new = _pool_text(pools.size(key)) + (" (per_key)" if size is None else "")
            _settle_and_audit(locked, now, limit, actor, AuditEvent.Action.PER_KEY, old=old, new=new, key=key or "")
            return limit

    def set_share(self, name: str, share: str | None, actor: str | None) -> Limit:
        with transaction.atomic(durable=True):
            limit, locked = rules.locked_by_name(name)
            now = rules.clock_all(locked)
            old = limit.share
            limit.share_override = share or ""
            if limit.share != old:
                keys.restart_turns(limit)
            limit.save(update_fields=["share_override", "nokey_fair_pass", "updated_at"])
            new = f"{limit.share} (declared)" if share is None else limit.share
            _settle_and_audit(locked, now, limit, actor, AuditEvent.Action.SHARE, old=old, new=new)
            return limit

    def set_on_full(self, name: str, on_full: str | None, actor: str | None) -> Limit:
        with transaction.atomic(durable=True):
            limit, locked = rules.locked_by_name(name)
            now = rules.clock_all(locked)
            old = limit.on_full
            limit.on_full_override = on_full or ""
            limit.save(update_fields=["on_full_override", "updated_at"])
            new = f"{limit.on_full} (declared)" if on_full is None else limit.on_full
            _settle_and_audit(locked, now, limit, actor, AuditEvent.Action.ON_FULL, old=old, new=new)
            return limit

    def set_max_waiting(self, name: str, value: int | None, per_key: bool, actor: str | None) -> Limit:
        field, action = (
            ("max_waiting_per_key", AuditEvent.Action.MAX_WAITING_KEY)
            if per_key
            else ("max_waiting", AuditEvent.Action.MAX_WAITING)
        )
        with transaction.atomic(durable=True):
            limit, locked = rules.locked_by_name(name)
            now = rules.clock_all(locked)
            old = getattr(limit, field)
            setattr(limit, f"{field}_override", value)
            limit.save(update_fields=[f"{field}_override", "updated_at"])
            new = "none" if getattr(limit, field) is None else str(getattr(limit, field))
            new += " (declared)" if value is None else ""
            _settle_and_audit(locked, now, limit, actor, action, old="none" if old is None else str(old), new=new)
            return limit

    def set_weight(self, name: str, key: str, weight: int | None, actor: str | None) -> Limit:
        value = 1 if weight is None else weight  # None: reset to 1
        return _set_key_field(name, key, "weight", value, AuditEvent.Action.WEIGHT, actor, weight is None)

    def set_min(self, name: str, key: str, minimum: object, actor: str | None) -> Limit:
        return _set_key_field(name, key, "minimum", minimum, AuditEvent.Action.MINIMUM, actor, minimum is None)

    def set_box(
        self,
        base: int | None,
        base_given: bool,
        burst: float | None,
        burst_given: bool,
        actor: str | None,
        field: str,
    ) -> Limit:
        with transaction.atomic(durable=True):
            box = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).first()
            if box is None:
                raise LimitsError(NO_BOX, field=field)
            limit, locked = rules.locked_by_name(BOX_NAME)
            old = _box_text(limit)
            if base_given:
                limit.per_key_override = base
            if burst_given:
                limit.burst_override = burst
            try:
                _keep_box_capacity(limit)
            except ValueError as error:
                raise LimitsError(str(error), field=field) from None
            now = rules.clock_all(locked)
            limit.save(update_fields=["per_key_override", "burst_override", "capacity_override", "updated_at"])
            _settle_and_audit(
                locked, now, limit, actor, AuditEvent.Action.BOX, old=old, new=_box_text(limit),
                capacity_after=limit.capacity,
            )  # fmt: skip
            return limit

    def sync_workspace(self, workspace: Workspace, actor: str) -> SyncReport:
        report = SyncReport()
        with transaction.atomic(durable=True):
            existing = {limit.name: limit for limit in Limit.objects.locked().order_by("id")}
            existing_by_id = {limit.id: limit for limit in existing.values()}
            for name, spec in sorted(workspace.limits.items()):
                limit = existing.get(name)
                if limit is not None and limit.is_workflow_bound:
                    raise LimitsError(BOUND_NAME_TAKEN.format(name=name), field="name")
                if limit is not None and limit.is_box:
                    raise LimitsError(BOX_LIMIT_TAKEN, field="name")
                if limit is None:
                    Limit.objects.create(
                        name=name,
                        declared_capacity=spec.capacity,
                        declared_max_hold_ms=spec.max_hold_ms,
                        declared_per_key=spec.per_key,
                        declared_share=spec.share,
                        declared_on_full=spec.on_full,
                        declared_max_waiting=spec.max_waiting,
                        declared_max_waiting_per_key=spec.max_waiting_per_key,
                    )
                    report.created.append(name)
                    continue
                before = (
                    limit.declared,
                    limit.declared_capacity,
                    limit.declared_max_hold_ms,
                    limit.declared_per_key,
                    limit.declared_share,
                    limit.declared_on_full,
                    limit.declared_max_waiting,
                    limit.declared_max_waiting_per_key,
                )
                after = (
                    True, spec.capacity, spec.max_hold_ms, spec.per_key, spec.share, spec.on_full, spec.max_waiting,
                    spec.max_waiting_per_key,
                )  # fmt: skip
                if before == after:
                    continue
                if not limit.share_override and limit.declared_share != spec.share:
                    keys.restart_turns(limit)  # the share in force switches
                (
                    limit.declared,
                    limit.declared_capacity,
                    limit.declared_max_hold_ms,
                    limit.declared_per_key,
                    limit.declared_share,
                    limit.declared_on_full,
                    limit.declared_max_waiting,
                    limit.declared_max_waiting_per_key,
                ) = after
                limit.save(
                    update_fields=[
                        "declared",
                        "declared_capacity",
                        "declared_max_hold_ms",
                        "declared_per_key",
                        "declared_share",
                        "declared_on_full",
                        "declared_max_waiting",
                        "declared_max_waiting_per_key",
                        "nokey_fair_pass",
                        "updated_at",
                    ]
                )
                touched = _with_partners(limit, existing_by_id)
                _settle_and_audit(
                    touched, rules.clock_all(touched), limit, actor, AuditEvent.Action.SYNC,
                    old=_declared_text(*before), new=_declared_text(*after), capacity_after=limit.capacity,
                )  # fmt: skip
                report.updated.append(name)
            _sync_box(workspace.run_concurrency, existing, existing_by_id, actor, report)
            for name, limit in existing.items():
                if limit.is_workflow_bound or limit.is_box:
                    continue  # a workflow's own bound: sync_workflow_bounds keeps it; the box: _sync_box
                if name not in workspace.limits and limit.declared:
                    _undeclare(limit, actor)
                    report.undeclared.append(name)
        return report

    def sync_workflow_bounds(self, bounds: dict[str, BoundValues], actor: str, only: bool) -> SyncReport:
        report = SyncReport()
        with transaction.atomic(durable=not only):
            rows = Limit.objects.locked().filter(name__in=list(bounds)) if only else Limit.objects.locked()
            existing = {limit.name: limit for limit in rows.order_by("id")}
            by_id = {limit.id: limit for limit in existing.values()}
            for name, (total, per_key, on_full, max_waiting, max_waiting_per_key) in sorted(bounds.items()):
                capacity = MAX_CAPACITY if total is None else total
                limit = existing.get(name)
                if limit is None:
                    Limit.objects.bulk_create(
                        [
                            Limit(
                                name=name,
                                kind=Limit.Kind.WORKFLOW,
                                declared_capacity=capacity,
                                declared_max_hold_ms=MAX_DURATION_MS,
                                declared_per_key=per_key,
                                declared_on_full=on_full,
                                declared_max_waiting=max_waiting,
                                declared_max_waiting_per_key=max_waiting_per_key,
                            )
                        ],
                        ignore_conflicts=True,  # two first starts at once: one creates it, both use it
                    )
                    report.created.append(name)
                    continue
                if not limit.is_workflow_bound:
                    raise LimitsError(BOUND_NAME_TAKEN.format(name=name), field="name")
                before = (
                    limit.declared,
                    limit.declared_capacity,
                    limit.declared_per_key,
                    limit.declared_on_full,
                    limit.declared_max_waiting,
                    limit.declared_max_waiting_per_key,
                )
                after = (True, capacity, per_key, on_full, max_waiting, max_waiting_per_key)
                if before == after:
                    continue
                (
                    limit.declared,
                    limit.declared_capacity,
                    limit.declared_per_key,
                    limit.declared_on_full,
                    limit.declared_max_waiting,
                    limit.declared_max_waiting_per_key,
                ) = after
                limit.save(
                    update_fields=[
                        "declared",
                        "declared_capacity",
                        "declared_per_key",
                        "declared_on_full",
                        "declared_max_waiting",
                        "declared_max_waiting_per_key",
                        "updated_at",
                    ]
                )
                touched = _with_partners(limit, by_id)
                _settle_and_audit(
                    touched, rules.clock_all(touched), limit, actor, AuditEvent.Action.SYNC,
                    old=_bound_text(*before), new=_bound_text(*after), capacity_after=limit.capacity,
                )  # fmt: skip
                report.updated.append(name)
            for name, limit in existing.items():
                if not only and limit.is_workflow_bound and name not in bounds and limit.declared:
                    _undeclare(limit, actor)
                    report.undeclared.append(name)
        return report


def _settle_and_audit(
    locked: dict[int, Limit],
    now: datetime,
    limit: Limit,
    actor: str | None,
    action: str,
    *,
    old: str,
    new: str,
    key: str = "",
    capacity_after: int | None = None,
) -> None:
    """The end of every change of a limit under its locks (taken with its groups' other limits,
    `locked`, and the clock read after them, `now`): the free capacity granted to the queues (a
    capacity raised, a resume, a pool, min or weight that changed who is next), the counters
    written, the change's audit row, and the runs granted woken after the commit."""
    rules.settle_save_wake(locked, now, Changes())
    rules.audit(limit, actor, action, now, old=old, new=new, key=key, capacity_after=capacity_after)


def _with_partners(limit: Limit, by_id: dict[int, Limit]) -> dict[int, Limit]:
    """A deploy's changed limit with the other limits of its groups, from the limits it locked."""
    return {i: by_id[i] for i in {limit.id} | keys.partners([limit.id]) if i in by_id}


def _undeclare(limit: Limit, actor: str) -> None:
    """A deploy's limit that left the config: kept, marked undeclared (SPEC 1.5), audited."""
    limit.declared = False
    now = rules.clock(limit)
    limit.save(update_fields=["declared", "last_event_at", "updated_at"])
    rules.audit(
        limit, actor, AuditEvent.Action.SYNC, now, old="declared", new="undeclared", capacity_after=limit.capacity
    )


def _set_key_field(
    name: str, key: str, field: str, value: object, action: str, actor: str | None, reset: bool
) -> Limit:
    """One key's weight or min (`field` 'minimum'; None resets it: `reset`)."""
    with transaction.atomic(durable=True):
        limit, locked = rules.locked_by_name(name)
        if field == "minimum":
            value = 0 if reset else checked_minimum(value, limit.capacity)
        now = rules.clock_all(locked)
        pools = keys.pools(limit)
        row = pools.row(key, create=True)
        assert row is not None
        old = getattr(row, field)
        setattr(row, field, value)
        row.save(update_fields=[field])
        new = f"{value} (default)" if reset else str(value)
        # a min or weight raised may put a key first
        _settle_and_audit(locked, now, limit, actor, action, old=str(old), new=new, key=key)
        return limit


def _pool_text(size: int | None) -> str:
    return "none" if size is None else str(size)


def _keep_box_capacity(limit: Limit) -> None:
    """The box's capacity is floor(base x burst) of the values in force: declared, or an
    override (then held in capacity_override, as any limit's override)."""
    assert limit.per_key is not None and limit.burst is not None
    overridden = limit.per_key_override is not None or limit.burst_override is not None
    limit.capacity_override = check_ceiling(limit.per_key, limit.burst) if overridden else None


def _box_text(limit: Limit) -> str:
    assert limit.burst is not None
    return f"base {limit.per_key}, burst {burst_text(limit.burst)}, ceiling {limit.capacity}"


def _sync_box(
    spec: RunConcurrency | None,
    existing: dict[str, Limit],
    existing_by_id: dict[int, Limit],
    actor: str,
    report: SyncReport,
) -> None:
    """sync_workspace for the box bound (SPEC 12.1): created, updated (its overrides kept) or
    undeclared like a limit. No max hold: a run holds its box slot while it executes."""
    limit = existing.get(BOX_NAME)
    if limit is not None and not limit.is_box:
        if spec is None:
            return
        raise LimitsError(BOX_NAME_TAKEN, field="run_concurrency")
    if spec is None:
        if limit is not None and limit.declared:
            _undeclare(limit, actor)
            report.undeclared.append(BOX_NAME)
        return
    if limit is None:
        Limit.objects.create(
            name=BOX_NAME,
            kind=Limit.Kind.BOX,
            declared_capacity=spec.ceiling,
            declared_max_hold_ms=MAX_DURATION_MS,
            declared_per_key=spec.base,
            declared_burst=spec.burst,
        )
        report.created.append(BOX_NAME)
        return
    before = (limit.declared, limit.declared_per_key, limit.declared_burst)
    after = (True, spec.base, spec.burst)
    if before == after:
        return
    old = _box_text(limit) + ("" if limit.declared else ", undeclared")
    limit.declared, limit.declared_per_key, limit.declared_burst = after
    limit.declared_capacity = spec.ceiling
    try:
        _keep_box_capacity(limit)
    except ValueError:  # the operator's base x the new burst passes the maximum: the override goes
        limit.per_key_override = limit.burst_override = limit.capacity_override = None
    limit.save(
        update_fields=[
            "declared",
            "declared_capacity",
            "declared_per_key",
            "declared_burst",
            "per_key_override",
            "burst_override",
            "capacity_override",
            "updated_at",
        ]
    )
    touched = _with_partners(limit, existing_by_id)
    _settle_and_audit(
        touched, rules.clock_all(touched), limit, actor, AuditEvent.Action.SYNC, old=old, new=_box_text(limit),
        capacity_after=limit.capacity,
    )  # fmt: skip
    report.updated.append(BOX_NAME)


def _declared_text(
    declared: bool,
    capacity: int,
    max_hold_ms: int,
    per_key: int | None,
    share: str = "fifo",
    on_full: str = "wait",
    max_waiting: int | None = None,
    max_waiting_per_key: int | None = None,
) -> str:
    """The declared values as the audit writes them (engine.sql: limits_declared_text)."""
    text = f"capacity {capacity}, max hold {max_hold_ms} ms"
    if per_key is not None:
        text += f", per_key {per_key}"
    if share != "fifo":
        text += f", share {share}"
    if on_full != "wait":
        text += f", on_full {on_full}"
    if max_waiting is not None:
        text += f", max_waiting {max_waiting}"
    if max_waiting_per_key is not None:
        text += f", max_waiting_per_key {max_waiting_per_key}"
    return text + ("" if declared else ", undeclared")


def _bound_text(
    declared: bool,
    capacity: int,
    per_key: int | None,
    on_full: str = "wait",
    max_waiting: int | None = None,
    max_waiting_per_key: int | None = None,
) -> str:
    """A bound's audit text in a deploy (engine.sql: limits_bound_text)."""
    text = f"total {capacity}" + ("" if per_key is None else f", per_key {per_key}")
    if on_full != "wait":
        text += f", on_full {on_full}"
    if max_waiting is not None:
        text += f", max_waiting {max_waiting}"
    if max_waiting_per_key is not None:
        text += f", max_waiting_per_key {max_waiting_per_key}"
    return text + ("" if declared else ", undeclared")
