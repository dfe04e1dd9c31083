"""The workflow-facing operations: acquire, confirm, release, end a run, tie a slot to its run.

They may run inside a caller's transaction, so that the run layer can record a step in the same
commit as the engine change; nested, they take no savepoint (two statements less): if one raises,
the caller's whole transaction rolls back. On PostgreSQL the common cases are one database call
each (limits.engine.server); the rest, and everything on SQLite, runs the rules of
limits.engine.rules in one transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Q

from limits.engine import keys, rules, server
from limits.engine.errors import (
    BAD_LIMITS,
    BAD_TIMEOUT,
    UNDECLARED_LIMIT,
    UNKNOWN_LIMIT,
    LimitsError,
    check_key,
    check_label,
    check_request,
    check_run_id,
    duration_ms,
)
from limits.engine.results import WHOLE_RUN_SUFFIX, Acquisition, BoxPlace
from limits.engine.rules import DEFAULT_TIMEOUT_MS, RESERVATION_MS, Changes
from limits.models import AuditEvent, Limit, QueueEntry, Slot, is_storable_text


def acquire(
    limit_name: str,
    *,
    run_id: str,
    request: str | None = None,
    label: str | None = None,
    timeout: int | str | None = None,
    key: str | None = None,
) -> Acquisition:
    """Take a slot of `limit_name` for `run_id`, or join the queue.

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
        return acquire_group([limit_name], run_id=run_id, request=request, label=label, timeout=timeout, key=key)
    check_run_id(run_id)
    request = request or uuid.uuid4().hex
    check_request(request)
    label = check_label(label)
    timeout_ms = DEFAULT_TIMEOUT_MS if timeout is None else duration_ms(timeout, BAD_TIMEOUT, "timeout")
    if server.available():
        fast = server.acquire(limit_name, run_id, request, label, timeout_ms, keys.OWED_AFTER_MS)
        if fast is not server.NOT_HANDLED_HERE:
            return fast
    outcome = acquire_group([limit_name], run_id=run_id, request=request, label=label, timeout=timeout_ms)
    return replace(outcome, slots=(), limits=())


def acquire_group(
    limit_names: list[str],
    *,
    run_id: str,
    request: str | None = None,
    label: str | None = None,
    timeout: int | str | None = None,
    key: str | None = None,
    box: BoxPlace | None = None,
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
    """
    check_run_id(run_id)
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
    if server.available() and all(is_storable_text(name) for name in names):
        fast = server.acquire_group(
            names, run_id, request, label, member_keys, timeout_ms, keys.OWED_AFTER_MS, box is not None
        )
        if fast is not server.NOT_HANDLED_HERE:
            return fast
    with transaction.atomic(savepoint=False):
        outcome = _acquire_group_in_transaction(names, run_id, request, label, member_keys, timeout_ms, box is not None)
    if isinstance(outcome, LimitsError):
        raise outcome
    return outcome


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


def _acquire_group_in_transaction(
    names: list[str], run_id: str, request: str, label: str, member_keys: list[str], timeout_ms: int, box: bool
) -> Acquisition | LimitsError:
    """acquire_group in its transaction: `member_keys` is the key of each limit's pool (the run's
    key, the box's own for a BoxPlace); with `box` the last limit is the box bound, and the box
    slot the run executes in is kept, or given back when the run waits."""
    key = member_keys[0]
    previous = _previous_group_outcome(request, names)
    if previous is not None:
        return previous
    found = {limit.name: limit.id for limit in Limit.objects.filter(name__in=names)}
    for name in names:
        if name not in found:
            return LimitsError(UNKNOWN_LIMIT.format(name=name), field="limit")
    locked = keys.lock(found.values())
    mine = [locked[found[name]] for name in names]
    for limit in mine:
        if not limit.declared:
            return LimitsError(UNDECLARED_LIMIT.format(name=limit.name), field="limit")
    now = rules.clock_all(locked)
    size = len(mine)
    kept = _held_slot(run_id, mine[-1]) if box else None
    members = list(zip(mine, member_keys, strict=True))
    needed = members[:-1] if kept is not None else members
    base = keys.box_base() if request.endswith(WHOLE_RUN_SUFFIX) else None  # SPEC 12.3
    if all(
        lim.waiting_count == 0 and lim.room and keys.pools(lim).has_room(k) and keys.whole_run_room(lim, request, base)
        for lim, k in needed
    ):
        slots = [  # a kept box slot is an earlier acquisition's: this one takes `needed` together
            keys.grant_busy(lim, run_id=run_id, request=request, label=label, key=k, group_size=len(needed), now=now)
            for lim, k in needed
        ]
        _save(locked)
        return _busy(names, request, key, [slot.id for slot in slots] + ([kept.id] if kept is not None else []))
    if kept is not None:  # SPEC 12.2: a run that waits gives its box slot back
        Slot.objects.filter(id=kept.id).update(state=Slot.State.RELEASED, freed_at=now, freed_by=BOX_GIVEN_BACK)
        keys.count_slots_freed(kept.limit, [kept])
    deadline = now + timedelta(milliseconds=timeout_ms)
    for limit, k in members:
        keys.join(
            limit,
            run_id=run_id,
            request=request,
            label=label,
            key=k,
            group_size=size,
            now=now,
            deadline=deadline,
            timeout_ms=timeout_ms,
        )
    changes = Changes()
    rules.settle_all(locked, now, changes)
    granted = keys.group_slots(request, locked)
    if granted:
        changes.woken.remove(run_id)
        keys.confirm_group(granted, now, changes)
    _save(locked)
    rules.wake_on_commit(changes.woken)
    if granted:
        by_limit = {slot.limit_id: slot.id for slot in granted}
        return _busy(names, request, key, [by_limit[found[name]] for name in names])
    return Acquisition(
        "waiting", names[0], request, timeout_ms=timeout_ms, deadline=deadline, limits=tuple(names), key=key
    )


BOX_GIVEN_BACK = "wait"  # freed_by of a box slot a run gave back to wait (SPEC 12.2)


def _held_slot(run_id: str, box: Limit) -> Slot | None:
    """The busy box slot this run executes in (read under the box's lock), or None."""
    slot = Slot.objects.filter(run_id=run_id, limit_id=box.id, state=Slot.State.BUSY).first()
    if slot is not None:
        slot.limit = box
    return slot


def _busy(names: list[str], request: str, key: str, slot_ids: list[str]) -> Acquisition:
    return Acquisition(
        "busy",
        names[0],
        request,
        slot_id=slot_ids[0],
        slots=tuple(zip(names, slot_ids, strict=True)),
        limits=tuple(names),
        key=key,
    )


def _save(locked: dict[int, Limit]) -> None:
    for limit in locked.values():
        rules.save_counters(limit)


def _previous_group_outcome(
    request: str, order: list[str] | None = None, *, read_again: bool = True
) -> Acquisition | None:
    """What became of an earlier acquire_group call with this request (confirming its
    reservations together), or None for a new request (or one whose rows the purge took).
    Slots and limits come in `order` (the names as the caller gives them, SPEC 10.1), else in
    the limits' id order. PostgreSQL's home is limits_previous (engine.sql), which reads the
    slots and the entries in one snapshot; here they are two reads, and a grant met between them
    is read again once."""
    if not _request_seen(request):
        return None
    slots = list(Slot.objects.filter(request=request).select_related("limit").order_by("limit_id"))
    live = [slot for slot in slots if slot.is_live]
    if live:
        reserved = next((slot for slot in live if slot.state == Slot.State.RESERVED), None)
        if reserved is not None and server.available():  # confirmed together, or lapsed: one call
            rules.wake_on_commit(server.confirm(reserved.id, RESERVATION_MS, keys.OWED_AFTER_MS)[1])
            return _previous_group_outcome(request, order)
        if reserved is not None:
            locked = keys.lock({slot.limit_id for slot in live})
            now, changes = rules.clock_all(locked), Changes()
            mine = keys.group_slots(request, locked)
            confirmed = keys.confirm_group(mine, now, changes) if mine else False
            if not confirmed:
                rules.settle_all(locked, now, changes)
            _save(locked)
            rules.wake_on_commit(changes.woken)
            return _previous_group_outcome(request, order)
        live = _in_order(live, order)
        names = [slot.limit.name for slot in live]
        return _busy(names, request, live[0].key, [slot.id for slot in live])
    entries = list(QueueEntry.objects.filter(request=request).select_related("limit").order_by("-id"))
    if entries:
        # The latest round: the entries joined together (at first, or when a lapse requeued them).
        latest = entries[: entries[0].group_size]
        names = [e.limit.name for e in _in_order(sorted(latest, key=lambda e: e.limit_id), order)]
        first, states = latest[0], {e.state for e in latest}
        shown, key = tuple(names), first.key
        if states == {QueueEntry.State.WAITING}:
            return Acquisition(
                "waiting",
                names[0],
                request,
                timeout_ms=first.timeout_ms,
                deadline=first.deadline,
                limits=shown,
                key=key,
            )
        if QueueEntry.State.TIMED_OUT in states:
            return Acquisition(
                "timed_out",
                names[0],
                request,
                timeout_ms=first.timeout_ms,
                deadline=first.deadline,
                limits=shown,
                key=key,
            )
        if QueueEntry.State.CANCELLED in states or QueueEntry.State.WAITING in states:
            return Acquisition(
                "cancelled",
                names[0],
                request,
                timeout_ms=first.timeout_ms,
                deadline=first.deadline,
                limits=shown,
                key=key,
            )
        if read_again and not any(slot.queue_entry_id == first.id for slot in slots):
            # granted after the slots were read: read again (once: the purge may have taken the
            # slot before its entry, and then the slots below answer, as limits_previous does)
            return _previous_group_outcome(request, order, read_again=False)
    ever_confirmed = [slot for slot in slots if slot.confirmed_at is not None]
    if ever_confirmed:
        newest = max(slot.granted_at for slot in ever_confirmed)
        kept = _in_order([slot for slot in ever_confirmed if slot.granted_at == newest], order)
        return _busy([slot.limit.name for slot in kept], request, kept[0].key, [slot.id for slot in kept])
    if slots:
        newest = max(slot.granted_at for slot in slots)
        ended = _in_order([slot for slot in slots if slot.granted_at == newest], order)
        names = [slot.limit.name for slot in ended]
        return Acquisition("cancelled", names[0], request, limits=tuple(names), key=ended[0].key)
    return None


def _in_order[R: (Slot, QueueEntry)](rows: list[R], order: list[str] | None) -> list[R]:
    """Rows of one acquisition in the order of the limit names given (the rest after)."""
    if not order:
        return rows
    place = {name: i for i, name in enumerate(order)}
    return sorted(rows, key=lambda row: place.get(row.limit.name, len(place)))


def confirm(slot_id: str) -> bool:
    """Turn a reserved slot busy, if its 2 minutes have not passed. A late confirm lapses the
    reservation as the sweep would (3.6) and returns False. A slot of a group is confirmed with
    the rest of its group (10.2)."""
    if server.available():
        if not is_storable_text(slot_id):
            return False
        confirmed, woken = server.confirm(slot_id, RESERVATION_MS, keys.OWED_AFTER_MS)
        rules.wake_on_commit(woken)
        return confirmed
    with transaction.atomic(savepoint=False):
        found = _locked_slot(slot_id)
        if found is None or found[0].state != Slot.State.RESERVED:
            return False
        slot, locked = found
        now, changes = rules.clock_all(locked), Changes()
        confirmed = keys.confirm_group(keys.group_slots(slot.request, locked), now, changes)
        if not confirmed:
            rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        rules.wake_on_commit(changes.woken)
        return confirmed


def _locked_slot(slot_id: str) -> tuple[Slot, dict[int, Limit]] | None:
    """Lock the slot's limit (with the other limits of its groups, in id order), then read the
    slot: every change of a slot happens under its limit's lock."""
    if not is_storable_text(slot_id):
        return None
    limit_id = Slot.objects.filter(id=slot_id).values_list("limit_id", flat=True).first()
    if limit_id is None:
        return None
    locked = keys.lock([limit_id])
    slot = Slot.objects.select_related("queue_entry").get(id=slot_id)
    slot.limit = locked[limit_id]
    return slot, locked


def release(slot_id: str, *, actor: str | None = None) -> bool:
    """Free a busy or reserved slot and hand the capacity to the head of the queue at once.

    Returns False and changes nothing for a slot already free, taken back, or unknown (safe to
    retry). With an `actor` (an operator) the release is recorded as an audit event. A released
    reservation sends its run back to the end of the queue, keeping its deadline, as a lapse does;
    a reservation of a group sends the whole group back (10.2). A busy slot of a group is
    released on its own (10.1).
    """
    if not isinstance(slot_id, str):
        return False
    if server.available():
        if not is_storable_text(slot_id):
            return False  # no slot id holds a NUL or a lone surrogate; the database could not compare it
        released, woken = server.release(slot_id, RESERVATION_MS, keys.OWED_AFTER_MS, actor)
        rules.wake_on_commit(woken)
        return released
    return release_slots([slot_id], actor=actor)[0]


def release_slots(slot_ids: list[str], *, actor: str | None = None) -> list[bool]:
    """`release` of several slots at once (a with_limits block's, issue 44): every limit they
    belong to locked once, with their groups' other limits, in id order; each slot freed as
    `release` frees it; the freed capacity granted once over them all, so a group waiting for the
    same limits is granted in this transaction. Each answer as `release`'s, in the order given
    (a slot named twice is released once)."""
    ids = [slot_id if isinstance(slot_id, str) and is_storable_text(slot_id) else "" for slot_id in slot_ids]
    if server.available():
        released, woken = server.release_slots(ids, RESERVATION_MS, keys.OWED_AFTER_MS, actor)
        rules.wake_on_commit(woken)
        return released
    with transaction.atomic(savepoint=False):
        limit_ids = set(Slot.objects.filter(id__in=ids).values_list("limit_id", flat=True))
        if not limit_ids:
            return [False] * len(ids)
        locked = keys.lock(limit_ids)
        now, changes = rules.clock_all(locked), Changes()
        answers = []
        for slot_id in ids:
            slot = Slot.objects.select_related("queue_entry").filter(id=slot_id).first()
            if slot is None or not slot.is_live:
                answers.append(False)
                continue
            slot.limit = locked[slot.limit_id]
            if slot.state == Slot.State.RESERVED:  # the run goes back to the queue, a group's whole (10.2)
                reserved = [s for s in keys.group_slots(slot.request, locked) if s.state == Slot.State.RESERVED]
                keys.lapse(reserved, now, changes, state=Slot.State.RELEASED, freed_by=actor or "")
            else:
                Slot.objects.filter(id=slot.id).update(state=Slot.State.RELEASED, freed_at=now, freed_by=actor or "")
                keys.count_slots_freed(slot.limit, [slot])
            if actor is not None:
                rules.audit(
                    slot.limit, actor, AuditEvent.Action.RELEASE, now, slot_id=slot.id, old=slot.state, new="released"
                )
            answers.append(True)
        rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        rules.wake_on_commit(changes.woken)
        return answers


def tie_to_run(slot_id: str, run_id: str) -> bool:
    """Mark a busy slot of `run_id` as held for work inside that run (with_limit, SPEC 2.5): it
    is freed when the run ends, if nothing released it before. Call it in the transaction that
    records the slot for the run, so the slot is never busy for the work without the mark.
    Returns False (and changes nothing) for a slot that is not busy for that run."""
    if server.available():
        return server.tie_to_run(slot_id, run_id)
    return bool(Slot.objects.filter(id=slot_id, run_id=run_id, state=Slot.State.BUSY).update(ends_with_run=True))


def end_run(run_id: str) -> int:
    """A run ended (completed, failed or was cancelled): its waits are cancelled, its unconfirmed
    reservations freed (3.4, 3.7), and the busy slots held for work inside it (with_limit,
    `tie_to_run`) freed (2.5); the capacity goes to the next runs. Other busy slots it holds are
    untouched: they belong to the work (2.7). Returns how many entries and slots it ended.

    Never: a slot tied to a run stays busy or reserved after that run ended (`limits verify`
    checks it from the rows)."""
    check_run_id(run_id)
    if server.available():
        ended, woken = server.end_run(run_id, RESERVATION_MS, keys.OWED_AFTER_MS)
        rules.wake_on_commit(woken)
        return ended
    ended = 0
    with transaction.atomic(savepoint=False):
        limit_ids = _limits_ending_with(run_id)
        if not limit_ids:
            return 0
        changes = Changes()
        waiting = QueueEntry.objects.filter(run_id=run_id, state=QueueEntry.State.WAITING)
        ending_slots = Slot.objects.filter(run_id=run_id).filter(
            Q(state=Slot.State.RESERVED) | Q(state=Slot.State.BUSY, ends_with_run=True)
        )
        locked = keys.lock(limit_ids)
        now = rules.clock_all(locked)
        for limit_id in sorted(limit_ids):
            limit = locked[limit_id]
            cancelled = list(waiting.filter(limit=limit))
            if cancelled:
                QueueEntry.objects.filter(id__in=[e.id for e in cancelled]).update(
                    state=QueueEntry.State.CANCELLED, finished_at=now
                )
                keys.count_entries(limit, cancelled, waiting=-1)
            freed = list(ending_slots.filter(limit=limit))
            if freed:
                Slot.objects.filter(id__in=[slot.id for slot in freed]).update(state=Slot.State.RUN_ENDED, freed_at=now)
                keys.count_slots_freed(limit, freed)
            ended += len(cancelled) + len(freed)
        rules.settle_all(locked, now, changes)
        rules.save_all(locked)
        rules.wake_on_commit(changes.woken)
    return ended


# The limits of `waiting` and `ending_slots` in end_run, in one raw round trip: every run's end
# asks it and most runs end holding nothing, and the ORM's two querysets and their UNION cost
# ~1 ms of Python a run (issue 17: measured 1.20 ms of CPU for end_run against ~0.2 raw).
_ENDING_WITH_RUN = f"""
    SELECT limit_id FROM {QueueEntry._meta.db_table} WHERE run_id = %s AND state = 'waiting'
    UNION
    SELECT limit_id FROM {Slot._meta.db_table}
    WHERE run_id = %s AND (state = 'reserved' OR (state = 'busy' AND ends_with_run))"""


def _limits_ending_with(run_id: str) -> set[int]:
    """The ids of the limits where `run_id` waits, holds a reservation, or holds a busy slot tied
    to the run (end_run's `waiting` and `ending_slots`, which must say the same)."""
    with connection.cursor() as cursor:
        cursor.execute(_ENDING_WITH_RUN, [run_id, run_id])
        return {limit_id for (limit_id,) in cursor.fetchall()}


_REQUEST_SEEN = f"""
    SELECT 1 FROM {Slot._meta.db_table} WHERE request = %s
    UNION ALL SELECT 1 FROM {QueueEntry._meta.db_table} WHERE request = %s
    LIMIT 1"""


def _request_seen(request: str) -> bool:
    """One indexed probe, raw: most acquire calls are new, and the ORM's two joined reads that
    _previous_group_outcome needs otherwise cost a third of an uncontended cycle."""
    with connection.cursor() as cursor:
        cursor.execute(_REQUEST_SEEN, [request, request])
        return cursor.fetchone() is not None
