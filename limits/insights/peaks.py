"""The peaks of a minute: the most runs waiting and the most slots in use at any instant of it (a
burst that came and went between two samples). The next minute's sample writes them
(record_peaks, from the changes since the minute began); minute_peaks derives them from the
history rows, the reference the tests hold record_peaks to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from limits.insights.minutes import LIMIT_TABLE, MINUTE, MINUTE_TABLE, QUEUE_TABLE, SLOT_TABLE, db_time, minute_of

PEAK_REFERENCE_AGE = timedelta(hours=1)


def record_peaks(minute: datetime) -> None:
    """Set `minute`'s peaks (waiting_peak, in_use_peak) of every limit sampled in the hour before
    it: one statement (record_peaks_sql). The sample of the next minute calls it."""
    with transaction.atomic(), connection.cursor() as cursor:
        no_jit(cursor)
        cursor.execute(record_peaks_sql(), peak_params(minute))


def no_jit(cursor: Any) -> None:
    """PostgreSQL compiles a statement whose estimated cost passes jit_above_cost (100,000): the
    peaks' estimate sits near it (a CI run measured 104,163 for a 43 ms statement, which JIT made
    slower), and it returns a few rows: never compile it (SET LOCAL: this transaction only)."""
    if connection.vendor == "postgresql":
        cursor.execute("SET LOCAL jit = off")


def peak_params(minute: datetime) -> dict[str, Any]:
    return {"a": db_time(minute), "b": db_time(minute + MINUTE), "since": db_time(minute - PEAK_REFERENCE_AGE)}


def record_peaks_sql() -> str:
    """SQL: for each limit, the most runs waiting and slots in use at any instant of the minute
    [%(a)s, %(b)s), upserted into its minute row; run by the next minute's sample (after b).

    The count now is on the limit row (waiting_count; busy_count + reserved_count), so the count
    at an instant t is the count now less the changes after t: n(t) = now - (joins after t) +
    (leaves after t). Only the changes since a are read, never the whole queue or history:
    1. ref: each limit with a sample in [%(since)s, a) (PEAK_REFERENCE_AGE), its counters now and
       the newest such sample's next_position: every run that joined the queue at or after a has
       a position at least that (a limit hands out positions in the order of its clock, which
       never goes back, and that sample was read before a), so the queue's tail from there holds
       the runs still waiting that joined since a (queue_waiting_order);
    2. the events since a, each a change d of one count (k: 'w' waiting, 'u' in use) at t: runs
       that joined (+1 at enqueued_at: still waiting, and finished since a) and left (-1 at
       finished_at: queue_history_age), slots granted (+1 at granted_at: live ones through
       slot_live_by_limit, freed ones) and freed (-1 at freed_at: slot_history_age); and a row
       d = 0 at a, so the count the minute began with is a candidate;
    3. the count after the events up to t is now - (sum of all d) + (sum of d up to t, ties
       included); the peak is the largest over the events of [a, b). Only those are put in order
       (the running sum); the events after b count in the sum of all d alone, so a pass that
       follows a big change (a sweep of 100,000 + 100,000 writes 300,000 events) does not sort them
       (issue 44: 1.2 s of that pass went to sorting them).
    So it reads the changes since a (about a minute), one index probe of the minute rows and of
    the queue's tail per limit, never the length of a queue or the history kept. A limit with
    no sample in the hour before a (insights just started, the sweep stopped for long) gets no
    peak for that minute."""
    live = "('reserved', 'busy')"
    return f"""
        WITH ref AS (
            SELECT limit_id, waiting_now, in_use_now, after, next_now FROM (
                SELECT l.id AS limit_id, l.waiting_count AS waiting_now, l.busy_count + l.reserved_count AS in_use_now,
                       l.next_position AS next_now,
                       (SELECT m.next_position FROM {MINUTE_TABLE} AS m
                        WHERE m.limit_id = l.id AND m.minute >= %(since)s AND m.minute < %(a)s
                          AND m.next_position IS NOT NULL
                        ORDER BY m.minute DESC LIMIT 1) AS after
                FROM {LIMIT_TABLE} AS l
            ) AS limits
            WHERE after IS NOT NULL
        ),
        events AS (
            SELECT limit_id, 'w' AS k, %(a)s AS t, 0 AS d FROM ref
            UNION ALL
            SELECT limit_id, 'u', %(a)s, 0 FROM ref
            UNION ALL
            SELECT ref.limit_id, 'w', tail.enqueued_at, 1 FROM ref {_queue_tail()}
            UNION ALL
            SELECT limit_id, 'w', finished_at, -1 FROM {QUEUE_TABLE} WHERE state <> 'waiting' AND finished_at >= %(a)s
            UNION ALL
            SELECT limit_id, 'w', enqueued_at, 1 FROM {QUEUE_TABLE}
            WHERE state <> 'waiting' AND finished_at >= %(a)s AND enqueued_at >= %(a)s
            UNION ALL
            SELECT s.limit_id, 'u', s.granted_at, 1 FROM ref
            JOIN {SLOT_TABLE} AS s ON s.limit_id = ref.limit_id AND s.state IN {live} AND s.granted_at >= %(a)s
            UNION ALL
            SELECT limit_id, 'u', freed_at, -1 FROM {SLOT_TABLE} WHERE freed_at IS NOT NULL AND freed_at >= %(a)s
            UNION ALL
            SELECT limit_id, 'u', granted_at, 1 FROM {SLOT_TABLE}
            WHERE freed_at IS NOT NULL AND freed_at >= %(a)s AND granted_at >= %(a)s
        ),
        totals AS (
            SELECT limit_id, k, sum(d) AS total FROM events GROUP BY limit_id, k
        ),
        counts AS (
            SELECT e.limit_id, e.k, e.t,
                   CASE WHEN e.k = 'w' THEN ref.waiting_now ELSE ref.in_use_now END - totals.total
                   + sum(e.d) OVER (PARTITION BY e.limit_id, e.k ORDER BY e.t) AS n
            FROM events AS e
            JOIN ref ON ref.limit_id = e.limit_id
            JOIN totals ON totals.limit_id = e.limit_id AND totals.k = e.k
            WHERE e.t < %(b)s
        )
        INSERT INTO {MINUTE_TABLE} (limit_id, minute, waiting_peak, in_use_peak)
        SELECT limit_id, %(a)s, max(CASE WHEN k = 'w' THEN n END), max(CASE WHEN k = 'u' THEN n END)
        FROM counts
        GROUP BY limit_id
        ON CONFLICT (limit_id, minute) DO UPDATE SET
            waiting_peak = excluded.waiting_peak, in_use_peak = excluded.in_use_peak
    """


def _queue_tail() -> str:
    """SQL joined to `ref`: its limit's runs still waiting with a position from ref.after on that
    joined at or after %(a)s, as `tail`: one range of queue_waiting_order per limit. On
    PostgreSQL a LATERAL subquery kept from being flattened (OFFSET 0): joined plainly, the
    planner may read the whole waiting queue for the enqueued_at filter (80 ms for 1,000,000).
    The upper bound (the limit's next position: every position is below it) changes nothing
    but the estimate: with the lower bound alone the planner takes a third of each queue, and
    the statement's cost passes jit_above_cost (JIT compiling then took 470 ms)."""
    if connection.vendor == "postgresql":
        return f"""CROSS JOIN LATERAL (
            SELECT q.enqueued_at FROM {QUEUE_TABLE} AS q
            WHERE q.limit_id = ref.limit_id AND q.state = 'waiting'
              AND q.position >= ref.after AND q.position < ref.next_now AND q.enqueued_at >= %(a)s
            OFFSET 0
        ) AS tail"""
    return f"""JOIN {QUEUE_TABLE} AS tail
            ON tail.limit_id = ref.limit_id AND tail.state = 'waiting'
               AND tail.position >= ref.after AND tail.position < ref.next_now
            WHERE tail.enqueued_at >= %(a)s"""


@dataclass(frozen=True, slots=True)
class Peak:
    """The most runs waiting and the most slots in use (busy + reserved) at any instant of one
    limit's minute, from the history rows (minute_peaks); None: nothing changed in that minute
    (the count stayed what it was when the minute began, which is then its sample)."""

    waiting: int | None
    in_use: int | None


def minute_peaks(start: datetime, end: datetime) -> dict[tuple[int, datetime], Peak]:
    """Each limit's peaks (Peak) in each minute of [start, end) (whole minutes) where its queue
    or its slots changed, in one statement (_peaks_sql)."""
    with connection.cursor() as cursor:
        cursor.execute(_peaks_sql(), {"a": db_time(start), "b": db_time(end)})
        rows = cursor.fetchall()
    return {(limit_id, _as_datetime(minute)): Peak(waiting, in_use) for limit_id, minute, waiting, in_use in rows}


def _as_datetime(value: datetime | str) -> datetime:
    """A minute as SQL returned it (SQLite: text, UTC) as an aware datetime."""
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def _peaks_sql() -> str:
    """SQL: for each limit and each minute of [%(a)s, %(b)s) in which its queue or its slots
    changed, the most runs waiting and the most slots in use at any instant of it.

    The number waiting at an instant t is the queue entries with enqueued_at <= t < finished_at
    (or still waiting); in use, the slots with granted_at <= t < freed_at (or still live). So:
    1. the events, each a change of one count (k: 'w' waiting, 'u' in use) by d at t: a run
       joining (+1 at enqueued_at) and leaving (-1 at finished_at: granted, timed out,
       cancelled), a slot granted (+1) and freed (-1), all in [a, b); and, at a, the count then
       (d = the entries and slots that began before a and had not ended by a);
    2. the running sum of d per limit and count, in time order (at one instant, ends first:
       an interval is [begin, end)), is the count after each event;
    3. a minute's peak is the largest count after or just before (n - d) one of its events: the
       count just before its first event is the count the minute began with.
    What it reads: the finished queue entries and the freed slots of [a, now) (queue_history_age,
    slot_history_age, as the recount), the live slots (slot_live_by_limit, at most the total
    capacity) and the waiting entries (the queues as they are now: their length, not history).
    """
    live = "state IN ('reserved', 'busy')"
    freed = "freed_at IS NOT NULL AND freed_at >= %(a)s"
    finished = "state <> 'waiting' AND finished_at >= %(a)s"
    waiting = "state = 'waiting'"
    begins = "{column} >= %(a)s AND {column} < %(b)s"
    events = f"""
        SELECT limit_id, 'w' AS k, finished_at AS t, 0 AS o, -1 AS d FROM {QUEUE_TABLE}
        WHERE {finished} AND finished_at < %(b)s
        UNION ALL
        SELECT limit_id, 'w', %(a)s, 1, count(*) FROM {QUEUE_TABLE} WHERE {finished} AND enqueued_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'w', %(a)s, 1, count(*) FROM {QUEUE_TABLE} WHERE {waiting} AND enqueued_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'w', enqueued_at, 2, 1 FROM {QUEUE_TABLE}
        WHERE {finished} AND {begins.format(column="enqueued_at")}
        UNION ALL
        SELECT limit_id, 'w', enqueued_at, 2, 1 FROM {QUEUE_TABLE}
        WHERE {waiting} AND {begins.format(column="enqueued_at")}
        UNION ALL
        SELECT limit_id, 'u', freed_at, 0, -1 FROM {SLOT_TABLE} WHERE {freed} AND freed_at < %(b)s
        UNION ALL
        SELECT limit_id, 'u', %(a)s, 1, count(*) FROM {SLOT_TABLE} WHERE {freed} AND granted_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'u', %(a)s, 1, count(*) FROM {SLOT_TABLE} WHERE {live} AND granted_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'u', granted_at, 2, 1 FROM {SLOT_TABLE} WHERE {freed} AND {begins.format(column="granted_at")}
        UNION ALL
        SELECT limit_id, 'u', granted_at, 2, 1 FROM {SLOT_TABLE} WHERE {live} AND {begins.format(column="granted_at")}
    """
    greatest = "greatest" if connection.vendor == "postgresql" else "max"
    peak = f"{greatest}(n, n - d)"
    return f"""
        WITH events AS ({events}),
        counts AS (
            SELECT limit_id, k, t, d,
                   sum(d) OVER (PARTITION BY limit_id, k ORDER BY t, o ROWS UNBOUNDED PRECEDING) AS n
            FROM events
        )
        SELECT limit_id, {minute_of("t")} AS m,
               max(CASE WHEN k = 'w' THEN {peak} END), max(CASE WHEN k = 'u' THEN {peak} END)
        FROM counts
        GROUP BY limit_id, {minute_of("t")}
    """
