"""A fair limit's queue in the order the grant will serve it (SPEC 13.7): its first runs walked
exactly (fair_head, by limits.eta.fair_order), deeper ones estimated by their keys' turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection

from limits import eta
from limits.engine import keys as engine_keys
from limits.models import Limit, LimitKey, QueueEntry, Slot, pool_size
from limits.selectors.pages import Place

# The runs of a fair limit's queue walked exactly (limits.eta.fair_order) for a place on the run
# page or a key's rows: the first page of Studio's queue (views.QUEUE_PER_PAGE is this), so a run
# on it has the same place on both pages. A listing walks its own first page, at most
# FAIR_EXACT_MAX.
FAIR_EXACT_ROWS = 50
FAIR_EXACT_MAX = 500
FAIR_READ_ROUNDS = 3  # reads of the keys' runs for one walk: the first, then more for a key that ran short
ARMS_PER_QUERY = 200  # per-key reads per statement (SQLite takes at most 500 arms in one UNION)


@dataclass(frozen=True, slots=True)
class FairHead:
    """The first runs of a fair limit's queue in the order the grant will serve them (`entries`,
    exact: limits.eta.fair_order's model), and the walk that found them: each key's pass and runs
    taken after them, from which deeper places are estimated (`_turn_ordered`, fair_places)."""

    entries: list[QueueEntry]
    walk: eta.FairWalk


def fair_head(limit: Limit, rows: int) -> FairHead:
    """The first `rows` runs of a fair limit's queue in the order of SPEC 13.2, walked by
    limits.eta.fair_order from a few reads, whatever the number of keys and runs waiting:

    1. the keys of the slots that free first (the oldest grants; as many as the walk may free);
    2. the keys that can come up in `rows` grants: the first `rows` keys in the fair order whose
       pool has room (each of them is served before any key behind it can be, unless its run is
       served first: the index limitkey_fair_order on PostgreSQL), and the keys of those slots
       (freeing lowers their share); the runs without a key as one more key;
    3. each such key's first waiting runs, in arrival order, as many as it may take (a key that
       runs short is read again, further, at most FAIR_READ_ROUNDS reads in all; the walk stops
       where one still runs short and the rest of the queue is estimated)."""
    over = max(limit.in_use - limit.capacity, 0)
    frees = _free_order(limit, over + rows)
    keys = _fair_keys(limit, frees, rows)
    if not keys or not rows:
        return FairHead([], eta.fair_order({}, room=0, frees=[], rows=0))
    share = -(-rows // len(keys)) + 1
    wanted = {key.key: min(key.waiting, share) for key in keys.values()}
    found: dict[tuple[str, int], QueueEntry] = {}
    for _ in range(FAIR_READ_ROUNDS):
        read = _first_waiting(limit, wanted)
        found = {(entry.key, entry.position): entry for entries in read.values() for entry in entries}
        for name, key in keys.items():
            key.heads = [entry.position for entry in read.get(name, [])]
            key.floor = key.heads[-1] + 1 if key.heads else key.floor
        walk = eta.fair_order(keys, room=limit.capacity - limit.in_use, frees=frees, rows=rows)
        if walk.short is None:
            break
        # More of the key that ran short, and of every key the walk took all that was read of.
        for name, key in walk.keys.items():
            if name == walk.short or (key.taken and key.taken >= len(key.heads)):
                wanted[name] = min(key.waiting, max(rows, 2 * wanted[name]))
    return FairHead([found[place] for place in walk.order], walk)


def _free_order(limit: Limit, count: int) -> list[str]:
    """The keys of the limit's first `count` slots in use, oldest grant first ("" for no key):
    the order the walk frees them in. One statement, an arm per state along slot_live_by_limit."""
    if count <= 0 or not limit.in_use:
        return []
    table = Slot._meta.db_table
    arm = (
        f"SELECT * FROM (SELECT key, granted_at, id FROM {table} WHERE limit_id = %s AND state = %s"
        " ORDER BY granted_at, id LIMIT %s) AS {name}"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"{arm.format(name='busy')} UNION ALL {arm.format(name='reserved')} ORDER BY 2, 3 LIMIT %s",
            [limit.pk, Slot.State.BUSY, count, limit.pk, Slot.State.RESERVED, count, count],
        )
        return [key for key, _, _ in cursor.fetchall()]


def _fair_keys(limit: Limit, frees: Sequence[str], rows: int) -> dict[str, eta.FairKey]:
    """The keys with runs waiting that can come up in the first `rows` grants (fair_head, 2), as
    the walk ranks them: one statement on the key rows, and the no-key runs from the limit's
    counters (weight 1, min 0, the pool per key)."""
    table = LimitKey._meta.db_table
    share = eta.fair_share_sql(connection.vendor)
    freeing = sorted({key for key in frees if key})
    sql = f"""
        SELECT * FROM (
            SELECT * FROM {table}
            WHERE limit_id = %s AND head IS NOT NULL
              AND (COALESCE(pool_override, %s) IS NULL OR busy_count + reserved_count < COALESCE(pool_override, %s))
            ORDER BY limit_id, busy_count + reserved_count >= minimum, {share}, fair_pass, head
            LIMIT %s
        ) AS first_keys"""
    params: list[int | str | None] = [limit.pk, limit.per_key, limit.per_key, rows]
    if freeing:  # an arm of its own: with an OR, PostgreSQL would read every key of the limit
        named = ", ".join(["%s"] * len(freeing))
        sql += f" UNION ALL SELECT * FROM {table} WHERE limit_id = %s AND head IS NOT NULL AND key IN ({named})"
        params += [limit.pk, *freeing]
    keys = {
        row.key: eta.FairKey(
            key=row.key,
            in_use=row.in_use,
            weight=row.weight,
            minimum=row.minimum,
            pool=pool_size(row.pool_override, limit.per_key),
            fair_pass=row.fair_pass,
            stride=engine_keys.stride(row.weight),
            waiting=row.waiting_count,
            floor=row.head or 0,
        )
        for row in LimitKey.objects.raw(sql, params)
    }
    no_key_waiting = limit.waiting_count - limit.keyed_waiting_count
    if no_key_waiting > 0:
        keys[""] = eta.FairKey(
            key="",
            in_use=limit.in_use - limit.keyed_busy_count - limit.keyed_reserved_count,
            weight=1,
            minimum=0,
            pool=limit.per_key,
            fair_pass=limit.nokey_fair_pass,
            stride=engine_keys.stride(1),
            waiting=no_key_waiting,
        )
    return keys


def _first_waiting(limit: Limit, wanted: dict[str, int]) -> dict[str, list[QueueEntry]]:
    """Each key's first `wanted[key]` waiting runs, in arrival order: an arm per key along
    queue_waiting_by_key (queue_waiting_order for the runs without a key), ARMS_PER_QUERY arms a
    statement."""
    table = QueueEntry._meta.db_table
    asked = [(key, count) for key, count in sorted(wanted.items()) if count > 0]
    found: dict[str, list[QueueEntry]] = {}
    for start in range(0, len(asked), ARMS_PER_QUERY):
        arms, params = [], []
        for index, (key, count) in enumerate(asked[start : start + ARMS_PER_QUERY]):
            keyed = "key = %s AND key <> ''" if key else "key = %s"
            arms.append(
                f"SELECT * FROM (SELECT * FROM {table} WHERE limit_id = %s AND state = 'waiting' AND {keyed}"
                f" ORDER BY position LIMIT %s) AS arm_{index}"
            )
            params += [limit.pk, key, count]
        for entry in QueueEntry.objects.raw(" UNION ALL ".join(arms), params):
            found.setdefault(entry.key, []).append(entry)
    for entries in found.values():
        entries.sort(key=lambda entry: entry.position)
    return found


@dataclass(frozen=True, slots=True)
class FairRows:
    """Rows of a fair limit's queue in the order the grant will serve it (fair_queue_rows): places
    up to `exact` are exact, deeper ones estimated; `next_key` is the key whose run the next freed
    slot goes to (the first row's; why_waiting's next_keys), None when none can be served."""

    items: list[QueueEntry]
    exact: int
    next_key: str | None


def fair_queue_rows(limit: Limit, *, exact: int, offset: int, size: int | None) -> FairRows:
    """Rows [offset, offset + size) (size None: to the end) of a fair limit's queue in the order
    the grant will serve it (SPEC 13.7): its first `exact` runs (at most FAIR_EXACT_MAX) walked by
    fair_head, then the others estimated by their turns (`_turn_ordered`). Each page of a listing
    asks with the same `exact` (its page size), so the pages share out the queue without a run
    twice or missing. A constant number of queries: fair_head's, and one more for rows past the
    walked ones."""
    head = fair_head(limit, min(exact, FAIR_EXACT_MAX))
    walked = len(head.entries)
    end = None if size is None else offset + size
    rows = head.entries[offset:end]
    if (end is None or end > walked) and limit.waiting_count > walked:
        more = None if end is None else end - max(offset, walked)
        rows += _turn_ordered(limit, head, offset=max(offset - walked, 0), size=more)
    return FairRows(rows, walked, head.entries[0].key if head.entries else None)


def _turn_ordered(limit: Limit, head: FairHead, *, offset: int, size: int | None) -> list[QueueEntry]:
    """The waiting runs past a fair head, estimated in the order of their turns: the n-th of a
    key's runs left comes at its pass after the head + (n - 1) x its stride (stride scheduling
    with the shares of the moment left out), ties by arrival. One statement, numbering each key's
    runs in arrival order (a window over the limit's queue: read in full, for pages past the
    first only)."""
    table, keys_table = QueueEntry._meta.db_table, LimitKey._meta.db_table
    moved = {name: key.fair_pass for name, key in head.walk.keys.items() if key.taken}
    nokey = head.walk.keys[""].fair_pass if "" in head.walk.keys else limit.nokey_fair_pass
    whens = " ".join(["WHEN %s THEN %s"] * len(moved))
    passes = f"CASE ranked.key {whens} ELSE COALESCE(k.fair_pass, %s) END" if moved else "COALESCE(k.fair_pass, %s)"
    skipped = [entry.id for entry in head.entries]
    skip = f"AND q.id NOT IN ({', '.join(['%s'] * len(skipped))})" if skipped else ""
    window = (
        "LIMIT %s OFFSET %s"
        if size is not None
        else ("LIMIT -1 OFFSET %s" if connection.vendor == "sqlite" else "OFFSET %s")
    )
    sql = f"""
        SELECT ranked.* FROM (
            SELECT q.*, ROW_NUMBER() OVER (PARTITION BY q.key ORDER BY q.position) AS turn
            FROM {table} q WHERE q.limit_id = %s AND q.state = 'waiting' {skip}
        ) AS ranked
        LEFT JOIN {keys_table} k ON k.limit_id = %s AND k.key = ranked.key
        ORDER BY {passes} + (ranked.turn - 1) * ({engine_keys.PASS_STRIDE} / COALESCE(k.weight, 1)), ranked.position
        {window}"""
    params: list[object] = [limit.pk, *skipped, limit.pk]
    for name, value in moved.items():
        params += [name, value]
    params += [nokey, *([size] if size is not None else []), offset]
    return list(QueueEntry.objects.raw(sql, params))


def fair_places(limit: Limit, targets: Sequence[tuple[QueueEntry, int]]) -> dict[int, Place]:
    """The places in a fair limit's queue, in the order the grant will serve it (SPEC 13.7), of
    waiting runs given with how many runs of their key wait ahead of them: exact among the first
    FAIR_EXACT_ROWS (fair_head, as the first page of Studio's queue), else estimated by the turns
    (as `_turn_ordered` lists them): past the walked runs, the runs of each key that come at a
    smaller pass, or at the same one and arrived first (a key's oldest run stands for its others),
    plus its own key's runs left ahead of it. The estimate for the keys the walk did not touch is
    one aggregate over their rows, for every target at once."""
    head = fair_head(limit, FAIR_EXACT_ROWS)
    walked = {entry.id: index + 1 for index, entry in enumerate(head.entries)}
    found = {entry.id: Place(walked[entry.id]) for entry, _ in targets if entry.id in walked}
    deep = [(entry, ahead) for entry, ahead in targets if entry.id not in walked]
    if not deep:
        return found
    keys = head.walk.keys
    untouched = {entry.key for entry, _ in deep if entry.key not in keys}
    rows = {row.key: row for row in LimitKey.objects.filter(limit=limit, key__in=untouched)} if untouched else {}
    turns: list[Turn] = []
    for entry, ahead in deep:
        key, row = keys.get(entry.key), rows.get(entry.key)
        if key is not None:
            fair_pass, stride, taken = key.fair_pass, key.stride, key.taken
            first = key.head if key.head is not None else key.floor
        else:
            fair_pass = row.fair_pass if row is not None else 0
            stride, taken = engine_keys.stride(row.weight if row is not None else 1), 0
            first = row.head if row is not None and row.head is not None else entry.position
        left = max(ahead - taken, 0)
        turns.append(Turn(entry.key, fair_pass + left * stride, entry.position, left, first))
    others = _turns_ahead(limit, set(keys), turns)
    for (entry, _), turn, beyond in zip(deep, turns, others, strict=True):
        walked_ahead = sum(_runs_before(key, turn) for name, key in keys.items() if name != turn.key)
        found[entry.id] = Place(len(head.entries) + 1 + turn.left + beyond + walked_ahead, approximate=True)
    return found


@dataclass(frozen=True, slots=True)
class Turn:
    """A waiting run as fair_places estimates it: its key, the pass its key will be at when its
    turn comes (`at`), its position, its key's runs left ahead of it after the walk (`left`) and
    its key's next run's position (`first`: itself, or older)."""

    key: str
    at: int
    position: int
    left: int
    first: int


def _tie_before(nth: int, position: int | None, head: int, turn: Turn) -> bool:
    """Whether a key's `nth` run left, at the same pass as `turn`, comes first: by its position
    when known (`position`, or the key's head for its first); else by rounds: the runs of each key
    taken in their order, the n-th of one key before the n-th of a key whose runs began later."""
    if position is not None:
        return position < turn.position
    return (nth, head) < (turn.left, turn.first)


def _runs_before(key: eta.FairKey, turn: Turn) -> int:
    """How many of a walked key's runs left come before a run's turn (by the turns: SPEC 13.2's
    order without the shares): those at a smaller pass, and the one at the same pass if it came
    first (_tie_before: by its position if it was read)."""
    left = key.waiting - key.taken
    if left <= 0 or turn.at < key.fair_pass:
        return 0
    gap = turn.at - key.fair_pass
    before = -(-gap // key.stride)
    if gap % key.stride == 0 and before < left:
        index = key.taken + before
        read = key.heads[index] if index < len(key.heads) else None
        before += _tie_before(before, read, key.head if key.head is not None else key.floor, turn)
    return min(before, left)


def _turns_ahead(limit: Limit, walked: set[str], turns: Sequence[Turn]) -> list[int]:
    """_runs_before for the keys with runs waiting that the walk did not touch (from their rows:
    pass, weight, runs waiting, head), summed per run of `turns`, leaving out each one's own key:
    one aggregate statement for all of them. A key's run at the same pass as the run is counted
    before it as _tie_before says (its head's position when it is that run, else by rounds)."""
    table = LimitKey._meta.db_table
    least = "LEAST" if connection.vendor == "postgresql" else "MIN"
    stride = f"({engine_keys.PASS_STRIDE} / k.weight)"
    values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(turns))
    leave_out = f"AND k.key NOT IN ({', '.join(['%s'] * len(walked))})" if walked else ""
    sql = f"""
        WITH t(i, key, turn, pos, round, head) AS (VALUES {values})
        SELECT t.i, SUM(
            CASE WHEN t.turn < k.fair_pass THEN 0 ELSE {least}(
                k.waiting_count,
                (t.turn - k.fair_pass + {stride} - 1) / {stride}
                + CASE WHEN (t.turn - k.fair_pass) %% {stride} <> 0 THEN 0
                       WHEN t.turn = k.fair_pass THEN (CASE WHEN k.head < t.pos THEN 1 ELSE 0 END)
                       WHEN (t.turn - k.fair_pass) / {stride} < t.round THEN 1
                       WHEN (t.turn - k.fair_pass) / {stride} = t.round AND k.head < t.head THEN 1
                       ELSE 0 END
            ) END)
        FROM t JOIN {table} k ON k.limit_id = %s AND k.head IS NOT NULL AND k.key <> t.key {leave_out}
        GROUP BY t.i"""
    params: list[int | str] = []
    for index, turn in enumerate(turns):
        params += [index, turn.key, turn.at, turn.position, turn.left, turn.first]
    params += [limit.pk, *sorted(walked)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        sums = {index: int(total or 0) for index, total in cursor.fetchall()}
    return [sums.get(index, 0) for index in range(len(turns))]
