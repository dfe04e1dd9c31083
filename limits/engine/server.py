"""The PostgreSQL engine (limits.engine.engines.Engine): each operation one call of a function
of limits/sql/engine.sql, one round trip, the limit's row lock held inside the server only.

Each function does the whole operation, in every case: keys, groups, owed runs, confirm, lapse,
requeue, an earlier request's outcome (limits_previous), operators' changes, deploys, the sweep,
and the refusals, which `PostgresEngine` words as the Python engine (limits.engine.python) words
them. Nothing is handed to the Python engine: limits_acquire_group's 'slow' answer is kept for a
list of names that repeats a limit, which limits.engine.slots refuses before the call. The Python
engine is the readable definition and SQLite's; this one is PostgreSQL's, held to the same tests
(tests/services and the model test run on both databases; tests/services/test_sql_file.py holds
the database to the file).

Outside a caller's transaction a call is its own statement in autocommit: one round trip with
its commit.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection, transaction

from limits.config import BOX_NAME, MAX_CAPACITY, Workspace, ceiling_problem
from limits.durations import MAX_DURATION_MS
from limits.engine import keys
from limits.engine.errors import UNDECLARED_LIMIT, UNKNOWN_LIMIT, LimitsError
from limits.engine.refusals import (
    BOUND_NAME_TAKEN,
    BOX_LIMIT_TAKEN,
    BOX_NAME_TAKEN,
    NO_BOX,
    NO_MAX_HOLD,
    checked_minimum,
    checked_per_key,
)
from limits.engine.results import RESERVATION_MS, Acquisition, BoundValues, SweepReport, SyncReport
from limits.engine.woken import wake_on_commit
from limits.models import Limit, is_storable_text
from stackbone.plumbing import clock

ANSWERED_AT_ONCE = ("skipped", "refused")  # SPEC 14.2, 14.5: an acquisition queued nowhere
SLOW = "slow"  # limits_acquire_group's answer for a list of names that repeats a limit
__all__ = ["PostgresEngine", "start_runs", "wake_on_commit"]  # wake_on_commit: for limits.runs.bounds


def _call(sql: str, params: list[Any]) -> tuple[Any, ...]:
    """One function call with server-side binding: the SQL text is the same on every call and the
    values travel apart from it (Django's default cursor binds on the client, rebuilding each
    call's text with its values in Python: the top of the engine's client profile, issue 17).
    The call still goes through Django's cursor wrapper, so query logging, execute wrappers and
    error translation see it. With the connection's `prepare_threshold` set (Django's
    OPTIONS["prepare_threshold"]; off by default, for connection poolers), psycopg also prepares
    each call's statement once per connection."""
    from django.db.backends.postgresql.base import ServerBindingCursor  # psycopg: PostgreSQL only

    connection.ensure_connection()
    with connection.wrap_database_errors:
        cursor_class: Any = ServerBindingCursor  # the stubs know Django's other cursor classes only
        raw = cursor_class(connection.connection)
    wrapped = connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)
    with wrapped as cursor:
        cursor.execute(sql, params)
        row: tuple[Any, ...] = cursor.fetchone()
        return row


_OPERATE = "SELECT outcome, woken, capacity FROM limits_operate(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_DEPLOYED = "SELECT outcome, bad_name, created, updated, undeclared, woken FROM "


class PostgresEngine:
    """limits.engine.engines.Engine on PostgreSQL. Each method is one call; the runs the call
    woke are woken on commit; a refusal is the LimitsError the Python engine raises."""

    starts_runs_in_one_call = True  # limits_start_runs (limits.runs.bounds.start_on_server)

    def acquire(
        self, limit_name: str, run_id: str, request: str, label: str, timeout_ms: int, on_full: str | None = None
    ) -> Acquisition:
        """limits_acquire: a new request granted at once or queued behind full capacity, or a
        request that holds a live slot (a reservation in time is confirmed); on a limit that is
        not plain, or with a settle due, limits_acquire_group's answer from the same call, and an
        earlier request's outcome (limits_previous: `answer_timeout_ms` its timeout)."""
        if not is_storable_text(limit_name):  # no limit bears a name PostgreSQL cannot store
            raise LimitsError(UNKNOWN_LIMIT.format(name=limit_name), field="limit")
        outcome, name, slot_id, deadline, woken, answer_timeout_ms, answer_key, reason, replaced_by, by_run = _call(
            "SELECT outcome, limit_name, slot_id, deadline, woken, answer_timeout_ms, answer_key, reason,"
            " replaced_by, replaced_by_run FROM limits_acquire(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                limit_name,
                run_id,
                request,
                label,
                timeout_ms,
                clock.param(),
                RESERVATION_MS,
                keys.OWED_AFTER_MS,
                on_full,
            ],
        )
        _refuse(outcome, name)
        wake_on_commit(woken)
        key = answer_key or ""  # an earlier request's (a group's, a key's): the rows say
        if outcome == "busy":
            return Acquisition("busy", name, request, slot_id=slot_id, key=key)
        if outcome in ANSWERED_AT_ONCE:  # SPEC 14: queued nowhere
            return Acquisition(outcome, name, request, timeout_ms=timeout_ms, key=key, reason=reason)
        if outcome == "waiting" and answer_timeout_ms is None:  # a new request's wait
            answer_timeout_ms = timeout_ms
        return Acquisition(
            outcome,
            name,
            request,
            timeout_ms=answer_timeout_ms,
            deadline=deadline,
            key=key,
            replaced_by=replaced_by or "",
            replaced_by_run=by_run or "",
        )

    def acquire_group(
        self,
        names: list[str],
        run_id: str,
        request: str,
        label: str,
        member_keys: list[str],
        timeout_ms: int,
        box: bool,
        on_full: str | None = None,
    ) -> Acquisition:
        """limits_acquire_group: a new request, with a key or several limits, granted busy slots
        of every limit at once when nobody waits and each has room, or joining every queue
        (granted and confirmed at once if the grant reaches it, else waiting), or an earlier
        request's outcome (limits_previous: its limits in the order given, its key and timeout).
        `member_keys`: each limit's key pool; `box`: the last limit is the box bound."""
        for name in names:
            if not is_storable_text(name):  # no limit bears a name PostgreSQL cannot store
                raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
        key = member_keys[0]
        (
            outcome,
            slot_ids,
            deadline,
            woken,
            bad_name,
            answer_names,
            answer_key,
            answer_timeout_ms,
            reason,
            full_name,
            replaced_by,
            by_run,
        ) = _call(
            "SELECT outcome, slot_ids, deadline, woken, bad_name, answer_names, answer_key, answer_timeout_ms,"
            " reason, full_name, replaced_by, replaced_by_run"
            " FROM limits_acquire_group(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                names,
                run_id,
                request,
                label,
                member_keys,
                timeout_ms,
                clock.param(),
                RESERVATION_MS,
                keys.OWED_AFTER_MS,
                box,
                on_full,
            ],
        )
        _refuse(outcome, bad_name)
        wake_on_commit(woken)
        if outcome in ANSWERED_AT_ONCE:  # SPEC 14: queued nowhere; `full_name` stopped it
            return Acquisition(
                outcome, full_name, request, timeout_ms=timeout_ms, limits=tuple(names), key=key, reason=reason
            )
        if answer_names is not None:  # an earlier request: what became of it (limits_previous)
            names, timeout_ms = answer_names, answer_timeout_ms
        if answer_key is not None:  # an earlier request's key, as its rows have it
            key = answer_key
        if outcome != "busy":
            return Acquisition(
                outcome,
                names[0],
                request,
                timeout_ms=timeout_ms,
                deadline=deadline,
                limits=tuple(names),
                key=key,
                replaced_by=replaced_by or "",
                replaced_by_run=by_run or "",
            )
        return Acquisition(
            "busy",
            names[0],
            request,
            slot_id=slot_ids[0],
            slots=tuple(zip(names, slot_ids, strict=True)),
            limits=tuple(names),
            key=key,
        )

    def confirm(self, slot_id: str) -> bool:
        """limits_confirm_or_lapse: True for reservations confirmed in time (a group's together);
        False for late ones, which lapse (the runs the grant of their capacity woke are woken),
        or a slot not reserved."""
        outcome, woken = _call(
            "SELECT outcome, woken FROM limits_confirm_or_lapse(%s, %s, %s, %s)",
            [slot_id, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS],
        )
        wake_on_commit(woken)
        return bool(outcome == "busy")

    def release(self, slot_id: str, actor: str | None) -> bool:
        """limits_release of a busy or reserved slot (a reservation's run goes back to the queue,
        a group's whole), audited when an operator (`actor`) releases it, with the grant of the
        freed capacity on every limit it locks."""
        outcome, woken = _call(
            "SELECT outcome, woken FROM limits_release(%s, %s, %s, %s, %s)",
            [slot_id, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS, actor],
        )
        wake_on_commit(woken)
        return bool(outcome == "released")

    def release_slots(self, slot_ids: list[str], actor: str | None) -> list[bool]:
        """limits_release_slots: several slots freed under one set of locks and one grant (a
        with_limits block's release), each answer in the order given."""
        released, woken = _call(
            "SELECT released, woken FROM limits_release_slots(%s::text[], %s, %s, %s, %s)",
            [slot_ids, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS, actor],
        )
        wake_on_commit(woken)
        return list(released)

    def tie_to_run(self, slot_id: str, run_id: str) -> bool:
        """limits_tie_to_run: mark a busy slot of the run as freed with it (False for a slot not
        busy for that run, including one freed while the call waited for its row)."""
        (tied,) = _call("SELECT limits_tie_to_run(%s, %s)", [slot_id, run_id])
        return bool(tied)

    def end_run(self, run_id: str) -> int:
        """limits_end_run: the run's waits cancelled, its reservations and tied busy slots freed,
        the capacity granted: the entries and slots ended."""
        ended, woken = _call(
            "SELECT ended, woken FROM limits_end_run(%s, %s, %s, %s)",
            [run_id, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS],
        )
        wake_on_commit(woken)
        return int(ended)

    def sweep(self, now: datetime, report: SweepReport) -> None:
        """The sweep's steps 1 and 2 in one statement whatever the number of limits, the
        procedure limits_sweep (limits_sweep_limit for each limit with work, under its locks and
        its groups' other limits'). In autocommit the procedure commits each limit before the
        next. A caller's transaction is refused, as the Python engine's durable per-limit
        transactions refuse it; a test's is allowed, and holds the pass's locks to its end.
        `now` is the Python engine's: the procedure reads the clock under each limit's lock."""
        with nullcontext() if connection.get_autocommit() else transaction.atomic(durable=True):
            report.limits, report.expired, report.lapsed, report.timed_out, report.granted, woken = _call(
                "CALL limits_sweep(%s, %s, %s, %s, NULL, NULL, NULL, NULL, NULL, NULL)",
                [clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS, connection.get_autocommit()],
            )
            wake_on_commit(woken)  # in autocommit: now; in a test's transaction: at its commit

    # --- operators' changes: limits_operate, then the limit as it is now, read after the commit --

    def set_capacity(self, name: str, capacity: int | None, actor: str | None) -> Limit:
        return self._operate(name, "capacity", actor, value=capacity)

    def set_paused(self, name: str, paused: bool, actor: str | None) -> Limit:
        return self._operate(name, "pause", actor, paused=paused)

    def set_max_hold(self, name: str, ms: int | None, actor: str | None) -> Limit:
        return self._operate(name, "max_hold", actor, value=ms)

    def set_per_key(self, name: str, value: object, key: str | None, actor: str | None) -> Limit:
        sent = None if value is None else _bounded_to_send(value, low=0)
        return self._operate(name, "per_key", actor, value=sent, key=key, per_key=value)

    def set_share(self, name: str, share: str | None, actor: str | None) -> Limit:
        return self._operate(name, "share", actor, share=share)

    def set_on_full(self, name: str, on_full: str | None, actor: str | None) -> Limit:
        return self._operate(name, "on_full", actor, share=on_full)

    def set_max_waiting(self, name: str, value: int | None, per_key: bool, actor: str | None) -> Limit:
        return self._operate(name, "max_waiting_key" if per_key else "max_waiting", actor, value=value)

    def set_weight(self, name: str, key: str, weight: int | None, actor: str | None) -> Limit:
        return self._operate(name, "weight", actor, value=weight, key=key)

    def set_min(self, name: str, key: str, minimum: object, actor: str | None) -> Limit:
        sent = None if minimum is None else _bounded_to_send(minimum, low=-1)
        return self._operate(name, "min", actor, value=sent, key=key, minimum=minimum)

    def _operate(
        self,
        name: str,
        action: str,
        actor: str | None,
        *,
        value: int | None = None,
        key: str | None = None,
        paused: bool = False,
        share: str | None = None,
        per_key: object = None,
        minimum: object = None,
    ) -> Limit:
        """limits_operate: an operator's change of a limit, with its grant and audit row, in its
        own transaction (one round trip with its commit; like the Python engine's operator
        actions it is not meant to run inside a caller's transaction). `action` 'capacity',
        'per_key' (with `key`: that key's pool size), 'max_hold' (ms), 'weight' or 'min' (with
        `key`) sets `value`, None resets it; 'share' sets `share`; 'pause' pauses (`paused`
        True) or resumes. The function answers 'done', 'same' (a pause that changes nothing),
        'unknown', 'bound' (a max hold of a workflow's own bound), 'bad_per_key' or 'bad_min'
        (outside 1..or 0..the capacity it read under the lock: `per_key` and `minimum` are the
        values as given, worded against that capacity), with nothing changed but for 'done'."""
        if not is_storable_text(name):
            raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
        outcome, woken, capacity = _call(
            _OPERATE,
            [name, action, value, key, paused, actor, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS]
            + [share, False, None, False],
        )
        if outcome == "unknown":
            raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
        if outcome == "bound":
            raise LimitsError(NO_MAX_HOLD.format(name=name), field="max_hold")
        if outcome == "bad_per_key":
            checked_per_key(per_key, capacity)
            raise AssertionError(f"limits_operate refused a per_key of {per_key!r} that capacity {capacity} allows")
        if outcome == "bad_min":
            checked_minimum(minimum, capacity)
            raise AssertionError(f"limits_operate refused a min of {minimum!r} that capacity {capacity} allows")
        wake_on_commit(woken)
        return Limit.objects.get(name=name)

    def set_box(
        self,
        base: int | None,
        base_given: bool,
        burst: float | None,
        burst_given: bool,
        actor: str | None,
        field: str,
    ) -> Limit:
        """limits_operate, action 'box': the box locked with its groups' other limits, its base
        and burst set (None resets one given), its ceiling kept beside them, the grant and the
        audit row. 'unknown': no declared box; 'bad_ceiling': base x burst would pass the largest
        capacity (the function answers that ceiling)."""
        outcome, woken, ceiling = _call(
            _OPERATE,
            [BOX_NAME, "box", base, None, False, actor, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS]
            + [None, base_given, burst, burst_given],
        )
        if outcome == "unknown":
            raise LimitsError(NO_BOX, field=field)
        if outcome == "bad_ceiling":
            raise LimitsError(ceiling_problem(ceiling), field=field)
        wake_on_commit(woken)
        return Limit.objects.get(name=BOX_NAME)

    # --- deploys -------------------------------------------------------------------------------

    def sync_workspace(self, workspace: Workspace, actor: str) -> SyncReport:
        """limits_sync_workspace: a deploy of the workspace config in one call, which locks every
        limit, writes, grants and audits as the Python engine does, and refuses a taken name
        before it writes anything. The limits go as (name, capacity, max hold ms, per_key, share,
        on_full, max_waiting, max_waiting_per_key) in the order the report lists them; the box as
        (base, burst, ceiling), or NULLs."""
        limits = [
            (
                name,
                spec.capacity,
                spec.max_hold_ms,
                spec.per_key,
                spec.share,
                spec.on_full,
                spec.max_waiting,
                spec.max_waiting_per_key,
            )  # fmt: skip
            for name, spec in sorted(workspace.limits.items())
        ]
        names, capacities, max_holds, per_keys, shares, on_fulls, max_waitings, max_waitings_per_key = (
            [row[i] for row in limits] for i in range(8)
        )
        box = workspace.run_concurrency
        base, burst, ceiling = (None, None, None) if box is None else (box.base, box.burst, box.ceiling)
        with _deploy_transaction(durable=True):
            return _deployed(
                *_call(
                    _DEPLOYED + "limits_sync_workspace(%s::text[], %s::integer[], %s::bigint[], %s::integer[], "
                    "%s::text[], %s, %s, %s, %s, %s, %s, %s, %s, %s::text[], %s::integer[], %s::integer[])",
                    [names, capacities, max_holds, per_keys, shares, base, burst, ceiling, MAX_DURATION_MS, actor]
                    + [clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS, on_fulls, max_waitings, max_waitings_per_key],
                )
            )

    def sync_workflow_bounds(self, bounds: dict[str, BoundValues], actor: str, only: bool) -> SyncReport:
        """limits_sync_bounds: the workflows' own bounds synced in one call, as (name, capacity,
        per_key, on_full, max_waiting, max_waiting_per_key) in the order the report lists them;
        with `only`, those bounds alone. Outside `only` it is a deploy's own transaction; with
        `only` it may run inside the caller's (start_run's), which a refusal leaves as it was."""
        rows = [
            (name, MAX_CAPACITY if total is None else total, per_key, on_full, max_waiting, max_waiting_per_key)
            for name, (total, per_key, on_full, max_waiting, max_waiting_per_key) in sorted(bounds.items())
        ]
        columns = [[row[i] for row in rows] for i in range(6)]
        with _deploy_transaction(durable=not only):
            return _deployed(
                *_call(
                    _DEPLOYED + "limits_sync_bounds(%s::text[], %s::integer[], %s::integer[], %s, %s, %s, %s, %s, %s, "
                    "%s::text[], %s::integer[], %s::integer[])",
                    columns[:3]
                    + [MAX_DURATION_MS, only, actor, clock.param(), RESERVATION_MS, keys.OWED_AFTER_MS]
                    + columns[3:],
                )
            )


def _bounded_to_send(value: object, *, low: int) -> int:
    """A value the function checks against the capacity under the lock, as a bigint it can judge:
    `low` (refused) for anything but a whole number, clamped to low..MAX_CAPACITY + 1 otherwise;
    the function refuses it once it found the limit and read its capacity, so the error comes
    after an unknown limit's, as in the Python engine, and `checked_per_key`/`checked_minimum`
    word it."""
    if isinstance(value, bool) or not isinstance(value, int):
        return low
    return min(max(value, low), MAX_CAPACITY + 1)


def _deploy_transaction(*, durable: bool) -> AbstractContextManager[object]:
    """The Python engine's `transaction.atomic(durable=...)` around a deploy's one call, where it
    changes something: inside a caller's transaction a deploy refuses it (RuntimeError, as on
    SQLite), and ensure_workflow_bound's sync takes a savepoint, so that a refusal gives back
    the lock it took; outside one, the call is its own statement in autocommit."""
    return transaction.atomic(durable=durable) if connection.in_atomic_block else nullcontext()


def _deployed(
    outcome: str, bad_name: str | None, created: list[str], updated: list[str], undeclared: list[str], woken: list[str]
) -> SyncReport:
    """A deploy function's answer: its refusal ('bound_taken', 'box_taken', 'box_taken_by_limit',
    nothing changed) as the Python engine words it, or the runs to wake after the commit and the
    report."""
    if outcome == "bound_taken":
        raise LimitsError(BOUND_NAME_TAKEN.format(name=bad_name), field="name")
    if outcome == "box_taken":
        raise LimitsError(BOX_NAME_TAKEN, field="run_concurrency")
    if outcome == "box_taken_by_limit":
        raise LimitsError(BOX_LIMIT_TAKEN, field="name")
    wake_on_commit(woken)
    return SyncReport(created=created, updated=updated, undeclared=undeclared)


def start_runs(
    ids: list[str],
    workflow: str,
    inputs: list[Any],
    references: list[str],
    keys: list[str],
    limits: list[str],
    label: str,
    timeout_ms: int,
    owed_after_ms: int,
    on_full: str | None = None,
) -> StartedRuns:
    """limits_start_runs: the runs created and their start acquisitions taken in order, in one
    call (issue 44). (problem, bad_name, statuses, bounds, created, woken, reasons, full_names): a
    problem ('unknown', 'undeclared', 'slow') means nothing was written. A run answered at once
    (SPEC 14.2, 14.5; `on_full` this start's, None its bounds' own) is 'skipped', with its reason
    and the limit that stopped it in reasons and full_names ('' for the others). The runs it woke
    are not woken here."""
    from psycopg.types.json import Jsonb  # psycopg: PostgreSQL only

    row = _call(
        "SELECT problem, bad_name, statuses, bounds, created, woken, reasons, full_names FROM limits_start_runs("
        "%s::text[], %s, %s::jsonb[], %s::text[], %s::text[], %s::text[], %s, %s, %s, %s, %s, %s)",
        [
            ids,
            workflow,
            [Jsonb(value) for value in inputs],
            references,
            keys,
            limits,
            label,
            timeout_ms,
            clock.param(),
            RESERVATION_MS,
            owed_after_ms,
            on_full,
        ],
    )
    problem, bad_name, statuses, bounds, created, woken, reasons, full_names = row
    return StartedRuns(
        problem, bad_name, statuses or [], bounds or [], created, woken or [], reasons or [], full_names or []
    )


class StartedRuns(NamedTuple):
    """What limits_start_runs answers (start_runs)."""

    problem: str | None
    bad_name: str | None
    statuses: list[str]
    bounds: list[str]
    created: datetime
    woken: list[str]
    reasons: list[str]
    full_names: list[str]


def _refuse(outcome: str, name: str) -> None:
    """The acquire functions' refusals, worded as the Python track words them (the function gave
    its locks back and changed nothing)."""
    if outcome == "unknown":
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    if outcome == "undeclared":
        raise LimitsError(UNDECLARED_LIMIT.format(name=name), field="limit")
    if outcome == SLOW:  # pragma: no cover - limits.engine.slots refuses a repeated name first
        raise AssertionError(f"limits_acquire_group answered 'slow' (a repeated limit) for {name!r}")
