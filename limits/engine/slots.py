"""The workflow-facing operations: acquire, confirm, release, end a run, tie a slot to its run.

Each checks what the caller passes in, then the database's engine does it (limits.engine.engines:
on PostgreSQL one call of a function of limits/sql/engine.sql; elsewhere the Python engine,
limits.engine.python). They may run inside a caller's transaction, so that the run layer can
record a step in the same commit as the engine change; nested, they take no savepoint (two
statements less): if one raises, the caller's whole transaction rolls back.
"""

from __future__ import annotations

import uuid

from limits.engine import keys
from limits.engine.engines import engine
from limits.engine.errors import (
    BAD_LIMITS,
    BAD_TIMEOUT,
    LimitsError,
    check_key,
    check_label,
    check_on_full,
    check_request,
    check_run_id,
    duration_ms,
)
from limits.engine.results import Acquisition, BoxPlace
from limits.engine.rules import DEFAULT_TIMEOUT_MS
from limits.models import is_storable_text


def acquire(
    limit_name: str,
    *,
    run_id: str,
    request: str | None = None,
    label: str | None = None,
    timeout: int | str | None = None,
    key: str | None = None,
    on_full: str | None = None,
) -> Acquisition:
    """Take a slot of `limit_name` for `run_id`, or join the queue (or, with on_full 'skip' or
    a queue at its cap, SPEC 14, be answered 'skipped' or 'refused' at once; with on_full
    'replace', join in the place of the key's runs waiting, which are answered 'replaced').

    `request` names this acquire call (the run layer passes a key that is stable across replays):
    calling again with the same request returns what became of it instead of acquiring twice, and
    confirms a slot reserved for it. Steps:

    1. Look up the request: a live slot (confirm it if reserved), a waiting entry, or an ended wait.
    2. Otherwise lock the limit. If no run waits and busy + reserved < capacity, grant a busy slot.
    3. Otherwise join the end of the queue with deadline = now + timeout (default 24 h). If there
       is free capacity (the runs ahead are all past their deadline), settle the limit: those
       time out and the head is granted, which may be this very request: confirm it at once.

    It is `acquire_group` with one limit (the Acquisition without its `slots` and `limits`,
    which name that one limit; with a `key`, SPEC 9, they are kept, as they always were).
    """
    if key is not None:
        return acquire_group(
            [limit_name], run_id=run_id, request=request, label=label, timeout=timeout, key=key, on_full=on_full
        )
    check_run_id(run_id)
    on_full = check_on_full(on_full)
    request = request or uuid.uuid4().hex
    check_request(request)
    label = check_label(label)
    timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None else duration_ms(timeout, BAD_TIMEOUT, "timeout")
    if not isinstance(limit_name, str):
        raise LimitsError(BAD_LIMITS, field="limits")
    return engine().acquire(limit_name, run_id, request, label, timeout_ms, on_full)


def acquire_group(
    limit_names: list[str],
    *,
    run_id: str,
    request: str | None = None,
    label: str | None = None,
    timeout: int | str | None = None,
    key: str | None = None,
    box: BoxPlace | None = None,
    on_full: str | None = None,
) -> Acquisition:
    """Take one slot of each of 1 to 3 distinct limits, all or nothing (SPEC 10), with a key's
    pool on each (SPEC 9), or join every queue. The answer's `slots` are (limit, slot id) in the
    order given. Like `acquire`, a second call with the same request answers what became of it
    (confirming the reservations together).

    With `box` (SPEC 12.2, the run layer passes it) the box bound is one more limit of the group,
    last in `slots`, from its own key's pool: a run waits for its slots and a box slot together.
    A run that executes in a box slot (`box.held`) keeps it when the other limits have room at
    once; else it gives it back in this transaction and waits holding nothing.

    1. Lock the limits and their waiting groups' other limits, in id order (limits.engine.keys).
    2. If no run waits on any of them and each has room in its total and the key's pool, grant
       busy slots at once.
    3. Otherwise join every queue and settle: the run may be granted at once (then confirmed),
       or wait holding none of its slots.
    With on_full 'skip' (this call's, else the strictest of its limits', SPEC 14.7) or a cap on a
    queue (14.5), step 3 settles first and grants this run what room is left if it fits, else
    answers 'skipped' or 'refused' at once, queued nowhere (the box slot a run executes in kept).
    With on_full 'replace' (14.3) a run that cannot be granted at once takes the place of the
    key's runs waiting for the same limits (and pools), which leave the queue as 'replaced'.
    """
    check_run_id(run_id)
    on_full = check_on_full(on_full)
    names = _check_limits(limit_names, none_ok=box is not None)  # a run may need only the box
    request = request or uuid.uuid4().hex
    check_request(request)
    label = check_label(label)
    key = "" if key is None else check_key(key)
    timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None else duration_ms(timeout, BAD_TIMEOUT, "timeout")
    member_keys = [key] * len(names)
    if box is not None:
        if box.limit in names:
            raise LimitsError(BAD_LIMITS, field="limits")
        names, member_keys = [*names, box.limit], [*member_keys, check_key(box.key)]
    return engine().acquire_group(names, run_id, request, label, member_keys, timeout_ms, box is not None, on_full)


def _check_limits(limit_names: object, *, none_ok: bool = False) -> list[str]:
    if (
        isinstance(limit_names, str)
        or not isinstance(limit_names, list | tuple)
        or not (0 if none_ok else 1) <= len(limit_names) <= keys.MAX_GROUP
        or not all(isinstance(name, str) for name in limit_names)
        or len(set(limit_names)) != len(limit_names)
    ):
        raise LimitsError(BAD_LIMITS, field="limits")
    return list(limit_names)


def confirm(slot_id: str) -> bool:
    """Turn a reserved slot busy, if its 2 minutes have not passed. A late confirm lapses the
    reservation as the sweep would (3.6) and returns False. A slot of a group is confirmed with
    the rest of its group (10.2)."""
    if not is_storable_text(slot_id):
        return False
    return engine().confirm(slot_id)


def release(slot_id: str, *, actor: str | None = None) -> bool:
    """Free a busy or reserved slot and hand the capacity to the head of the queue at once.

    Returns False and changes nothing for a slot already free, taken back, or unknown (safe to
    retry). With an `actor` (an operator) the release is recorded as an audit event. A released
    reservation sends its run back to the end of the queue, keeping its deadline, as a lapse does;
    a reservation of a group sends the whole group back (10.2). A busy slot of a group is
    released on its own (10.1).
    """
    if not is_storable_text(slot_id):
        return False  # no slot id holds a NUL or a lone surrogate; the database could not compare it
    return engine().release(slot_id, actor)


def release_slots(slot_ids: list[str], *, actor: str | None = None) -> list[bool]:
    """`release` of several slots at once (a with_limits block's, issue 44): every limit they
    belong to locked once, with their groups' other limits, in id order; each slot freed as
    `release` frees it; the freed capacity granted once over them all, so a group waiting for the
    same limits is granted in this transaction. Each answer as `release`'s, in the order given
    (a slot named twice is released once)."""
    ids = [slot_id if isinstance(slot_id, str) and is_storable_text(slot_id) else "" for slot_id in slot_ids]
    return engine().release_slots(ids, actor)


def tie_to_run(slot_id: str, run_id: str) -> bool:
    """Mark a busy slot of `run_id` as held for work inside that run (with_limit, SPEC 2.5): it
    is freed when the run ends, if nothing released it before. Call it in the transaction that
    records the slot for the run, so the slot is never busy for the work without the mark.
    Returns False (and changes nothing) for a slot that is not busy for that run."""
    return engine().tie_to_run(slot_id, run_id)


def end_run(run_id: str) -> int:
    """A run ended (completed, failed or was cancelled): its waits are cancelled, its unconfirmed
    reservations freed (3.4, 3.7), and the busy slots held for work inside it (with_limit,
    `tie_to_run`) freed (2.5); the capacity goes to the next runs. Other busy slots it holds are
    untouched: they belong to the work (2.7). Returns how many entries and slots it ended.

    Never: a slot tied to a run stays busy or reserved after that run ended (`limits verify`
    checks it from the rows)."""
    check_run_id(run_id)
    return engine().end_run(run_id)
