"""Operator actions and deploys: override or reset a limit's capacity and max hold (SPEC 5.2-5.5),
and bring the declared values in line with the workspace config (1.4, 1.5). Each is one durable
transaction that writes its audit row beside the change."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from django.db import connection, transaction

from limits.config import (
    BOX_NAME,
    MAX_CAPACITY,
    RunConcurrency,
    Workspace,
    burst_text,
    ceiling_problem,
    check_base,
    check_burst,
    check_capacity,
    check_ceiling,
    check_minimum,
    check_per_key,
    check_share,
    check_weight,
)
from limits.durations import MAX_DURATION_MS
from limits.engine import keys, rules, server
from limits.engine.errors import (
    BAD_CAPACITY,
    BAD_MAX_HOLD,
    BAD_PER_KEY,
    UNKNOWN_LIMIT,
    LimitsError,
    check_key,
    duration_ms,
)
from limits.engine.results import RESERVATION_MS, SyncReport
from limits.engine.rules import DEPLOY_ACTOR, Changes
from limits.models import AuditEvent, Limit, is_storable_text


def set_capacity(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Override a limit's capacity (1..100000), or reset it to the declared value with None.
    Raising it grants waiting runs at once; lowering it takes no slot back. `value` is checked
    here (it may come straight from a request)."""
    _not_the_box(name, "capacity")
    capacity = None
    if value is not None:
        try:
            capacity = check_capacity(value)
        except ValueError as error:
            raise LimitsError(BAD_CAPACITY.format(error=error), field="capacity") from None
    if server.available():
        return _operate(name, "capacity", actor, value=capacity)
    with transaction.atomic(durable=True):
        (limit, locked), changes = rules.locked_by_name(name), Changes()
        now = rules.clock_all(locked)
        old = limit.capacity
        limit.capacity_override = capacity
        limit.save(update_fields=["capacity_override", "updated_at"])
        rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        new = f"{limit.capacity} (declared)" if capacity is None else str(limit.capacity)
        rules.audit(limit, actor, AuditEvent.Action.CAPACITY, now, old=str(old), new=new, capacity_after=limit.capacity)
        rules.wake_on_commit(changes.woken)
        return limit


def pause_limit(name: str, *, actor: str | None = None) -> Limit:
    """Pause a limit (SPEC 5.6): from now on it grants nothing, neither a new acquisition nor its
    queue (Limit.room is 0; limits_room in engine.sql). Held slots stay; waiting runs keep their
    places and deadlines, and their timeouts still run; new acquisitions queue. A deploy keeps
    it. Audited; pausing a paused limit changes nothing and records nothing.

    Must never happen (limits verify checks it from the rows): a slot of the limit granted
    between a pause and the resume that follows it."""
    return _set_paused(name, True, actor)


def resume_limit(name: str, *, actor: str | None = None) -> Limit:
    """Resume a paused limit: its free capacity goes to the queue at once, as a capacity raise
    does (5.3). Audited; resuming a running limit changes nothing and records nothing."""
    return _set_paused(name, False, actor)


def _operate(
    name: str,
    action: str,
    actor: str | None,
    *,
    value: int | None = None,
    key: str | None = None,
    paused: bool = False,
    per_key: object = None,
    share: str | None = None,
    minimum: object = None,
) -> Limit:
    """An operator action on PostgreSQL: one call (engine.sql: limits_operate), then the limit as
    it is now, read after the commit. Like the other operator actions it is not meant to run
    inside a caller's transaction (they are durable). The refusals the function answers are the
    Python track's errors: `per_key` is set_per_key's value as given, worded by
    `_checked_per_key` against the capacity the function read under the lock; `minimum`,
    set_min's, by `_checked_minimum`."""
    if not is_storable_text(name):
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    outcome, woken, capacity = server.operate(  # its own transaction: one round trip with its commit
        name,
        action,
        value=value,
        key=key,
        paused=paused,
        share=share,
        actor=actor,
        reservation_ms=RESERVATION_MS,
        owed_after_ms=keys.OWED_AFTER_MS,
    )
    if outcome == "unknown":
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    if outcome == "bound":
        raise LimitsError(NO_MAX_HOLD.format(name=name), field="max_hold")
    if outcome == "bad_per_key":
        assert capacity is not None
        _checked_per_key(per_key, capacity)
        raise AssertionError(f"limits_operate refused a per_key of {per_key!r} that capacity {capacity} allows")
    if outcome == "bad_min":
        assert capacity is not None
        _checked_minimum(minimum, capacity)
        raise AssertionError(f"limits_operate refused a min of {minimum!r} that capacity {capacity} allows")
    rules.wake_on_commit(woken)
    return Limit.objects.get(name=name)


def _set_paused(name: str, paused: bool, actor: str | None) -> Limit:
    if server.available():
        return _operate(name, "pause", actor, paused=paused)
    with transaction.atomic(durable=True):
        (limit, locked), changes = rules.locked_by_name(name), Changes()
        if limit.paused == paused:
            return limit
        now = rules.clock_all(locked)
        limit.paused_at = now if paused else None
        limit.save(update_fields=["paused_at", "updated_at"])
        rules.settle_all(locked, now, changes)  # a pause grants nothing; a resume, the free capacity
        rules.save_all(locked)
        old, new = ("running", "paused") if paused else ("paused", "running")
        action = AuditEvent.Action.PAUSE if paused else AuditEvent.Action.RESUME
        rules.audit(limit, actor, action, now, old=old, new=new, capacity_after=limit.capacity)
        rules.wake_on_commit(changes.woken)
        return limit


def set_max_hold(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Override a limit's max hold (same values as the config's max_hold), or reset it with None.
    Only slots granted afterwards get the new value: a slot's expiry is fixed at grant. `value`
    is checked here (it may come straight from a request)."""
    ms = None if value is None else duration_ms(value, BAD_MAX_HOLD, "max_hold")
    _not_the_box(name, "max_hold")
    if server.available():
        return _operate(name, "max_hold", actor, value=ms)
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


def set_per_key(name: str, value: object, *, key: str | None = None, actor: str | None = None) -> Limit:
    """Override the pool size of every key of a limit (its per_key, 1..capacity), or with `key`
    the pool size of that one key (a large tenant gets 10, a noisy one 1); None resets it
    (SPEC 9.4). Audited; a deploy keeps it; raising it grants waiting runs at once, lowering it
    takes no slot back. `value` and `key` are checked here (they may come straight from a
    request)."""
    if key is not None:
        key = check_key(key)
    _not_the_box(name, "per_key")
    if server.available():
        return _operate(name, "per_key", actor, value=_per_key_to_send(value), key=key, per_key=value)
    with transaction.atomic(durable=True):
        (limit, locked), changes = rules.locked_by_name(name), Changes()
        size = None if value is None else _checked_per_key(value, limit.capacity)
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
        rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        rules.audit(limit, actor, AuditEvent.Action.PER_KEY, now, old=old, new=new, key=key or "")
        rules.wake_on_commit(changes.woken)
        return limit


def _checked_per_key(value: object, capacity: int) -> int:
    """A per_key or key pool size within 1..the capacity in force, read under the limit's lock
    (check_per_key; limits_operate refuses the same range on PostgreSQL)."""
    try:
        return check_per_key(value, capacity)
    except ValueError as error:
        raise LimitsError(BAD_PER_KEY.format(error=error), field="per_key") from None


def _checked_minimum(value: object, capacity: int) -> int:
    """A key's min within 0..the capacity in force, read under the limit's lock (check_minimum;
    limits_operate refuses the same range on PostgreSQL)."""
    try:
        return check_minimum(value, capacity)
    except ValueError as error:
        raise LimitsError(f"min {error}", field="min") from None


def _per_key_to_send(value: object) -> int | None:
    """set_per_key's value as limits_operate's bigint: a whole number as it is when it could be a
    capacity, else one no capacity allows (0 for anything but a whole number, MAX_CAPACITY + 1
    above), which the function refuses once it found the limit and read its capacity, so the error
    comes after an unknown limit's, as on SQLite, and `_checked_per_key` words it."""
    return None if value is None else _bounded_to_send(value, low=0)


def _bounded_to_send(value: object, *, low: int) -> int:
    """A value checked against the capacity under the lock, as a bigint the function can judge:
    `low` (refused) for anything but a whole number, clamped to low..MAX_CAPACITY + 1 otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        return low
    return min(max(value, low), MAX_CAPACITY + 1)


def _int(value: object) -> int:
    assert isinstance(value, int)  # checked by check_weight
    return value


BOX_FIELDS = "'box' is the box's run concurrency: change its base and burst (stackbone limits box --base/--burst)"


def _not_the_box(name: object, field: str) -> None:
    """The box bound's capacity and pools follow its base and burst (set_box), nothing else."""
    if name == BOX_NAME and Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX).exists():
        raise LimitsError(BOX_FIELDS, field=field)


UNCHANGED = object()
NO_BOX = "the box has no run concurrency: declare run_concurrency={'base': n} in the workspace config first"


def set_box(*, base: object = UNCHANGED, burst: object = UNCHANGED, actor: str | None = None) -> Limit:
    """Override the box's base (1..100000) or burst (1.0..10.0), or reset either with None (SPEC
    12.5). The box bound's per-workflow pool is the base and its capacity floor(base x burst).
    Audited; a deploy keeps it; raising grants waiting runs at once, lowering takes nothing back.
    Values are checked here (they may come straight from a request): the error names the field."""
    new_base = new_burst = None
    try:
        if base is not UNCHANGED and base is not None:
            new_base = check_base(base)
    except ValueError as error:
        raise LimitsError(str(error), field="base") from None
    try:
        if burst is not UNCHANGED and burst is not None:
            new_burst = check_burst(burst)
    except ValueError as error:
        raise LimitsError(str(error), field="burst") from None
    field = "base" if base is not UNCHANGED else "burst"
    if server.available():
        return _set_box_in_server(base, new_base, burst, new_burst, actor, field)
    with transaction.atomic(durable=True):
        box = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).first()
        if box is None:
            raise LimitsError(NO_BOX, field=field)
        (limit, locked), changes = rules.locked_by_name(BOX_NAME), Changes()
        old = _box_text(limit)
        if base is not UNCHANGED:
            limit.per_key_override = new_base
        if burst is not UNCHANGED:
            limit.burst_override = new_burst
        try:
            _keep_box_capacity(limit)
        except ValueError as error:
            raise LimitsError(str(error), field=field) from None
        now = rules.clock_all(locked)
        limit.save(update_fields=["per_key_override", "burst_override", "capacity_override", "updated_at"])
        rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        rules.audit(
            limit, actor, AuditEvent.Action.BOX, now, old=old, new=_box_text(limit), capacity_after=limit.capacity
        )
        rules.wake_on_commit(changes.woken)
        return limit


def _set_box_in_server(
    base: object, new_base: int | None, burst: object, new_burst: float | None, actor: str | None, field: str
) -> Limit:
    """set_box on PostgreSQL: one call (limits_operate, action 'box'), which locks the box with
    its groups' other limits, keeps its ceiling, grants and audits as the lines below do."""
    outcome, woken, ceiling = server.operate(
        BOX_NAME,
        "box",
        value=new_base,
        base_given=base is not UNCHANGED,
        burst=new_burst,
        burst_given=burst is not UNCHANGED,
        actor=actor,
        reservation_ms=RESERVATION_MS,
        owed_after_ms=keys.OWED_AFTER_MS,
    )
    if outcome == "unknown":
        raise LimitsError(NO_BOX, field=field)
    if outcome == "bad_ceiling":
        assert ceiling is not None
        raise LimitsError(ceiling_problem(ceiling), field=field)
    rules.wake_on_commit(woken)
    return Limit.objects.get(name=BOX_NAME)


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
            limit.declared = False
            now = rules.clock(limit)
            limit.save(update_fields=["declared", "last_event_at", "updated_at"])
            rules.audit(
                limit, actor, AuditEvent.Action.SYNC, now, old="declared", new="undeclared",
                capacity_after=limit.capacity,
            )  # fmt: skip
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
    touched = {i: existing_by_id[i] for i in {limit.id} | keys.partners([limit.id]) if i in existing_by_id}
    now, changes = rules.clock_all(touched), Changes()
    rules.settle_all(touched, now, changes)
    rules.save_all(touched)
    rules.wake_on_commit(changes.woken)
    rules.audit(limit, actor, AuditEvent.Action.SYNC, now, old=old, new=_box_text(limit), capacity_after=limit.capacity)
    report.updated.append(BOX_NAME)


BOX_NAME_TAKEN = (
    "run_concurrency: a limit named 'box' exists in this box (declared before): the box's run concurrency "
    "needs the name; rename that limit first"
)


BOX_LIMIT_TAKEN = (
    "limit 'box': the name belongs to the box's run concurrency, declared in this box before; "
    "give the limit another name"
)


def set_share(name: str, value: object, *, actor: str | None = None) -> Limit:
    """Switch a limit between first come, first served ('fifo') and fair shares between keys
    ('fair'), or reset it to the declared share with None (SPEC 13.5). Audited; a deploy keeps it.
    The next grant follows the new order; nothing held changes."""
    share = None
    if value is not None:
        try:
            share = check_share(value)
        except ValueError as error:
            raise LimitsError(f"share {error}", field="share") from None
    _not_the_box(name, "share")
    if server.available():
        return _operate(name, "share", actor, share=share)
    with transaction.atomic(durable=True):
        (limit, locked), changes = rules.locked_by_name(name), Changes()
        now = rules.clock_all(locked)
        old = limit.share
        limit.share_override = share or ""
        if limit.share != old:
            keys.restart_turns(limit)
        limit.save(update_fields=["share_override", "nokey_fair_pass", "updated_at"])
        rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        new = f"{limit.share} (declared)" if share is None else limit.share
        rules.audit(limit, actor, AuditEvent.Action.SHARE, now, old=old, new=new)
        rules.wake_on_commit(changes.woken)
        return limit


def set_weight(name: str, value: object, *, key: object, actor: str | None = None) -> Limit:
    """Set one key's weight on a limit (1-100), or reset it to 1 with None (SPEC 13.1, 13.5): on
    a fair limit the key's share is capacity x weight / the weights of the keys holding or
    waiting. Audited; a deploy keeps it."""
    weight = 1
    if value is not None:
        try:
            weight = check_weight(value)
        except ValueError as error:
            raise LimitsError(f"weight {error}", field="weight") from None
    return _set_key_field(name, key, "weight", weight, AuditEvent.Action.WEIGHT, actor, reset=value is None)


def set_min(name: str, value: object, *, key: object, actor: str | None = None) -> Limit:
    """Set one key's min on a limit (0 to its capacity), or reset it to 0 with None (SPEC 13.1,
    13.5): on a fair limit a key holding fewer slots than its min is served first. Audited; a
    deploy keeps it."""
    return _set_key_field(name, key, "minimum", value, AuditEvent.Action.MINIMUM, actor, reset=value is None)


def _set_key_field(
    name: str, key: object, field: str, value: object, action: str, actor: str | None, *, reset: bool
) -> Limit:
    checked_key = check_key(key)
    shown = "min" if field == "minimum" else field
    _not_the_box(name, shown)
    if server.available():
        if field == "weight":
            return _operate(name, "weight", actor, value=None if reset else _int(value), key=checked_key)
        sent = None if reset else _bounded_to_send(value, low=-1)
        return _operate(name, "min", actor, value=sent, key=checked_key, minimum=value)
    with transaction.atomic(durable=True):
        (limit, locked), changes = rules.locked_by_name(name), Changes()
        if field == "minimum":
            value = 0 if reset else _checked_minimum(value, limit.capacity)
        now = rules.clock_all(locked)
        pools = keys.pools(limit)
        row = pools.row(checked_key, create=True)
        assert row is not None
        old = getattr(row, field)
        setattr(row, field, value)
        row.save(update_fields=[field])
        rules.settle_all(locked, now, changes)  # a min or weight raised may put a key first
        rules.save_all(locked)
        new = f"{value} (default)" if reset else str(value)
        rules.audit(limit, actor, action, now, old=str(old), new=new, key=checked_key)
        rules.wake_on_commit(changes.woken)
        return limit


def _pool_text(size: int | None) -> str:
    return "none" if size is None else str(size)


NO_MAX_HOLD = "{name!r} is a workflow's own bound: its runs hold their slot until they end (no max hold)"


def sync_workspace(workspace: Workspace, *, actor: str = DEPLOY_ACTOR) -> SyncReport:
    """Bring the declared values of every limit in line with the workspace config.

    Operator overrides survive (a deploy does not clear them). Limits that left the config are
    kept and marked undeclared; a limit that comes back is declared again. A declared capacity
    that rose grants waiting runs at once.
    """
    if server.available():
        with _as_the_python_track(durable=True):
            return _sync_workspace_in_server(workspace, actor)
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
                )
                report.created.append(name)
                continue
            before = (
                limit.declared,
                limit.declared_capacity,
                limit.declared_max_hold_ms,
                limit.declared_per_key,
                limit.declared_share,
            )
            after = (True, spec.capacity, spec.max_hold_ms, spec.per_key, spec.share)
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
            ) = after
            limit.save(
                update_fields=[
                    "declared",
                    "declared_capacity",
                    "declared_max_hold_ms",
                    "declared_per_key",
                    "declared_share",
                    "nokey_fair_pass",
                    "updated_at",
                ]
            )
            touched = {i: existing_by_id[i] for i in {limit.id} | keys.partners([limit.id]) if i in existing_by_id}
            now, changes = rules.clock_all(touched), Changes()
            rules.settle_all(touched, now, changes)
            rules.save_all(touched)
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
        _sync_box(workspace.run_concurrency, existing, existing_by_id, actor, report)
        for name, limit in existing.items():
            if limit.is_workflow_bound or limit.is_box:
                continue  # a workflow's own bound: sync_workflow_bounds keeps it; the box: _sync_box
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


def _as_the_python_track(*, durable: bool) -> AbstractContextManager[object]:
    """The Python track's `transaction.atomic(durable=...)` around a deploy's one call, where it
    changes something: inside a caller's transaction a deploy refuses it (RuntimeError, as on
    SQLite), and ensure_workflow_bound's sync takes a savepoint, so that a refusal gives back
    the lock it took; outside one, the call is its own statement in autocommit."""
    return transaction.atomic(durable=durable) if connection.in_atomic_block else nullcontext()


def _sync_workspace_in_server(workspace: Workspace, actor: str) -> SyncReport:
    """sync_workspace on PostgreSQL: one call (engine.sql: limits_sync_workspace), which locks every
    limit, writes, grants and audits as the lines above do, and refuses a taken name before it
    writes anything."""
    run_concurrency = workspace.run_concurrency
    return _deployed(
        *server.sync_workspace(
            [
                (name, spec.capacity, spec.max_hold_ms, spec.per_key, spec.share)
                for name, spec in sorted(workspace.limits.items())
            ],
            None if run_concurrency is None else (run_concurrency.base, run_concurrency.burst, run_concurrency.ceiling),
            MAX_DURATION_MS,
            actor,
            RESERVATION_MS,
            keys.OWED_AFTER_MS,
        )
    )


def _deployed(
    outcome: str, bad_name: str | None, created: list[str], updated: list[str], undeclared: list[str], woken: list[str]
) -> SyncReport:
    """A deploy function's answer (limits_sync_workspace, limits_sync_bounds): its refusal as the
    Python track words it, or the runs to wake after the commit and the report."""
    if outcome == "bound_taken":
        raise LimitsError(BOUND_NAME_TAKEN.format(name=bad_name), field="name")
    if outcome == "box_taken":
        raise LimitsError(BOX_NAME_TAKEN, field="run_concurrency")
    if outcome == "box_taken_by_limit":
        raise LimitsError(BOX_LIMIT_TAKEN, field="name")
    rules.wake_on_commit(woken)
    return SyncReport(created=created, updated=updated, undeclared=undeclared)


def _declared_text(declared: bool, capacity: int, max_hold_ms: int, per_key: int | None, share: str = "fifo") -> str:
    text = f"capacity {capacity}, max hold {max_hold_ms} ms"
    if per_key is not None:
        text += f", per_key {per_key}"
    if share != "fifo":
        text += f", share {share}"
    return text + ("" if declared else ", undeclared")


BOUND_NAME_TAKEN = "limit {name!r}: the name belongs to a workflow's own bound (names starting 'workflow.')"


def sync_workflow_bounds(
    bounds: dict[str, tuple[int | None, int | None]], *, actor: str = DEPLOY_ACTOR, only: bool = False
) -> SyncReport:
    """Bring the workflows' own bounds (SPEC 11.5) in line with their @workflow(concurrency=...):
    {limit name: (total, per_key)}. A bound is a limit of kind 'workflow' with no max hold (its
    slots last as long as their run: the sweep never takes them back); total None means only the
    per-key pools bind (capacity 100000). Operator overrides survive, as for declared limits; a
    bound whose workflow no longer declares one is kept, undeclared. With `only`, the bounds
    given are synced and nothing else is touched (start_run of a workflow whose bound the deploy
    did not load, SPEC 11.6: `ensure_workflow_bound`)."""
    if server.available():
        with _as_the_python_track(durable=not only):
            return _sync_bounds_in_server(bounds, actor, only)
    report = SyncReport()
    with transaction.atomic(durable=not only):
        rows = Limit.objects.locked().filter(name__in=list(bounds)) if only else Limit.objects.locked()
        existing = {limit.name: limit for limit in rows.order_by("id")}
        by_id = {limit.id: limit for limit in existing.values()}
        for name, (total, per_key) in sorted(bounds.items()):
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
                        )
                    ],
                    ignore_conflicts=True,  # two first starts at once: one creates it, both use it
                )
                report.created.append(name)
                continue
            if not limit.is_workflow_bound:
                raise LimitsError(BOUND_NAME_TAKEN.format(name=name), field="name")
            before = (limit.declared, limit.declared_capacity, limit.declared_per_key)
            after = (True, capacity, per_key)
            if before == after:
                continue
            limit.declared, limit.declared_capacity, limit.declared_per_key = after
            limit.save(update_fields=["declared", "declared_capacity", "declared_per_key", "updated_at"])
            touched = {i: by_id[i] for i in {limit.id} | keys.partners([limit.id]) if i in by_id}
            now, changes = rules.clock_all(touched), Changes()
            rules.settle_all(touched, now, changes)
            rules.save_all(touched)
            rules.wake_on_commit(changes.woken)
            rules.audit(
                limit,
                actor,
                AuditEvent.Action.SYNC,
                now,
                old=_bound_text(*before),
                new=_bound_text(*after),
                capacity_after=limit.capacity,
            )
            report.updated.append(name)
        for name, limit in existing.items():
            if not only and limit.is_workflow_bound and name not in bounds and limit.declared:
                limit.declared = False
                now = rules.clock(limit)
                limit.save(update_fields=["declared", "last_event_at", "updated_at"])
                rules.audit(
                    limit, actor, AuditEvent.Action.SYNC, now, old="declared", new="undeclared",
                    capacity_after=limit.capacity,
                )  # fmt: skip
                report.undeclared.append(name)
    return report


def _sync_bounds_in_server(bounds: dict[str, tuple[int | None, int | None]], actor: str, only: bool) -> SyncReport:
    """sync_workflow_bounds on PostgreSQL: one call (engine.sql: limits_sync_bounds), as the lines
    above do. Outside `only` it is a deploy's own transaction; with `only` it may run inside the
    caller's (start_run's), which a refusal leaves as it was."""
    return _deployed(
        *server.sync_bounds(
            [
                (name, MAX_CAPACITY if total is None else total, per_key)
                for name, (total, per_key) in sorted(bounds.items())
            ],
            MAX_DURATION_MS,
            only,
            actor,
            RESERVATION_MS,
            keys.OWED_AFTER_MS,
        )
    )


def _bound_text(declared: bool, capacity: int, per_key: int | None) -> str:
    text = f"total {capacity}" + ("" if per_key is None else f", per_key {per_key}")
    return text + ("" if declared else ", undeclared")


def ensure_workflow_bound(name: str, total: int | None, per_key: int | None) -> None:
    """SPEC 11.6: a workflow's own bound exists and is declared from the first moment a run of it
    can start. When the deploy did not sync it (the workflow lives in a test module, or a module
    the deploy did not load), start_run syncs that one bound in its own transaction, exactly as a
    sync of it would (audited as the deploy's): a user never sees "unknown limit" for a bound they
    declared. One indexed read when it is there already."""
    if Limit.objects.filter(name=name, declared=True, kind=Limit.Kind.WORKFLOW).exists():
        return
    sync_workflow_bounds({name: (total, per_key)}, only=True)
