"""Why a waiting run is not granted now (SPEC 6.5), for the pages and the API: `why_waiting`
asks the grant's own rules (limits.engine.grant's `_Grant.open_to`: Limit.room, the key pools and
the owed-run barrier of limits.engine.keys), read without locks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection

from limits.engine.keys import box_base, owed_barrier, pools, stride, whole_run_room
from limits.engine.results import WHOLE_RUN_SUFFIX, Reason
from limits.models import Limit, LimitKey, QueueEntry, Slot, pool_size
from stackbone.plumbing import clock as box_clock

BOX_REASONS = frozenset({"box_full", "workflow_at_base"})


def why_waiting(
    entries: Sequence[QueueEntry],
    now: datetime | None = None,
    *,
    limits: Iterable[Limit] = (),
    next_keys: dict[int, str | None] | None = None,
) -> dict[int, Reason]:
    """Why each of these waiting entries is not granted now (SPEC 6.5), by the grant's own rules
    (`_Grant.open_to`: Limit.room, Pools.has_room, owed_barrier), checked in the order a grant
    meets them: the limit paused, the limit full, the key's pool full, capacity held for an older
    owed run; then, for a group, the same on each other limit of its group. The box bound (SPEC
    12) says box_full (its ceiling) or workflow_at_base (the workflow's pool), as itself. An entry that none of
    these stops is next: the next settle grants it (a hand-over under way, or the sweep's).

    A full fair limit (SPEC 13.7) says limit_full of the runs of the key its next freed slot goes
    to (and of a key whose own pool is full), and fair_turn of the others: other keys hold less
    of their share and are served first. The next key is limits.eta.fair_order's first, as the
    queue's first row (limits.selectors.fair_head): the slots free oldest grant first. A caller
    that walked the queue already gives it in `next_keys` ({limit id: the first row's key}).

    Read without locks, for the pages and the API: a constant number of queries for any number
    of entries (the limits not given in `limits`, the groups' other entries, and only for limits
    with room or fair: the key rows asked about, one owed-run probe per limit with groups waiting;
    per full fair limit, two to four to find its next key). {entry id: Reason}; entries no longer
    waiting are left out."""
    from limits import eta  # the fair order's walk (a leaf module, no Django: nothing comes back here)

    now = now or box_clock.now()
    waiting = [e for e in entries if e.state == QueueEntry.State.WAITING]
    if not waiting:
        return {}
    requests = {e.request for e in waiting if e.group_size > 1}
    partners = list(QueueEntry.objects.filter(request__in=requests, state=QueueEntry.State.WAITING)) if requests else []
    known = {limit.id: limit for limit in limits}
    needed = {e.limit_id for e in [*waiting, *partners]}
    if needed - set(known):
        known |= {limit.id: limit for limit in Limit.objects.filter(id__in=needed - set(known))}
    by_id = {limit_id: known[limit_id] for limit_id in needed}
    keys_asked: dict[int, set[str]] = {}
    for e in [*waiting, *partners]:
        # A limit without room stops its runs before any pool; a full fair limit, only those of
        # the key next or of a full pool (the others wait their turn).
        if e.key and (by_id[e.limit_id].room or by_id[e.limit_id].is_fair):
            keys_asked.setdefault(e.limit_id, set()).add(e.key)
    for limit in by_id.values():
        pools(limit).rows.update(dict.fromkeys(keys_asked.get(limit.id, ()), None))
    if keys_asked:
        rows = LimitKey.objects.filter(
            limit_id__in=list(keys_asked), key__in={key for keys in keys_asked.values() for key in keys}
        )
        for row in rows:
            if row.key in keys_asked.get(row.limit_id, ()):
                pools(by_id[row.limit_id]).rows[row.key] = row
    base = box_base() if any(e.request.endswith(WHOLE_RUN_SUFFIX) for e in waiting) else None
    barriers = {
        limit.id: owed_barrier(limit, now) if limit.group_waiting_count and limit.room else None
        for limit in by_id.values()
    }

    turns: dict[int, str | None] = dict(next_keys or {})

    def fair_next(limit: Limit) -> str | None:
        """The key whose run this full fair limit's next freed slot goes to (SPEC 13.7), by
        limits.eta.fair_order: the keys of the slots that free first (the oldest grants), the
        first key in the fair order whose pool has room (limitkey_fair_order on PostgreSQL) and
        those slots' keys, and the runs without a key. As selectors.fair_head reads them for one
        run; None when none of them can be served then."""
        frees_read = max(limit.in_use - limit.capacity, 0) + 16
        slots, table = Slot._meta.db_table, LimitKey._meta.db_table
        arm = (
            f"SELECT * FROM (SELECT key, granted_at, id FROM {slots} WHERE limit_id = %s AND state = %s"
            " ORDER BY granted_at, id LIMIT %s) AS {name}"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"{arm.format(name='busy')} UNION ALL {arm.format(name='reserved')} ORDER BY 2, 3 LIMIT %s",
                [limit.pk, Slot.State.BUSY, frees_read, limit.pk, Slot.State.RESERVED, frees_read, frees_read],
            )
            frees = [key for key, _, _ in cursor.fetchall()]
        room = "COALESCE(pool_override, %s) IS NULL OR busy_count + reserved_count < COALESCE(pool_override, %s)"
        sql = f"""
            SELECT * FROM (
                SELECT * FROM {table} WHERE limit_id = %s AND head IS NOT NULL AND ({room})
                ORDER BY limit_id, busy_count + reserved_count >= minimum, {eta.fair_share_sql(connection.vendor)},
                         fair_pass, head
                LIMIT 1
            ) AS first_key"""
        params = [limit.pk, limit.per_key, limit.per_key]
        freeing = sorted({key for key in frees if key})
        if freeing:  # an arm of its own: with an OR, PostgreSQL would read every key of the limit
            sql += f" UNION ALL SELECT * FROM {table} WHERE limit_id = %s AND head IS NOT NULL AND key IN ("
            sql += ", ".join(["%s"] * len(freeing)) + ")"
            params += [limit.pk, *freeing]
        rows = LimitKey.objects.raw(sql, params)
        candidates = {
            row.key: eta.FairKey(
                key=row.key,
                in_use=row.in_use,
                weight=row.weight,
                minimum=row.minimum,
                pool=pool_size(row.pool_override, limit.per_key),
                fair_pass=row.fair_pass,
                stride=stride(row.weight),
                waiting=row.waiting_count,
                heads=[row.head] if row.head is not None else [],
            )
            for row in rows
        }
        if limit.waiting_count > limit.keyed_waiting_count:
            oldest = QueueEntry.objects.filter(limit=limit, state=QueueEntry.State.WAITING, key="")
            head = oldest.order_by("position").values_list("position", flat=True).first()
            candidates[""] = eta.FairKey(
                key="",
                in_use=limit.in_use - limit.keyed_busy_count - limit.keyed_reserved_count,
                weight=1,
                minimum=0,
                pool=limit.per_key,
                fair_pass=limit.nokey_fair_pass,
                stride=stride(1),
                waiting=limit.waiting_count - limit.keyed_waiting_count,
                heads=[head] if head is not None else [],
            )
        walk = eta.fair_order(candidates, room=limit.capacity - limit.in_use, frees=frees, rows=1)
        return walk.order[0][0] if walk.order else None

    def stopped_on(entry: QueueEntry) -> Reason | None:
        limit = by_id[entry.limit_id]
        if limit.paused:
            return Reason("limit_paused", limit.name)
        if not limit.room and limit.is_fair and limit.waiting_count and pools(limit).has_room(entry.key):
            if limit.id not in turns:
                turns[limit.id] = fair_next(limit)
            turn = turns[limit.id]
            if turn is not None and turn != entry.key:
                return Reason("fair_turn", limit.name, key=entry.key)
        if not limit.room:
            return Reason("box_full" if limit.is_box else "limit_full", limit.name)
        if not pools(limit).has_room(entry.key):
            return Reason("workflow_at_base" if limit.is_box else "key_pool_full", limit.name, key=entry.key)
        if not whole_run_room(limit, entry.request, base):
            return Reason("whole_runs_at_base", limit.name)
        barrier = barriers[limit.id]
        if barrier is not None and barrier.position < entry.position:
            return Reason("held_for_owed", limit.name, owed_run=barrier.run_id)
        return None

    group_of: dict[str, list[QueueEntry]] = {}
    for e in partners:
        group_of.setdefault(e.request, []).append(e)
    found: dict[int, Reason] = {}
    for entry in waiting:
        reason = stopped_on(entry)
        if reason is None:
            for other in sorted(group_of.get(entry.request, ()), key=lambda e: by_id[e.limit_id].name):
                if other.limit_id == entry.limit_id:
                    continue
                stopped = stopped_on(other)
                if stopped is not None and stopped.code in BOX_REASONS:
                    reason = stopped  # the box is said as itself: it stops the run whatever it waits for
                    break
                if stopped is not None:
                    reason = Reason("group_limit_full", stopped.limit, key=stopped.key, detail=stopped.code)
                    break
        found[entry.id] = reason or Reason("next", by_id[entry.limit_id].name)
    return found
