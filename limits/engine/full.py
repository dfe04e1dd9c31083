"""When a limit is full (SPEC 14), the Python track's home: whether a queue is at its cap
(`queue_full`, 14.5), why an acquisition cannot be granted at once once the runs waiting had
their turn (`refusal`, 14.2 and 6.5), and replace (14.3): which waiting entries a new acquisition
replaces (`replaceable`), how it takes the oldest one's place (`take_place`, or `swap_place` after
it joined), wakes their runs (`wake_replaced`) and ends those that were waiting to start
(`end_replaced_starts`). limits.engine.python decides with these what an
acquisition that cannot be granted at once does (`_answered_at_once`); limits/sql/engine.sql holds
the PostgreSQL homes (limits_queue_full, limits_refusal, limits_acquire_group's replace), held to
these by the model test on both databases.

Runs under the row locks of the limits it is given (limits.engine.keys.lock), as the rest of the
grant rules do.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import F

from limits.engine.keys import count_entries, owed_barrier, pools, whole_run_room
from limits.engine.results import WHOLE_RUN_SUFFIX, Changes
from limits.models import Limit, QueueEntry
from stackbone.runs.endings import end_unstarted
from stackbone.runs.models import Run


def queue_full(limit: Limit, key: str) -> str | None:
    """SPEC 14.5: 'queue_full' when the limit's queue holds its max_waiting runs,
    'key_queue_full' when `key`'s runs hold its max_waiting_per_key of it (the no-key runs are
    one key), else None: one more may join (engine.sql: limits_queue_full)."""
    cap = limit.max_waiting
    if cap is not None and limit.waiting_count >= cap:
        return "queue_full"
    per_key = limit.max_waiting_per_key
    if per_key is not None and pools(limit).waiting(key) >= per_key:
        return "key_queue_full"
    return None


def refusal(limit: Limit, key: str, request: str, base: int | None, now: datetime) -> str | None:
    """SPEC 14.2, 6.5: why an acquisition of `limit` (`key`'s pool) cannot be granted at once,
    once the runs waiting had their turn (the caller settled the limit), as a results.REASONS
    code; None when it can. Capacity held for an owed run (10.4) is not free for it
    (engine.sql: limits_refusal)."""
    if limit.paused:
        return "limit_paused"
    if not limit.room:
        return "box_full" if limit.is_box else "limit_full"
    if not pools(limit).has_room(key):
        return "workflow_at_base" if limit.is_box else "key_pool_full"
    if not whole_run_room(limit, request, base):
        return "whole_runs_at_base"
    if limit.waiting_count and owed_barrier(limit, now) is not None:
        return "held_for_owed"
    return None


def replaceable(members: list[tuple[Limit, str]], request: str) -> list[QueueEntry]:
    """SPEC 14.3, 14.7: the waiting entries a new acquisition of these limits (each with its key
    pool) would replace: those of every other request waiting for exactly the same limits, each
    with the same key ('' the runs without a key). A run holding a slot has no waiting entry and
    is never among them (engine.sql: limits_acquire_group's replace)."""
    first, first_key = members[0]
    size = len(members)
    candidates = QueueEntry.objects.filter(
        limit=first, key=first_key, state=QueueEntry.State.WAITING, group_size=size
    ).exclude(request=request)
    requests = set(candidates.values_list("request", flat=True))
    for limit, key in members[1:]:
        if not requests:
            break
        requests &= set(
            QueueEntry.objects.filter(
                request__in=requests, limit=limit, key=key, state=QueueEntry.State.WAITING
            ).values_list("request", flat=True)
        )
    if not requests:
        return []
    return list(
        QueueEntry.objects.filter(request__in=requests, state=QueueEntry.State.WAITING).order_by("limit_id", "position")
    )


# What a new entry brings into the row of the oldest entry it replaces (take_place, swap_place):
# the rest of that row (its limit, position, id, key and group size) stays, never passed over
# yet and now replacing.
BROUGHT_FIELDS = ("run_id", "request", "label", "fair_pass", "enqueued_at", "deadline", "timeout_ms")
# What makes a waiting entry's place in a queue besides its limit and position: what a replaced
# entry keeps as its row of history.
PLACE_FIELDS = (*BROUGHT_FIELDS, "key", "group_size", "passed_over_at", "replacing")


def _replaced_row(oldest: QueueEntry, request: str, now: datetime) -> dict[str, object]:
    """The row of history of `oldest`, replaced by `request` at `now`: its place as it was."""
    place = {field: getattr(oldest, field) for field in PLACE_FIELDS}
    return place | {"state": QueueEntry.State.REPLACED, "finished_at": now, "replaced_by": request}


def _take_oldest(oldest: QueueEntry, brought: dict[str, object]) -> None:
    """The new entry (`brought`: its BROUGHT_FIELDS) takes `oldest`'s row."""
    QueueEntry.objects.filter(id=oldest.id).update(**brought, passed_over_at=None, replacing=True)


def _oldest_here(limit: Limit, replaced: list[QueueEntry]) -> tuple[list[QueueEntry], QueueEntry] | None:
    """The `replaced` entries in `limit`'s queue and the oldest of them; None when none is here."""
    mine = [entry for entry in replaced if entry.limit_id == limit.id]
    if not mine:
        return None
    return mine, min(mine, key=lambda entry: entry.position)


def _others_leave(mine: list[QueueEntry], oldest: QueueEntry, request: str, now: datetime) -> list[QueueEntry]:
    """The `mine` entries other than `oldest` leave their queue as replaced by `request`; them."""
    others = [entry for entry in mine if entry is not oldest]
    QueueEntry.objects.filter(id__in=[entry.id for entry in others]).update(
        state=QueueEntry.State.REPLACED, finished_at=now, replaced_by=request
    )
    return others


def take_place(
    limit: Limit,
    replaced: list[QueueEntry],
    *,
    run_id: str,
    request: str,
    label: str,
    now: datetime,
    deadline: datetime,
    timeout_ms: int,
) -> QueueEntry | None:
    """SPEC 14.3: join `limit`'s queue in the place of the oldest of the `replaced` entries here,
    which all leave it as 'replaced' by `request`, counted on the limit; None (nothing done) when
    none is here. The place is the oldest one's row itself: it becomes the new entry (its
    position, and its id, by which the grant orders the queues' heads, 'oldest first'), and what
    it was is kept as a row of history at a new ticket (positions are unique per limit). The
    key's turns and head are as they were: the key still waits here (engine.sql:
    limits_acquire_group's replace)."""
    here = _oldest_here(limit, replaced)
    if here is None:
        return None
    mine, oldest = here
    QueueEntry.objects.create(limit=limit, position=limit.next_position, **_replaced_row(oldest, request, now))
    limit.next_position += 1
    _take_oldest(
        oldest,
        {
            "run_id": run_id,
            "request": request,
            "label": label,
            "fair_pass": pools(limit).fair_pass(oldest.key) if limit.is_fair else None,
            "enqueued_at": now,
            "deadline": deadline,
            "timeout_ms": timeout_ms,
        },
    )
    count_entries(limit, _others_leave(mine, oldest, request, now), waiting=-1)
    Limit.objects.filter(id=limit.id).update(replaced_count=F("replaced_count") + len(mine))
    return QueueEntry.objects.get(id=oldest.id)


def swap_place(limit: Limit, replaced: list[QueueEntry], request: str, now: datetime) -> int:
    """SPEC 14.3, after the join: `request` joined `limit`'s queue at its end and the grant did
    not reach it, though the room left had fitted it before it joined (a run that gave back the
    box slot it executed in to wait, 12.2, found that slot taken by an older run): it replaces the
    `replaced` entries here now. The result is take_place's: the oldest one's row becomes the new
    entry (its place), the new entry's row keeps what the oldest was as history (at the end), the
    others leave as 'replaced'; counted on the limit. How many were replaced here."""
    here = _oldest_here(limit, replaced)
    if here is None:
        return 0
    mine, oldest = here
    new = QueueEntry.objects.get(limit=limit, request=request, state=QueueEntry.State.WAITING)
    QueueEntry.objects.filter(id=new.id).update(**_replaced_row(oldest, request, now))
    _take_oldest(oldest, {field: getattr(new, field) for field in BROUGHT_FIELDS})
    _others_leave(mine, oldest, request, now)
    count_entries(limit, mine, waiting=-1)
    Limit.objects.filter(id=limit.id).update(replaced_count=F("replaced_count") + len(mine))
    return len(mine)


def wake_replaced(entries: list[QueueEntry], changes: Changes) -> None:
    """SPEC 14.3: wake the runs of the replaced entries, each once, in the order they joined: they
    resume and their acquire answers 'replaced' (the grant's own wakes come after)."""
    changes.woken += list(dict.fromkeys(entry.run_id for entry in sorted(entries, key=lambda entry: entry.id)))


def end_replaced_starts(
    replaced: list[QueueEntry],
    members: list[tuple[Limit, str]],
    *,
    run_id: str,
    request: str,
    base: int | None,
    now: datetime,
) -> list[str]:
    """SPEC 14.3 for a run's start: each run whose start acquisition ('<run>:start') is among the
    `replaced` entries, still queued, ends 'replaced' now, never started (Run.end_reason and
    end_limit: the first of the replacing acquisition's limits that stops it, once it joined,
    full.refusal, else its first limit, 'limit_full' ('box_full' for the box); caused_by: the
    replacing run). Its entries left the queues already and it holds nothing; it was woken
    (wake_replaced), and a worker finds it finished. A run whose row another transaction holds is
    skipped, not waited for (that one locked the run before the limits: its worker at the start
    gate, which then finds its start replaced, limits.runs.bounds.starting; or a cancel, which
    ends it). The ended runs' ids, in the order they joined (engine.sql:
    limits_end_replaced_starts)."""
    starts = list(
        dict.fromkeys(
            entry.run_id
            for entry in sorted(replaced, key=lambda entry: entry.id)
            if entry.request == f"{entry.run_id}{WHOLE_RUN_SUFFIX}"
        )
    )
    if not starts:
        return []
    stopped = next(
        ((limit, why) for limit, key in members if (why := refusal(limit, key, request, base, now)) is not None), None
    )
    if stopped is None:
        first = members[0][0]
        stopped = (first, "box_full" if first.is_box else "limit_full")
    limit, why = stopped
    free = set(
        Run.objects.select_for_update(skip_locked=True)
        .filter(id__in=starts, status=Run.Status.QUEUED)
        .values_list("id", flat=True)
    )
    return [
        start
        for start in starts
        if start in free and end_unstarted(start, Run.Status.REPLACED, reason=why, limit=limit.name, caused_by=run_id)
    ]
