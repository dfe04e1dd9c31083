"""The run layer's statements that every run sends, as raw SQL (issue 17).

A one-step run of a workflow with a limit sends each of these once or three times. Through the
ORM each cost 0.3-0.7 ms of Python more than the statement itself (building the query, resolving
its expressions, saving a model instance; measured in-process: an ORM `update()` of a run 0.43 ms
of CPU, the same UPDATE raw 0.15). docs/performance.md has the bench's before and after.

Each function says the ORM call it stands for, and tests/runs/test_run_statements.py holds each
against that call, row for row, on both databases: a change of the rule goes into both or the
test fails. Values go through the model fields' own conversion (`get_db_prep_save`), so a row
written here reads back exactly as one the ORM wrote, and an error inside a transaction marks it
for rollback as the ORM's own writes do.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from stackbone.runs.models import Run, Step

_RUN = Run._meta.db_table
_STEP = Step._meta.db_table

# Times in these statements come from the box's clock (stackbone.plumbing.clock): on the database's
# clock `{now}` is statement_timestamp() and a lease `{now} + %s` (an interval), sent with no time
# of this host's; otherwise (SQLite, tests) both are values the caller's process read.

# QUEUED, PENDING, RUNNING: runtime.UNFINISHED. A queued run keeps started_at (it starts at the gate).
_TAKE_LEASE = f"""
    UPDATE {_RUN} SET lease_owner = %s, lease_until = {{until}}, updated_at = {{now}},
        status = CASE WHEN status = 'pending' THEN 'running' ELSE status END,
        started_at = CASE WHEN status = 'queued' THEN started_at ELSE COALESCE(started_at, {{now}}) END
    WHERE id = %s AND status IN ('queued', 'pending', 'running') AND NOT suspended
        AND (lease_until IS NULL OR lease_until < {{now}})"""

_RENEW_OWN_LEASE = f"""
    UPDATE {_RUN} SET lease_until = {{until}}, updated_at = {{now}}
    WHERE id = %s AND lease_owner = %s AND status = 'running'"""

_INSERT_STEP = f"""
    INSERT INTO {_STEP} (run_id, seq, name, key, kind, status, result, error, started_at, finished_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {{started}}, {{finished}}) RETURNING id"""

# RUNNING, QUEUED: runtime.WAITING_STATUSES.
_FINISH = f"""
    UPDATE {_RUN} SET status = %s, output = %s, error = %s, finished_at = {{now}}, updated_at = {{now}},
        lease_owner = '', lease_until = NULL
    WHERE id = %s AND lease_owner = %s AND status IN ('running', 'queued')"""

# RUNNING, QUEUED: runtime.WAITING_STATUSES. {among}: the ids, one parameter whatever their number.
_WAKE = f"""
    UPDATE {_RUN} SET suspended = false, waiting_for = '', wait_deadline = NULL, dispatched_at = {{now}}
    WHERE id {{among}} AND status IN ('running', 'queued') AND suspended"""

_DATABASE_NOW = "statement_timestamp()"


def _on_database_clock(template: str) -> str:
    return template.format(
        now=_DATABASE_NOW,
        until=f"({_DATABASE_NOW} + %s)",
        started=f"({_DATABASE_NOW} - %s)",
        finished=f"CASE WHEN %s THEN {_DATABASE_NOW} END",
    )


def _on_values(template: str) -> str:
    return template.format(now="%s", until="%s", started="%s", finished="%s")


def _prep(model: type[Run] | type[Step], field: str, value: Any) -> Any:
    """`value` as the ORM sends it for model.field (a datetime made aware and adapted, JSON
    wrapped, None as NULL)."""
    return model._meta.get_field(field).get_db_prep_save(value, connection)  # type: ignore[union-attr]


def _execute(sql: str, params: list[Any]) -> Any:
    """Send one statement; an error marks an enclosing transaction for rollback (QuerySet.update
    and Model.save do the same), so nobody commits half of a recording by catching it."""
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount, (cursor.fetchone() if cursor.description else None)


def _rowcount(sql: str, params: list[Any]) -> int:
    rowcount, _ = _execute(sql, params)
    return int(rowcount)


def take_lease(run_id: str, owner: str, lease: timedelta, now: datetime | None) -> bool:
    """The advance's compare-and-set: take the lease of a runnable run (unfinished, not
    suspended, no live lease) and start a pending one; the lease lasts `lease` from `now` (None:
    the database's time, read by this statement). Stands for

        Run.objects.filter(id=run_id, status__in=UNFINISHED, suspended=False)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(lease_owner=owner, lease_until=now + lease, updated_at=now,
                status=Case(When(status=PENDING, then=Value(RUNNING)), default=F("status")),
                started_at=Case(When(status=QUEUED, then=F("started_at")),
                                default=Coalesce(F("started_at"), Value(now))))
    """
    if now is None:
        return _rowcount(_on_database_clock(_TAKE_LEASE), [owner, lease, run_id]) == 1
    at, until = _prep(Run, "updated_at", now), _prep(Run, "lease_until", now + lease)
    params = [owner, until, at, _prep(Run, "started_at", now), run_id, at]
    return _rowcount(_on_values(_TAKE_LEASE), params) == 1


def renew_own_lease(run_id: str, owner: str, lease: timedelta, now: datetime | None) -> bool:
    """lock_own_run's UPDATE: the run still runs under this owner's lease; renew it for `lease`
    from `now` (None: the database's time). Stands for Run.objects.filter(id=run_id,
    lease_owner=owner, status=RUNNING).update(lease_until=now + lease, updated_at=now)."""
    if now is None:
        return _rowcount(_on_database_clock(_RENEW_OWN_LEASE), [lease, run_id, owner]) == 1
    params = [_prep(Run, "lease_until", now + lease), _prep(Run, "updated_at", now), run_id, owner]
    return _rowcount(_on_values(_RENEW_OWN_LEASE), params) == 1


def insert_step(
    run_id: str, seq: int, name: str, values: dict[str, Any], *, now: datetime | None, ran_for: timedelta
) -> Step:
    """A new step row; `values` holds kind and status, perhaps key, result and error (the model's
    defaults otherwise). It started `ran_for` before `now` (None: the database's time, read by
    this statement) and, unless it waits, finished at `now`. Stands for
    Step.objects.create(run_id=run_id, seq=seq, name=name, started_at=now - ran_for,
    finished_at=None if waiting else now, **values)."""
    fields = {"key": "", "result": None, "error": "", "finished_at": None, **values}
    step = Step(run_id=run_id, seq=seq, name=name, **fields)
    finished = step.status != Step.Status.WAITING
    params = [
        run_id,
        seq,
        name,
        step.key,
        str(step.kind),
        str(step.status),
        _prep(Step, "result", step.result),
        step.error,
    ]
    if now is None:
        params += [ran_for, finished]
        _, (step.id, step.started_at, step.finished_at) = _execute(
            _on_database_clock(_INSERT_STEP) + ", started_at, finished_at", params
        )
    else:
        step.started_at, step.finished_at = now - ran_for, now if finished else None
        params += [_prep(Step, "started_at", step.started_at), _prep(Step, "finished_at", step.finished_at)]
        _, (step.id,) = _execute(_on_values(_INSERT_STEP), params)
    step._state.adding = False
    step._state.db = connection.alias
    return step


def finish(run_id: str, owner: str, status: str, output: Any, error: str, now: datetime | None) -> bool:
    """The run ends under this owner's lease (it was running or queued), at `now` (None: the
    database's time). Stands for
    Run.objects.filter(id=run_id, lease_owner=owner, status__in=WAITING_STATUSES).update(
        status=status, output=output, error=error, finished_at=now, updated_at=now,
        lease_owner="", lease_until=None)."""
    head = [str(status), _prep(Run, "output", output), error]
    if now is None:
        return _rowcount(_on_database_clock(_FINISH), [*head, run_id, owner]) == 1
    at = _prep(Run, "finished_at", now)
    params = [*head, at, _prep(Run, "updated_at", now), run_id, owner]
    return _rowcount(_on_values(_FINISH), params) == 1


def wake(run_ids: list[str], now: datetime | None) -> int:
    """Make these suspended runs runnable, dispatched at `now` (None: the database's time); the
    runs woken. The ids are one parameter (an array on PostgreSQL, JSON on SQLite), where the
    ORM's `id__in` sends one per id: a sweep that grants 100,000 runs wakes them 1,000 an UPDATE,
    and sending and planning 1,000 placeholders a statement took a fifth of that wake (100,000
    runs: 1.9-2.2 s through the ORM, 1.5-1.6 s so; the rows' writes are the rest). Stands for

        Run.objects.filter(id__in=run_ids, status__in=WAITING_STATUSES, suspended=True).update(
            suspended=False, waiting_for="", wait_deadline=None, dispatched_at=now)
    """
    ids: list[str] | str
    if connection.vendor == "postgresql":
        among, ids = "= ANY(%s)", list(run_ids)
    else:
        among, ids = "IN (SELECT value FROM json_each(%s))", json.dumps(list(run_ids))
    if now is None:
        return _rowcount(_on_database_clock(_WAKE.replace("{among}", among)), [ids])
    return _rowcount(_on_values(_WAKE.replace("{among}", among)), [_prep(Run, "dispatched_at", now), ids])
