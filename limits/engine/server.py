"""The PostgreSQL fast path: the hot operations as database functions (limits/sql/engine.sql),
one round trip each, the limit's row lock held inside the server only.

Each function does the whole operation, in every case: keys, groups, owed runs, confirm, lapse,
requeue, an earlier request's outcome (limits_previous), operators' changes, deploys, the sweep,
and the refusals (an unknown or undeclared limit is answered, and worded here as the Python track
words it). What the acquire functions still answer NOT_HANDLED_HERE, before changing anything, is
a list of names that repeats a limit, which limits.engine.slots refuses before the call. The
Python rules of limits.engine are the readable definition and SQLite's track; the SQL is
PostgreSQL's, held to the same tests (tests/services and the model test run on both databases;
tests/services/test_sql_file.py holds the database to the file).

Outside a caller's transaction a call is its own statement in autocommit: one round trip with
its commit.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from limits.engine.errors import UNDECLARED_LIMIT, UNKNOWN_LIMIT, LimitsError
from limits.engine.results import RESERVATION_MS, Acquisition
from limits.models import Limit
from limits.signals import runs_woken
from stackbone.plumbing import clock

SLOW = "slow"  # the functions' answer for a case they leave to the Python rules


class Answer(enum.Enum):
    NOT_HANDLED_HERE = "not handled here: go on with the Python rules"


NOT_HANDLED_HERE = Answer.NOT_HANDLED_HERE


def available() -> bool:
    """Whether the hot operations run as database functions (PostgreSQL)."""
    return connection.vendor == "postgresql"


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


def acquire(
    limit_name: str, run_id: str, request: str, label: str, timeout_ms: int, owed_after_ms: int
) -> Acquisition | Answer:
    """limits_acquire: a new request granted at once or queued behind full capacity, or a request
    that holds a live slot (a reservation in time is confirmed); on a limit that is not plain, or
    with a settle due, limits_acquire_group's answer from the same call (the runs its grant woke
    are woken on commit), and an earlier request's outcome (limits_previous: `answer_timeout_ms` its
    timeout). An unknown or undeclared name raises the Python track's LimitsError."""
    outcome, name, slot_id, deadline, woken, answer_timeout_ms, answer_key = _call(
        "SELECT outcome, limit_name, slot_id, deadline, woken, answer_timeout_ms, answer_key"
        " FROM limits_acquire(%s, %s, %s, %s, %s, %s, %s, %s)",
        [limit_name, run_id, request, label, timeout_ms, clock.param(), RESERVATION_MS, owed_after_ms],
    )
    if outcome == SLOW:
        return NOT_HANDLED_HERE
    _refuse(outcome, name)
    wake_on_commit(woken)
    key = answer_key or ""  # an earlier request's (a group's, a key's): the rows say
    if outcome == "busy":
        return Acquisition("busy", name, request, slot_id=slot_id, key=key)
    if outcome == "waiting" and answer_timeout_ms is None:  # a new request's wait
        answer_timeout_ms = timeout_ms
    return Acquisition(outcome, name, request, timeout_ms=answer_timeout_ms, deadline=deadline, key=key)


def tie_to_run(slot_id: str, run_id: str) -> bool:
    """limits_tie_to_run: mark a busy slot of the run as freed with it (False for a slot not busy
    for that run, including one freed while the call waited for its row)."""
    (tied,) = _call("SELECT limits_tie_to_run(%s, %s)", [slot_id, run_id])
    return bool(tied)


def confirm(slot_id: str, reservation_ms: int, owed_after_ms: int) -> tuple[bool, list[str]]:
    """limits_confirm_or_lapse: (True, []) for reservations confirmed in time (a group's together);
    (False, the runs its grant woke) for late ones, which lapse, or a slot not reserved."""
    outcome, woken = _call(
        "SELECT outcome, woken FROM limits_confirm_or_lapse(%s, %s, %s, %s)",
        [slot_id, clock.param(), reservation_ms, owed_after_ms],
    )
    return outcome == "busy", woken


def release(slot_id: str, reservation_ms: int, owed_after_ms: int, actor: str | None = None) -> tuple[bool, list[str]]:
    """limits_release of a busy or reserved slot (a reservation's run goes back to the queue, a
    group's whole), audited when an operator (`actor`) releases it, with the grant of the freed
    capacity on every limit it locks: (released, the runs its settle woke)."""
    outcome, woken = _call(
        "SELECT outcome, woken FROM limits_release(%s, %s, %s, %s, %s)",
        [slot_id, clock.param(), reservation_ms, owed_after_ms, actor],
    )
    return outcome == "released", woken


def release_slots(
    slot_ids: list[str], reservation_ms: int, owed_after_ms: int, actor: str | None = None
) -> tuple[list[bool], list[str]]:
    """limits_release_slots: several slots freed under one set of locks and one grant (a
    with_limits block's release): (released, each in the order given; the runs to wake)."""
    released, woken = _call(
        "SELECT released, woken FROM limits_release_slots(%s::text[], %s, %s, %s, %s)",
        [slot_ids, clock.param(), reservation_ms, owed_after_ms, actor],
    )
    return list(released), woken


def end_run(run_id: str, reservation_ms: int, owed_after_ms: int) -> tuple[int, list[str]]:
    """limits_end_run: the run's waits cancelled, its reservations and tied busy slots freed, the
    capacity granted: (entries and slots ended, the runs to wake)."""
    ended, woken = _call(
        "SELECT ended, woken FROM limits_end_run(%s, %s, %s, %s)",
        [run_id, clock.param(), reservation_ms, owed_after_ms],
    )
    return ended, woken


def sweep(reservation_ms: int, owed_after_ms: int) -> tuple[int, int, int, int, int, list[str]]:
    """The procedure limits_sweep: every limit with work swept (limits_sweep_limit, under its
    locks and its groups' other limits'), one statement whatever their number. In autocommit
    each limit's sweep commits before the next; in a transaction (a test's: the sweeper refuses
    any other, as SQLite's durable transactions do) the caller's transaction holds them all.
    (limits swept, expired, lapsed, timed out, granted, the runs to wake after the commit)."""
    limits, expired, lapsed, timed_out, granted, woken = _call(
        "CALL limits_sweep(%s, %s, %s, %s, NULL, NULL, NULL, NULL, NULL, NULL)",
        [clock.param(), reservation_ms, owed_after_ms, connection.get_autocommit()],
    )
    return limits, expired, lapsed, timed_out, granted, woken


def operate(
    name: str,
    action: str,
    *,
    value: int | None = None,
    key: str | None = None,
    paused: bool = False,
    share: str | None = None,
    base_given: bool = False,
    burst: float | None = None,
    burst_given: bool = False,
    actor: str | None,
    reservation_ms: int,
    owed_after_ms: int,
) -> tuple[str, list[str], int | None]:
    """limits_operate: an operator's change of a limit, with its grant and audit row. `action`
    'capacity', 'per_key' (with `key`: that key's pool size), 'max_hold' (ms), 'weight' or 'min'
    (with `key`) sets `value`, None resets it; 'share' sets `share` ('fifo', 'fair'; None: the
    declared one); 'pause' pauses (`paused` True) or resumes; 'box' sets the box's base (`value`,
    when `base_given`) and burst (when `burst_given`). (outcome, the runs to wake, the capacity in
    force): 'done'; 'same' for a pause that changes nothing; 'unknown' for no such limit (for
    'box': no declared box); 'bound' for a max hold of a workflow's own bound; 'bad_per_key' for a
    per_key outside 1..that capacity, 'bad_min' for a min outside 0..that capacity; 'bad_ceiling'
    for a box whose base x burst would pass the largest capacity (that ceiling). Nothing changed
    but for 'done'."""
    outcome, woken, capacity = _call(
        "SELECT outcome, woken, capacity FROM limits_operate(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            name,
            action,
            value,
            key,
            paused,
            actor,
            clock.param(),
            reservation_ms,
            owed_after_ms,
            share,
            base_given,
            burst,
            burst_given,
        ],
    )
    return outcome, woken, capacity


def sync_workspace(
    limits: list[tuple[str, int, int, int | None, str]],
    box: tuple[int, float, int] | None,
    no_max_hold_ms: int,
    actor: str,
    reservation_ms: int,
    owed_after_ms: int,
) -> tuple[str, str | None, list[str], list[str], list[str], list[str]]:
    """limits_sync_workspace: a deploy of the workspace config in one call. `limits`: (name,
    capacity, max hold ms, per_key, share) in the order the report lists them; `box`: (base,
    burst, ceiling), or None. (outcome, the name refused, created, updated, undeclared, the runs
    to wake): 'done', or 'bound_taken' / 'box_taken' with nothing changed."""
    names, capacities, max_holds, per_keys, shares = ([row[i] for row in limits] for i in range(5))
    base, burst, ceiling = box if box is not None else (None, None, None)
    row = _call(
        "SELECT outcome, bad_name, created, updated, undeclared, woken FROM limits_sync_workspace("
        "%s::text[], %s::integer[], %s::bigint[], %s::integer[], %s::text[], %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            names,
            capacities,
            max_holds,
            per_keys,
            shares,
            base,
            burst,
            ceiling,
            no_max_hold_ms,
            actor,
            clock.param(),
            reservation_ms,
            owed_after_ms,
        ],
    )
    outcome, bad_name, created, updated, undeclared, woken = row
    return outcome, bad_name, created, updated, undeclared, woken


def sync_bounds(
    bounds: list[tuple[str, int, int | None]],
    no_max_hold_ms: int,
    only: bool,
    actor: str,
    reservation_ms: int,
    owed_after_ms: int,
) -> tuple[str, str | None, list[str], list[str], list[str], list[str]]:
    """limits_sync_bounds: the workflows' own bounds synced in one call. `bounds`: (name,
    capacity, per_key) in the order the report lists them; `only`: those bounds alone. As
    sync_workspace answers ('bound_taken' for a name a limit of another kind holds)."""
    names = [name for name, _, _ in bounds]
    capacities = [capacity for _, capacity, _ in bounds]
    per_keys = [per_key for _, _, per_key in bounds]
    row = _call(
        "SELECT outcome, bad_name, created, updated, undeclared, woken FROM limits_sync_bounds("
        "%s::text[], %s::integer[], %s::integer[], %s, %s, %s, %s, %s, %s)",
        [names, capacities, per_keys, no_max_hold_ms, only, actor, clock.param(), reservation_ms, owed_after_ms],
    )
    outcome, bad_name, created, updated, undeclared, woken = row
    return outcome, bad_name, created, updated, undeclared, woken


def grant(limit_ids: list[int], now: datetime, reservation_ms: int, owed_after_ms: int) -> tuple[int, int, list[str]]:
    """limits_grant, under the caller's locks of every limit in `limit_ids` (keys and groups):
    (entries timed out, slots granted, runs to wake). It reads the counters from the rows and
    writes them back."""
    timed_out, granted, woken = _call(
        "SELECT * FROM limits_grant(%s, %s, %s, %s)", [limit_ids, now, reservation_ms, owed_after_ms]
    )
    return timed_out, granted, woken


def acquire_group(
    names: list[str],
    run_id: str,
    request: str,
    label: str,
    member_keys: list[str],
    timeout_ms: int,
    owed_after_ms: int,
    box: bool = False,
) -> Acquisition | Answer:
    """limits_acquire_group: a new request, with a key or several limits, granted busy slots of
    every limit at once when nobody waits and each has room, or joining every queue (granted and
    confirmed at once if the grant reaches it, else waiting), or an earlier request's outcome
    (limits_previous: its limits in the order given, its key and timeout). An unknown or
    undeclared name raises the Python track's LimitsError. The other runs the grant
    woke are woken on commit. `member_keys`: each limit's key pool; `box`: the last limit is the
    box bound (limits.engine.slots.acquire_group)."""
    key = member_keys[0]
    outcome, slot_ids, deadline, woken, bad_name, answer_names, answer_key, answer_timeout_ms = _call(
        "SELECT outcome, slot_ids, deadline, woken, bad_name, answer_names, answer_key, answer_timeout_ms"
        " FROM limits_acquire_group(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [names, run_id, request, label, member_keys, timeout_ms, clock.param(), RESERVATION_MS, owed_after_ms, box],
    )
    if outcome == SLOW:
        return NOT_HANDLED_HERE
    _refuse(outcome, bad_name)
    wake_on_commit(woken)
    if answer_names is not None:  # an earlier request: what became of it (limits_previous)
        names, timeout_ms = answer_names, answer_timeout_ms
    if answer_key is not None:  # an earlier request's key, as its rows have it
        key = answer_key
    if outcome != "busy":
        return Acquisition(
            outcome, names[0], request, timeout_ms=timeout_ms, deadline=deadline, limits=tuple(names), key=key
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
) -> tuple[str | None, str | None, list[str], list[str], datetime, list[str]]:
    """limits_start_runs: the runs created and their start acquisitions taken in order, in one
    call (issue 44). (problem, bad_name, statuses, bounds, created, woken): a problem ('unknown',
    'undeclared', 'slow') means nothing was written. The runs it woke are not woken here."""
    from psycopg.types.json import Jsonb  # psycopg: PostgreSQL only

    row = _call(
        "SELECT problem, bad_name, statuses, bounds, created, woken FROM limits_start_runs("
        "%s::text[], %s, %s::jsonb[], %s::text[], %s::text[], %s::text[], %s, %s, %s, %s, %s)",
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
        ],
    )
    problem, bad_name, statuses, bounds, created, woken = row
    return problem, bad_name, statuses or [], bounds or [], created, woken or []


def _refuse(outcome: str, name: str) -> None:
    """The acquire functions' refusals, worded as the Python track words them (the function gave
    its locks back and changed nothing)."""
    if outcome == "unknown":
        raise LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    if outcome == "undeclared":
        raise LimitsError(UNDECLARED_LIMIT.format(name=name), field="limit")


def wake_on_commit(run_ids: list[str]) -> None:
    """limits.engine.rules.wake_on_commit (which imports this module)."""
    if run_ids:
        woken = list(dict.fromkeys(run_ids))
        transaction.on_commit(lambda: runs_woken.send(sender=Limit, run_ids=woken))
