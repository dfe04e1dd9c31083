"""The Python engine (limits.engine.engines.Engine): the Python track, the readable definition of
every operation, and SQLite's engine (any database but PostgreSQL runs it).

Each operation is one transaction that locks the limits it touches with the other limits of their
groups, in id order (limits.engine.keys.lock), reads the clock after the locks (rules.clock_all),
changes the rows and the counters in memory, hands the free capacity to the queues
(rules.settle_all: the grant rules of limits.engine.grant), writes the counters once
(rules.save_all) and wakes the runs it granted after the commit (rules.wake_on_commit). Here: the
workflow-facing operations and the sweep's steps 1 and 2; the operator actions and deploys are in
limits.engine.python_operators. The slot operations may run inside a caller's transaction and
take no savepoint there (limits.engine.slots says why).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, Q

from limits.config import CANCEL_RUNNING, strictest_on_full
from limits.engine import full, keys, rules
from limits.engine.errors import UNDECLARED_LIMIT, UNKNOWN_LIMIT, LimitsError
from limits.engine.python_operators import OperatorActions
from limits.engine.results import WHOLE_RUN_SUFFIX, Acquisition, SweepReport
from limits.engine.rules import EFFECTIVE_CAPACITY, HAS_FREE_CAPACITY, SWEEP_ACTOR, Changes
from limits.models import AuditEvent, Limit, QueueEntry, Slot, is_storable_text


class PythonEngine(OperatorActions):
    """limits.engine.engines.Engine in Python (the operator actions and deploys from
    OperatorActions)."""

    starts_runs_in_one_call = False  # limits.runs starts them run by run, through acquire_group

    def acquire(
        self, limit_name: str, run_id: str, request: str, label: str, timeout_ms: int, on_full: str | None = None
    ) -> Acquisition:
        """acquire_group with one limit: the Acquisition without its `slots` and `limits`."""
        outcome = self.acquire_group([limit_name], run_id, request, label, [""], timeout_ms, False, on_full)
        return replace(outcome, slots=(), limits=())

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
        with transaction.atomic(savepoint=False):
            outcome = _acquire_group_in_transaction(
                names, run_id, request, label, member_keys, timeout_ms, box, on_full
            )
        if isinstance(outcome, LimitsError):  # raised after the block: a refusal changed nothing
            raise outcome
        return outcome

    def confirm(self, slot_id: str) -> bool:
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

    def release(self, slot_id: str, actor: str | None) -> bool:
        return self.release_slots([slot_id], actor)[0]

    def release_slots(self, slot_ids: list[str], actor: str | None) -> list[bool]:
        with transaction.atomic(savepoint=False):
            limit_ids = set(Slot.objects.filter(id__in=slot_ids).values_list("limit_id", flat=True))
            if not limit_ids:
                return [False] * len(slot_ids)
            locked = keys.lock(limit_ids)
            now, changes = rules.clock_all(locked), Changes()
            answers = []
            for slot_id in slot_ids:
                slot = Slot.objects.select_related("queue_entry").filter(id=slot_id).first()
                if slot is None or not slot.is_live:
                    answers.append(False)
                    continue
                slot.limit = locked[slot.limit_id]
                if slot.state == Slot.State.RESERVED:  # the run goes back to the queue, a group's whole (10.2)
                    reserved = [s for s in keys.group_slots(slot.request, locked) if s.state == Slot.State.RESERVED]
                    keys.lapse(reserved, now, changes, state=Slot.State.RELEASED, freed_by=actor or "")
                else:
                    Slot.objects.filter(id=slot.id).update(
                        state=Slot.State.RELEASED, freed_at=now, freed_by=actor or ""
                    )
                    keys.count_slots_freed(slot.limit, [slot])
                if actor is not None:
                    rules.audit(
                        slot.limit,
                        actor,
                        AuditEvent.Action.RELEASE,
                        now,
                        slot_id=slot.id,
                        old=slot.state,
                        new="released",
                    )
                answers.append(True)
            rules.settle_save_wake(locked, now, changes)
            return answers

    def tie_to_run(self, slot_id: str, run_id: str) -> bool:
        return bool(Slot.objects.filter(id=slot_id, run_id=run_id, state=Slot.State.BUSY).update(ends_with_run=True))

    def end_run(self, run_id: str) -> int:
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
                    Slot.objects.filter(id__in=[slot.id for slot in freed]).update(
                        state=Slot.State.RUN_ENDED, freed_at=now
                    )
                    keys.count_slots_freed(limit, freed)
                ended += len(cancelled) + len(freed)
            rules.settle_save_wake(locked, now, changes)
        return ended

    def sweep(self, now: datetime, report: SweepReport) -> None:
        """The sweep's steps 1 and 2: the limits with work found by four queries, then each swept
        in its own transaction under its locks."""
        limit_ids = set(
            Slot.objects.filter(state=Slot.State.BUSY, expires_at__lte=now)
            .values_list("limit_id", flat=True)
            .distinct()
        )
        limit_ids |= set(
            Slot.objects.filter(state=Slot.State.RESERVED, reserved_until__lte=now)
            .values_list("limit_id", flat=True)
            .distinct()
        )
        limit_ids |= set(
            QueueEntry.objects.filter(state=QueueEntry.State.WAITING, deadline__lte=now)
            .values_list("limit_id", flat=True)
            .distinct()
        )
        limit_ids |= set(
            Limit.objects.filter(waiting_count__gt=0)
            .alias(effective_capacity=EFFECTIVE_CAPACITY)
            .filter(**HAS_FREE_CAPACITY)
            .values_list("id", flat=True)
        )
        for limit_id in sorted(limit_ids):
            with transaction.atomic(durable=True):
                locked = keys.lock([limit_id])
                limit, changes = locked[limit_id], Changes()
                now = rules.clock_all(locked)
                # A workflow's own bound has no max hold (SPEC 11.4): its slots last as long as the run.
                past_expiry = Q(state=Slot.State.BUSY, expires_at__lte=now)
                if limit.keyed_busy_count and not limit.is_workflow_bound:
                    keys.keyed_expired(limit, past_expiry)
                expired = 0
                if not limit.is_workflow_bound:
                    expired = Slot.objects.filter(past_expiry, limit=limit).update(
                        state=Slot.State.EXPIRED, freed_at=now, freed_by=SWEEP_ACTOR
                    )
                if expired:
                    limit.busy_count -= expired
                    rules.audit(limit, SWEEP_ACTOR, AuditEvent.Action.EXPIRE, now, old="", new=f"{expired} slot(s)")
                lapsed = list(
                    Slot.objects.filter(limit=limit, state=Slot.State.RESERVED, reserved_until__lte=now)
                    .select_related("queue_entry")
                    .order_by("queue_entry__position")
                )
                lapsing = [slot for slot in lapsed if slot.group_size == 1]
                for slot in lapsing:
                    slot.limit = limit
                for request in dict.fromkeys(slot.request for slot in lapsed if slot.group_size > 1):
                    # the whole group goes back together (10.2)
                    lapsing += [slot for slot in keys.group_slots(request, locked) if slot.state == Slot.State.RESERVED]
                if lapsing:
                    keys.lapse(lapsing, now, changes)
                rules.settle_save_wake(locked, now, changes)  # times out the waits past their deadline first
            report.limits += 1
            report.expired += expired
            report.lapsed += changes.lapsed
            report.timed_out += changes.timed_out
            report.granted += changes.granted


def _acquire_group_in_transaction(
    names: list[str],
    run_id: str,
    request: str,
    label: str,
    member_keys: list[str],
    timeout_ms: int,
    box: bool,
    on_full: str | None,
) -> Acquisition | LimitsError:
    """acquire_group in its transaction: `member_keys` is the key of each limit's pool (the run's
    key, the box's own for a BoxPlace); with `box` the last limit is the box bound, and the box
    slot the run executes in is kept, or given back when the run waits. `on_full`: this call's
    (SPEC 14.1), None for the strictest of the limits' own."""
    key = member_keys[0]
    previous = _previous_group_outcome(request, names)
    if previous is not None:
        return previous
    storable = [name for name in names if is_storable_text(name)]  # no limit bears another name
    found = {limit.name: limit.id for limit in Limit.objects.filter(name__in=storable)}
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
    changes = Changes()
    free = all(
        lim.waiting_count == 0 and lim.room and keys.pools(lim).has_room(k) and keys.whole_run_room(lim, request, base)
        for lim, k in needed
    )
    # SPEC 14.2, 14.3, 14.5, 14.7: skip or replace (the strictest on_full), or a queue's cap; a
    # run's start too (limits.runs.bounds ends it 'skipped'; the queued runs it replaces end
    # 'replaced': full.end_replaced_starts)
    replaced: list[QueueEntry] = []
    replacing = False  # SPEC 14.3: its entries join with on_full 'replace'
    if not free:
        on_full = on_full or strictest_on_full(limit.on_full for limit, _ in members)
        if on_full == CANCEL_RUNNING:  # SPEC 14.4: it waits; the start's cancel is limits.runs.bounds'
            on_full = "wait"
        replacing = on_full == "replace"
        answered = _answered_at_once(members, needed, locked, request, base, now, changes, on_full)
        if isinstance(answered, Acquisition):
            rules.save_all(locked)
            rules.wake_on_commit(changes.woken)
            return replace(answered, request=request, limits=tuple(names), key=key, timeout_ms=timeout_ms)
        replaced = answered or []
    if free:
        slots = [  # a kept box slot is an earlier acquisition's: this one takes `needed` together
            keys.grant_busy(lim, run_id=run_id, request=request, label=label, key=k, group_size=len(needed), now=now)
            for lim, k in needed
        ]
        rules.save_all(locked)
        rules.wake_on_commit(changes.woken)
        return _busy(names, request, key, [slot.id for slot in slots] + ([kept.id] if kept is not None else []))
    if kept is not None:  # SPEC 12.2: a run that waits gives its box slot back
        Slot.objects.filter(id=kept.id).update(state=Slot.State.RELEASED, freed_at=now, freed_by=BOX_GIVEN_BACK)
        keys.count_slots_freed(kept.limit, [kept])
    deadline = now + timedelta(milliseconds=timeout_ms)
    for limit, k in members:
        placed = full.take_place(  # SPEC 14.3: in the oldest replaced one's place, if any here
            limit,
            replaced,
            run_id=run_id,
            request=request,
            label=label,
            now=now,
            deadline=deadline,
            timeout_ms=timeout_ms,
        )
        if placed is None:
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
                replacing=replacing,
            )
    full.wake_replaced(replaced, changes)
    rules.settle_all(locked, now, changes)
    granted = keys.group_slots(request, locked)
    if not granted and replacing and not replaced:
        # SPEC 14.3: the room left fitted it before it joined, yet the grant did not reach it (it
        # gave back the box slot it executed in, 12.2, and an older run took it): it replaces now
        late = full.replaceable(members, request)
        if late:
            full.wake_replaced(late, changes)
            for limit, _ in members:
                full.swap_place(limit, late, request, now)
            rules.settle_all(locked, now, changes)
            granted = keys.group_slots(request, locked)
        replaced = late
    if replaced:  # SPEC 14.3: the queued runs whose start it replaced end 'replaced', never started
        full.end_replaced_starts(replaced, members, run_id=run_id, request=request, base=base, now=now)
    if granted:
        changes.woken.remove(run_id)
        keys.confirm_group(granted, now, changes)
    rules.save_all(locked)
    rules.wake_on_commit(changes.woken)
    if granted:
        by_limit = {slot.limit_id: slot.id for slot in granted}
        return _busy(names, request, key, [by_limit[found[name]] for name in names])
    return Acquisition(
        "waiting", names[0], request, timeout_ms=timeout_ms, deadline=deadline, limits=tuple(names), key=key
    )


def _answered_at_once(
    members: list[tuple[Limit, str]],
    needed: list[tuple[Limit, str]],
    locked: dict[int, Limit],
    request: str,
    base: int | None,
    now: datetime,
    changes: Changes,
    on_full: str | None,
) -> Acquisition | list[QueueEntry] | None:
    """SPEC 14.2, 14.3, 14.5, 14.7 for an acquisition that cannot be granted at once as things
    stand, with on_full 'skip' or 'replace' (this call's, else the strictest of its limits':
    skip before replace before wait) or a cap on one of its queues. The runs waiting have their
    turn first (settle); if the room left fits this run in every limit, None: it joins the
    queues and that room is granted to it at once, as to any run (3.5; verify refuses a slot
    granted past runs waiting). Otherwise a skip is answered 'skipped' with the first limit that
    stops it and why (full.refusal); a replace answers the entries it replaces (full.replaceable:
    its key's waiting for the same limits), if any, which the caller takes out of the queues as
    it joins in the oldest one's place; a wait (or a replace with nothing to replace) one of
    whose queues is at its cap is answered 'refused' (full.queue_full). Each counted on that
    limit, and nothing of it joins a queue; a wait under its caps: None, it waits as any run does.

    Must never happen: a 'skipped' or 'refused' run left in a queue; one answered so, or one
    replacing others, while room it fits was free and not held for an owed run; a replacement
    touching a run that holds a slot, or another key's."""
    if on_full is None:
        on_full = strictest_on_full(limit.on_full for limit, _ in members)
    capped = any(limit.max_waiting is not None or limit.max_waiting_per_key is not None for limit, _ in members)
    if on_full == "wait" and not capped:
        return None
    rules.settle_all(locked, now, changes)
    stopped = next(
        ((limit, why) for limit, k in needed if (why := full.refusal(limit, k, request, base, now)) is not None), None
    )
    if stopped is not None and on_full == "replace":
        replaced = full.replaceable(members, request)
        if replaced:
            return replaced
    if stopped is not None and on_full != "skip":
        stopped = next(((limit, why) for limit, k in members if (why := full.queue_full(limit, k)) is not None), None)
    if stopped is None:
        return None
    limit, why = stopped
    counter = "skipped_count" if on_full == "skip" else "refused_count"
    Limit.objects.filter(id=limit.id).update(**{counter: F(counter) + 1})
    return Acquisition("skipped" if on_full == "skip" else "refused", limit.name, "", reason=why)


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
        if reserved is not None:
            locked = keys.lock({slot.limit_id for slot in live})
            now, changes = rules.clock_all(locked), Changes()
            mine = keys.group_slots(request, locked)
            confirmed = keys.confirm_group(mine, now, changes) if mine else False
            if not confirmed:
                rules.settle_all(locked, now, changes)
            rules.save_all(locked)
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
        if QueueEntry.State.REPLACED in states:  # SPEC 14.3: a newer acquisition took its place
            return Acquisition(
                "replaced",
                names[0],
                request,
                timeout_ms=first.timeout_ms,
                deadline=first.deadline,
                limits=shown,
                key=key,
                replaced_by=first.replaced_by,
                replaced_by_run=_run_of(first.replaced_by),
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


def _run_of(request: str) -> str:
    """The run of an acquisition (its request), from its rows; '' when the purge took them."""
    found = QueueEntry.objects.filter(request=request).values_list("run_id", flat=True).first()
    if found is None:
        found = Slot.objects.filter(request=request).values_list("run_id", flat=True).first()
    return found or ""


def _in_order[R: (Slot, QueueEntry)](rows: list[R], order: list[str] | None) -> list[R]:
    """Rows of one acquisition in the order of the limit names given (the rest after)."""
    if not order:
        return rows
    place = {name: i for i, name in enumerate(order)}
    return sorted(rows, key=lambda row: place.get(row.limit.name, len(place)))


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
