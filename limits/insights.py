"""Insights: what the limits did over time, rolled up per minute by the sweep.

The 15-second sweep (limits.engine.sweeper) calls `record` once per pass; it does two things.

1. **Sample** (once per minute, at the minute's first pass): one ``INSERT ... SELECT`` copies every
   limit's busy, reserved and waiting counters, its capacity and its next queue position into
   that minute's `LimitMinute` row. These are the backlog chart's points: the state about
   0-15 s after the minute began. A second statement sets the minute before's peaks, the most
   waiting and in use at any instant of it (record_peaks: a burst that came and went between
   two samples), from the counters and the changes since that minute began.
2. **Roll up** the minutes that ended at least ROLLUP_GRACE ago (and, by the database's own
   clock, too), oldest first, at most MAX_MINUTES_PER_PASS per pass, all in one transaction:
   a. lock the SweepState row (SELECT ... FOR UPDATE): sweeps at once roll up one after the
      other, the second sees what the first did (nothing is left: it adds nothing);
   b. recount, from the history rows, the trailing RECOUNT_WINDOW (15 minutes) up to the new
      rolled_until, the new minutes included: one ``INSERT ... SELECT ... GROUP BY limit_id,
      minute`` adds to `LimitTotals` the recount minus what the minute rows hold already
      (field by field), then one more sets the minute rows to the recount;
   c. one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` sets every key's 10-minute
      `LimitKeySpan` rows, from the start of the span holding the window's start, to the
      recount of their grants with a key (whole spans: setting them is idempotent);
   d. move SweepState.rolled_until.
   Then at most four statements purge minutes older than INSIGHTS_RETENTION (7 days) and key
   spans older than KEY_RETENTION (25 h), in batches.

So the number of statements per pass is constant whatever the number of limits or of minutes
caught up (5 to roll up on PostgreSQL, where one data-modifying WITH does both parts of step b
with one scan of the history; 6 on SQLite), and nothing is written on the hot path (acquire,
confirm, release stay as they were). Each pass scans the history of the window (up to 25
minutes, for the key spans), not of one minute: docs/insights.md has the measured cost.

Late commits: an event is stamped with its transaction's clock and becomes visible when it
commits; a caller's open transaction, a lock wait or a slow host clock can commit it after its
minute was rolled up. The recount finds it at the next pass that rolls up a new minute, as long
as its minute is still among the last RECOUNT_WINDOW rolled up (the bound: an event committed
within 14 minutes of its time is always counted, one committed more than 16 minutes after it
is not, with the sweep on time; in between it depends on where in its minute it fell), and
adds it once: the totals take only the difference between the recount and the minute row, and
the minute row is then set to the recount.
Counters still never go backwards: history is kept longer than the window (the sweep never
purges history the window still covers: history_needed_from), so a recount is never smaller
than the row; each field's difference is clamped at 0 all the same (it could only be negative
if history had been deleted by hand).

Where the counts come from (each a range scan of an existing partial index):
- queue grants and time-outs: QueueEntry rows finished in [a, b) (``queue_history_age``); the
  wait of a queue grant is finished_at - enqueued_at (a run whose reservation lapsed and that
  went back to the queue waits again from then on);
- frees: Slot rows freed in [a, b) (``slot_history_age``): ``released`` with no actor is the
  workflow's release, with an actor an operator's; ``expired`` is max hold; ``run_ended`` the
  run's end (with_limit); ``lapsed`` a reservation not confirmed in time;
- grants made at once (no queue entry) in [a, b): those still live (``slot_live_by_limit``, a
  scan of the live slots, bounded by the total capacity, not by history) and those freed since a
  (``slot_history_age``, bounded by the rollup lag and the window).

Decisions:
- A grant made at once counts in time to grant as 0 s (bucket ``le 0``): the figures answer "how
  long did an acquisition take to get its slot", so the histogram's count equals the grants.
  Where most grants are made at once that reads 0 s even when runs waited, so the limit page
  also shows the percentiles of the queue grants only (the runs that waited, from joining the
  queue to the grant): the same buckets less the grants made at once (all in ``le 0``), over
  queue_grants (WaitFigures.queued_p50/p95). Prometheus keeps one histogram, over all grants.
- Percentiles come from the bucket counts (WAIT_BUCKETS_S): p-th percentile = the smallest bucket
  bound with at least ceil(p x count) grants at or under it (the nearest-rank rule). The true
  value lies between the bound before and that bound; the page shows "≤ bound". When every wait
  falls on a bound (tests do that) the figure is exact. Beyond the last bound (24 h): "> 24 h".
- Rollup lag: a minute is rolled up ROLLUP_GRACE (30 s) after it ends, so transactions that read
  their clock inside it have mostly committed (the later ones: the recount above); with the
  15 s sweep, the counts and counters are 30-45 s behind the end of their minute (up to 1 min
  45 s behind real time).
- Clocks: rolled_until never passes the database's clock minus ROLLUP_GRACE (read in the
  locking statement), so a sweep host whose clock jumped hours ahead cannot move it into the
  future (events stamped before it would never be counted). A host clock behind the others
  stamps its events late: within RECOUNT_WINDOW they are recounted. The sample step still uses
  the sweep host's clock (a jump ahead skips the chart's samples until real time catches up).
- Per key: 10-minute spans, not minutes (10,000 keys x 1,440 minutes a day would dwarf the
  per-limit rows), only for keys granted something, kept 25 h; the page shows the KEYS_SHOWN
  keys with the most runs waiting now (two queries, at most 5 x 145 rows). A key's "last hour"
  is the spans that started in it: up to 10 minutes more.
- Counting starts at the first sweep that runs with insights: its first roll-up also recounts
  the RECOUNT_WINDOW before (no history older than that is rolled up). A sweep that was stopped
  for longer than MAX_BACKFILL (1 h) starts again from MAX_BACKFILL ago: the minutes before are
  skipped (counted nowhere), so a restart never scans days of history.

What must never happen (tests/insights/ checks each):
- a minute counted twice into LimitTotals or a key's span (the row lock of step 2a; the totals
  add differences, the minute rows and spans are set: a recount adds nothing new);
- a counter going backwards (totals only ever add differences clamped at 0; the purge deletes
  LimitMinute rows, never totals);
- a grant counted in two minutes, or none while it commits within the window (each is counted
  in the minute of its grant time: exactly one of the live and the freed arms sees a slot);
- the rollup writing to a limit, slot or queue row (it only reads them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Now

from limits import eta
from limits.models import (
    CAPACITY_IN_FORCE_SQL,
    LIVE_SLOT_STATES,
    WAIT_BUCKETS_S,
    Limit,
    LimitKey,
    LimitKeySpan,
    LimitMinute,
    LimitTotals,
    QueueEntry,
    Slot,
    SweepState,
)
from stackbone.plumbing import clock as box_clock

MINUTE = timedelta(minutes=1)
ROLLUP_GRACE = timedelta(seconds=30)
SWEEP_PERIOD = timedelta(seconds=15)
MAX_MINUTES_PER_PASS = 10
MAX_BACKFILL = timedelta(hours=1)
RECOUNT_WINDOW = timedelta(minutes=15)
INSIGHTS_RETENTION = timedelta(days=7)
KEY_SPAN = timedelta(minutes=10)
KEY_RETENTION = timedelta(hours=25)
KEYS_SHOWN = 5
PURGE_BATCH = 5_000
RATE_WINDOW_MINUTES = 10
PEAK_REFERENCE_AGE = timedelta(hours=1)

BUCKET_FIELDS = tuple(f"wait_le_{bound}" for bound in WAIT_BUCKETS_S)
COUNT_FIELDS = (
    "grants",
    "queue_grants",
    "released_by_workflow",
    "released_by_operator",
    "released_by_max_hold",
    "released_by_run_end",
    "lapses",
    "timeouts",
    "wait_ms_sum",
    *BUCKET_FIELDS,
)

_MINUTE_TABLE = LimitMinute._meta.db_table
_KEY_SPAN_TABLE = LimitKeySpan._meta.db_table
_TOTALS_TABLE = LimitTotals._meta.db_table
_LIMIT_TABLE = Limit._meta.db_table
_SLOT_TABLE = Slot._meta.db_table
_QUEUE_TABLE = QueueEntry._meta.db_table


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def floor_span(moment: datetime) -> datetime:
    """The start of the 10-minute span holding `moment` (per-key rows)."""
    minute = floor_minute(moment)
    return minute.replace(minute=minute.minute - minute.minute % 10)


# --- the contract with the run page's ETA ----------------------------------------------------


def grant_rates(limit_ids: Iterable[int], *, now: datetime | None = None) -> dict[int, float | None]:
    """Each limit's recent grant rate, in grants per second: its grants in the last
    RATE_WINDOW_MINUTES (10) rolled-up minutes divided by the seconds those minutes cover; None
    when nothing was granted then. One query, whatever the number of ids.

    The window ends at the last minute the rollup has surely done while the sweep runs (the one
    that ended ROLLUP_GRACE + SWEEP_PERIOD ago), or earlier, at SweepState.rolled_until, when
    the rollup lags: a minute not rolled up yet never reads as 0 grants; the rate is then over
    the part of the window the rollup covered (None when it covered none of it). In the first
    10 minutes after insights began counting, the rate reads low (the minutes before count as
    0 grants).
    """
    ids = list(dict.fromkeys(limit_ids))
    if not ids:
        return {}
    end = floor_minute((now or box_clock.now()) - ROLLUP_GRACE - SWEEP_PERIOD)
    start = end - RATE_WINDOW_MINUTES * MINUTE
    rolled_until = Subquery(SweepState.objects.filter(id=1).values("rolled_until")[:1])
    rows = (
        LimitMinute.objects.filter(limit_id__in=ids, minute__gte=start, minute__lt=end, grants__gt=0)
        .filter(minute__lt=rolled_until)
        .values("limit_id")
        .annotate(granted=Sum("grants"), until=rolled_until)
        .values_list("limit_id", "granted", "until")
    )
    rates: dict[int, float | None] = dict.fromkeys(ids)
    for limit_id, granted, until in rows:
        covered = (min(end, until) - start).total_seconds()
        rates[limit_id] = granted / covered
    return rates


def eta_rates(limit_ids: Iterable[int], *, now: datetime | None = None) -> dict[int, float | None]:
    """The grant rate each limit's estimated waits divide by (limits.eta.grant_rate): its grants
    of the last 60 s, counted from the slots' grant times, when there were enough of them, else
    grant_rates' 10-minute figure. One query, whatever the number of ids: per limit, the rollup's
    grants of the window (as grant_rates), and two counts of the slots granted in the last 60 s,
    the live ones (slot_live_by_limit: the limit's live slots, at most its capacity) and the
    freed ones (slot_history_age: the slots freed in the last 60 s, of every limit). So the work
    is bounded by the capacity and a minute of releases, never by the history kept."""
    ids = list(dict.fromkeys(limit_ids))
    if not ids:
        return {}
    now = now or box_clock.now()
    end = floor_minute(now - ROLLUP_GRACE - SWEEP_PERIOD)
    start = end - RATE_WINDOW_MINUTES * MINUTE
    since = now - timedelta(seconds=eta.RECENT_WINDOW_S)
    rolled_until = Subquery(SweepState.objects.filter(id=1).values("rolled_until")[:1])
    minutes = (
        LimitMinute.objects.filter(limit_id=OuterRef("id"), minute__gte=start, minute__lt=end)
        .filter(minute__lt=rolled_until)
        .order_by()
        .values("limit_id")
        .annotate(n=Sum("grants"))
        .values("n")
    )

    def granted(slots: Any) -> Subquery:
        return Subquery(slots.order_by().values("limit_id").annotate(n=Count("*")).values("n"))

    slots = Slot.objects.filter(limit_id=OuterRef("id"), granted_at__gte=since)
    rows = (
        Limit.objects.filter(id__in=ids)
        .annotate(
            granted=Subquery(minutes),
            until=rolled_until,
            live=granted(slots.filter(state__in=LIVE_SLOT_STATES)),
            freed=granted(slots.filter(freed_at__isnull=False, freed_at__gte=since)),
        )
        .values_list("id", "granted", "until", "live", "freed")
    )
    rates: dict[int, float | None] = dict.fromkeys(ids)
    for limit_id, grants, until, live, freed in rows:
        rollup_rate = None
        if grants and until is not None and min(end, until) > start:
            rollup_rate = grants / (min(end, until) - start).total_seconds()
        rates[limit_id] = eta.grant_rate(int(live or 0) + int(freed or 0), rollup_rate)
    return rates


# --- the sweep's part --------------------------------------------------------------------------


def record(now: datetime) -> int:
    """The sweep's insights step: sample this minute's counters (once), roll up the minutes that
    ended, purge old ones. Returns how many minutes it rolled up. An idle pass (this minute
    sampled, nothing to roll up) is one query."""
    state = _state(now)
    minute = floor_minute(now)
    if state.sampled_minute is None or state.sampled_minute < minute:
        sample(minute)
    rolled = roll_up(now, state=state)
    if rolled:
        purge(now - INSIGHTS_RETENTION)
    return rolled


def sample(minute: datetime) -> bool:
    """Copy every limit's counters into `minute`'s row, if no sweep did it yet (compare-and-set
    on SweepState.sampled_minute). Returns whether it sampled."""
    with transaction.atomic():
        claimed = (
            SweepState.objects.filter(id=1)
            .filter(Q(sampled_minute__isnull=True) | Q(sampled_minute__lt=minute))
            .update(sampled_minute=minute)
        )
        if claimed:
            with connection.cursor() as cursor:
                cursor.execute(_SAMPLE_SQL, [_db_time(minute)])
                cursor.execute(_record_peaks_sql(), _peak_params(minute - MINUTE))
    return bool(claimed)


_SAMPLE_SQL = f"""
    INSERT INTO {_MINUTE_TABLE} (limit_id, minute, busy, reserved, waiting, capacity, next_position,
                                 {", ".join(COUNT_FIELDS)})
    SELECT id, %s, busy_count, reserved_count, waiting_count, {CAPACITY_IN_FORCE_SQL},
           next_position, {", ".join("0" for _ in COUNT_FIELDS)}
    FROM {_LIMIT_TABLE}
    WHERE declared OR busy_count + reserved_count + waiting_count > 0
    ON CONFLICT (limit_id, minute) DO UPDATE SET
        busy = excluded.busy, reserved = excluded.reserved, waiting = excluded.waiting, capacity = excluded.capacity,
        next_position = excluded.next_position
"""


def record_peaks(minute: datetime) -> None:
    """Set `minute`'s peaks (waiting_peak, in_use_peak) of every limit sampled in the hour before
    it: one statement (_record_peaks_sql). The sample of the next minute calls it."""
    with transaction.atomic(), connection.cursor() as cursor:
        no_jit(cursor)
        cursor.execute(_record_peaks_sql(), _peak_params(minute))


def no_jit(cursor: Any) -> None:
    """PostgreSQL compiles a statement whose estimated cost passes jit_above_cost (100,000): the
    peaks' estimate sits near it (a CI run measured 104,163 for a 43 ms statement, which JIT made
    slower), and it returns a few rows: never compile it (SET LOCAL: this transaction only)."""
    if connection.vendor == "postgresql":
        cursor.execute("SET LOCAL jit = off")


def _peak_params(minute: datetime) -> dict[str, Any]:
    return {"a": _db_time(minute), "b": _db_time(minute + MINUTE), "since": _db_time(minute - PEAK_REFERENCE_AGE)}


def _record_peaks_sql() -> str:
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
                       (SELECT m.next_position FROM {_MINUTE_TABLE} AS m
                        WHERE m.limit_id = l.id AND m.minute >= %(since)s AND m.minute < %(a)s
                          AND m.next_position IS NOT NULL
                        ORDER BY m.minute DESC LIMIT 1) AS after
                FROM {_LIMIT_TABLE} AS l
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
            SELECT limit_id, 'w', finished_at, -1 FROM {_QUEUE_TABLE} WHERE state <> 'waiting' AND finished_at >= %(a)s
            UNION ALL
            SELECT limit_id, 'w', enqueued_at, 1 FROM {_QUEUE_TABLE}
            WHERE state <> 'waiting' AND finished_at >= %(a)s AND enqueued_at >= %(a)s
            UNION ALL
            SELECT s.limit_id, 'u', s.granted_at, 1 FROM ref
            JOIN {_SLOT_TABLE} AS s ON s.limit_id = ref.limit_id AND s.state IN {live} AND s.granted_at >= %(a)s
            UNION ALL
            SELECT limit_id, 'u', freed_at, -1 FROM {_SLOT_TABLE} WHERE freed_at IS NOT NULL AND freed_at >= %(a)s
            UNION ALL
            SELECT limit_id, 'u', granted_at, 1 FROM {_SLOT_TABLE}
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
        INSERT INTO {_MINUTE_TABLE} (limit_id, minute, waiting_peak, in_use_peak)
        SELECT limit_id, %(a)s, max(CASE WHEN k = 'w' THEN n END), max(CASE WHEN k = 'u' THEN n END)
        FROM counts
        GROUP BY limit_id
        ON CONFLICT (limit_id, minute) DO UPDATE SET
            waiting_peak = excluded.waiting_peak, in_use_peak = excluded.in_use_peak
    """


def roll_up(now: datetime, *, state: SweepState | None = None, max_minutes: int = MAX_MINUTES_PER_PASS) -> int:
    """Roll up the minutes that ended ROLLUP_GRACE before `now` (and before the database's own
    clock), oldest first, at most `max_minutes`, recounting the RECOUNT_WINDOW before them, all
    in one transaction under the SweepState row's lock (the module docstring, step 2). Returns
    how many new minutes it rolled up."""
    ready_before = floor_minute(now - ROLLUP_GRACE)  # minutes that start before this are done
    until = (state or _state(now)).rolled_until
    if until is None or until >= ready_before:
        return 0  # idle: no query
    with transaction.atomic():
        row = SweepState.objects.select_for_update().filter(id=1).annotate(db_now=Now())
        locked = row.values_list("rolled_until", "db_now").first()
        if locked is None:
            return 0
        until, db_now = locked
        if until is None:
            return 0
        # Never past the database's clock: an app host whose clock jumped ahead must not move
        # rolled_until past minutes that are still to come (their events would never count).
        ready = min(ready_before, floor_minute(db_now - ROLLUP_GRACE))
        if until >= ready:
            return 0
        start = max(until, ready - MAX_BACKFILL)  # stopped for long: skip ahead
        end = min(start + max_minutes * MINUTE, ready)
        recount_from = min(start, max(end - RECOUNT_WINDOW, ready - MAX_BACKFILL))
        params = {"a": _db_time(recount_from), "b": _db_time(end)}
        with connection.cursor() as cursor:
            for statement in _recount_statements():  # b, c: the totals' differences, the minutes
                cursor.execute(statement, params)
            spans = {"a": _db_time(floor_span(recount_from)), "b": params["b"]}
            cursor.execute(_key_spans_sql(), spans)  # d: the key spans, set
        SweepState.objects.filter(id=1).update(rolled_until=end)
    return (end - start) // MINUTE


def _state(now: datetime) -> SweepState:
    """The SweepState row, created if need be with rolled_until set: insights count from the
    first sweep that runs with them (its first pass also recounts the RECOUNT_WINDOW before)."""
    state = SweepState.objects.filter(id=1).first()
    if state is None or state.rolled_until is None:
        start = floor_minute(now - ROLLUP_GRACE)
        if state is None:
            state, _ = SweepState.objects.get_or_create(id=1, defaults={"last_run_at": now, "rolled_until": start})
        SweepState.objects.filter(id=1, rolled_until__isnull=True).update(rolled_until=start)
        state.refresh_from_db()
    return state


def history_needed_from(rolled_until: datetime | None) -> datetime | None:
    """The oldest moment whose history rows the next rollup may read (the start of the key span
    holding rolled_until - RECOUNT_WINDOW); None when insights have not started. The sweep never
    purges history newer than this (limits.engine.sweeper)."""
    if rolled_until is None:
        return None
    return floor_span(rolled_until - RECOUNT_WINDOW)


def _db_time(moment: datetime) -> Any:
    """A datetime as the backend stores it (SQLite compares text: naive UTC, no offset)."""
    return connection.ops.adapt_datetimefield_value(moment)


def _wait_ms(later: str, earlier: str) -> str:
    """SQL for later - earlier in whole milliseconds, exact on both backends."""
    if connection.vendor == "postgresql":
        return f"round(extract(epoch from ({later} - {earlier})) * 1000)::bigint"
    return f"({_sqlite_ms(later)} - {_sqlite_ms(earlier)})"


def _sqlite_ms(column: str) -> str:
    return (
        f"(CAST(strftime('%%s', {column}) AS INTEGER) * 1000"
        f" + CAST(round(strftime('%%f', {column}) * 1000) AS INTEGER) %% 1000)"
    )


def _minute_of(column: str) -> str:
    """SQL: the start of the minute holding `column`, as the backend stores a minute."""
    if connection.vendor == "postgresql":
        return f"date_trunc('minute', {column})"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:00', {column})"


def _span_of(column: str) -> str:
    """SQL: the start of the 10-minute span holding `column`, as the backend stores it."""
    if connection.vendor == "postgresql":
        return f"(date_trunc('hour', {column}) + floor(extract(minute from {column}) / 10) * interval '10 minutes')"
    return f"(strftime('%%Y-%%m-%%d %%H:', {column}) || (CAST(strftime('%%M', {column}) AS INTEGER) / 10) || '0:00')"


def _bucket_sums() -> list[str]:
    """SQL: per bucket, how many of the rows' waits `w` (ms) fall in it (above the bound before)."""
    buckets, previous = [], None
    for bound in WAIT_BUCKETS_S:
        low = "w IS NOT NULL" if previous is None else f"w > {previous * 1000}"
        buckets.append(f"sum(CASE WHEN {low} AND w <= {bound * 1000} THEN 1 ELSE 0 END)")
        previous = bound
    return buckets


KEY_FIELDS = ("grants", "queue_grants", "wait_ms_sum", *BUCKET_FIELDS)
EVENT_FIELDS = (
    "grants",
    "released_by_workflow",
    "released_by_operator",
    "released_by_max_hold",
    "released_by_run_end",
    "lapses",
    "timeouts",
)


def _events_sql(*, keyed: bool) -> str:
    """SQL: every event in [%(a)s, %(b)s), one row each: limit_id (and key, for grants with a
    key), `at` (its time), g (a grant), qg (from the queue), rw, ro, rm, rr (a release by the
    workflow, an operator, max hold, the run's end), lp (a lapse), t (a time-out), w (the wait
    in ms of a grant, else NULL). Each a range scan of an existing index (module docstring)."""
    wait = _wait_ms("finished_at", "enqueued_at")
    key = "key, " if keyed else ""
    with_key = " AND key <> ''" if keyed else ""
    at_once = f"queue_entry_id IS NULL AND granted_at >= %(a)s AND granted_at < %(b)s{with_key}"
    grant = "1, 0, 0, 0, 0, 0, 0, 0"
    events = f"""
        SELECT limit_id, {key}finished_at AS at,
               CASE WHEN state = 'granted' THEN 1 ELSE 0 END AS g,
               CASE WHEN state = 'granted' THEN 1 ELSE 0 END AS qg,
               0 AS rw, 0 AS ro, 0 AS rm, 0 AS rr, 0 AS lp,
               CASE WHEN state = 'timed_out' THEN 1 ELSE 0 END AS t,
               CASE WHEN state = 'granted' THEN {wait} END AS w
        FROM {_QUEUE_TABLE}
        WHERE state <> 'waiting' AND finished_at >= %(a)s AND finished_at < %(b)s
          AND state IN ({"'granted'" if keyed else "'granted', 'timed_out'"}){with_key}
        UNION ALL
        SELECT limit_id, {key}granted_at, {grant}, 0 FROM {_SLOT_TABLE}
        WHERE state IN ('reserved', 'busy') AND {at_once}
        UNION ALL
        SELECT limit_id, {key}granted_at, {grant}, 0 FROM {_SLOT_TABLE}
        WHERE freed_at IS NOT NULL AND freed_at >= %(a)s AND {at_once}
    """
    if not keyed:
        events += f"""
        UNION ALL
        SELECT limit_id, freed_at, 0, 0,
               CASE WHEN state = 'released' AND freed_by = '' THEN 1 ELSE 0 END,
               CASE WHEN state = 'released' AND freed_by <> '' THEN 1 ELSE 0 END,
               CASE WHEN state = 'expired' THEN 1 ELSE 0 END,
               CASE WHEN state = 'run_ended' THEN 1 ELSE 0 END,
               CASE WHEN state = 'lapsed' THEN 1 ELSE 0 END,
               0, NULL
        FROM {_SLOT_TABLE}
        WHERE freed_at IS NOT NULL AND freed_at >= %(a)s AND freed_at < %(b)s
    """
    return events


def _per_minute_sql() -> str:
    """SQL: each (limit, minute) of [%(a)s, %(b)s) with any event, its counts (COUNT_FIELDS)."""
    sums = ["sum(g)", "sum(qg)", "sum(rw)", "sum(ro)", "sum(rm)", "sum(rr)", "sum(lp)", "sum(t)", "coalesce(sum(w), 0)"]
    columns = ", ".join(f"{expr} AS {name}" for expr, name in zip([*sums, *_bucket_sums()], COUNT_FIELDS, strict=True))
    minute = _minute_of("at")
    return f"""
        SELECT limit_id, {minute} AS m, {columns}
        FROM ({_events_sql(keyed=False)}) AS events
        GROUP BY limit_id, {minute}
        HAVING sum(g) + sum(rw) + sum(ro) + sum(rm) + sum(rr) + sum(lp) + sum(t) > 0
    """


def _recount_statements() -> list[str]:
    """Steps b and c: the totals' differences first, then the minute rows. On PostgreSQL one
    statement scans the history once for both (a data-modifying WITH: its parts see the same
    snapshot, so the totals read the minute rows as they were before); on SQLite two."""
    if connection.vendor != "postgresql":
        counted = f"({_per_minute_sql()})"
        return [_totals_sql(counted), _minutes_sql(counted)]
    return [
        f"""
        WITH counted AS MATERIALIZED ({_per_minute_sql()}),
             added AS ({_totals_sql("counted")})
        {_minutes_sql("counted")}
        """
    ]


def _minutes_sql(counted: str) -> str:
    """Step b: set the minute rows of [%(a)s, %(b)s) to `counted`, their recount (idempotent;
    rows the recount does not change are not written)."""
    columns = ", ".join(COUNT_FIELDS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in COUNT_FIELDS)
    return f"""
        INSERT INTO {_MINUTE_TABLE} (limit_id, minute, {columns})
        SELECT limit_id, m, {columns} FROM {counted} AS n
        WHERE true
        ON CONFLICT (limit_id, minute) DO UPDATE SET {updates}
        WHERE {_changed(_MINUTE_TABLE, COUNT_FIELDS)}
    """


def _changed(table: str, fields: Sequence[str]) -> str:
    """SQL: the row differs from the recount (an unchanged row is not written again)."""
    return " OR ".join(f"{table}.{name} <> excluded.{name}" for name in fields)


def _totals_sql(counted: str) -> str:
    """Step c: add to each limit's totals `counted`, the recount of [%(a)s, %(b)s), minus what
    its minute rows hold already (each field's difference clamped at 0: see the module docstring). Run
    before step b, in the same transaction."""

    def diff(name: str) -> str:
        old = f"coalesce(o.{name}, 0)"
        return f"sum(CASE WHEN n.{name} > {old} THEN n.{name} - {old} ELSE 0 END)"

    columns = ", ".join(COUNT_FIELDS)
    adds = ", ".join(f"{name} = {_TOTALS_TABLE}.{name} + excluded.{name}" for name in COUNT_FIELDS)
    return f"""
        INSERT INTO {_TOTALS_TABLE} (limit_id, {columns})
        SELECT n.limit_id, {", ".join(diff(name) for name in COUNT_FIELDS)}
        FROM {counted} AS n
        LEFT JOIN {_MINUTE_TABLE} AS o ON o.limit_id = n.limit_id AND o.minute = n.m
        WHERE true
        GROUP BY n.limit_id
        HAVING {" + ".join(diff(name) for name in EVENT_FIELDS)} > 0
        ON CONFLICT (limit_id) DO UPDATE SET {adds}
    """


def _key_spans_sql() -> str:
    """Step d: set the key spans of [%(a)s, %(b)s) (a starts a span) to their recount: every
    grant with a key, one row per (limit, key, span) (idempotent)."""
    span = _span_of("at")
    columns = ", ".join(KEY_FIELDS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in KEY_FIELDS)
    return f"""
        INSERT INTO {_KEY_SPAN_TABLE} (limit_id, key, span, {columns})
        SELECT limit_id, key, {span}, count(*), sum(qg), coalesce(sum(w), 0), {", ".join(_bucket_sums())}
        FROM ({_events_sql(keyed=True)}) AS events
        WHERE true
        GROUP BY limit_id, key, {span}
        ON CONFLICT (limit_id, key, span) DO UPDATE SET {updates}
        WHERE {_changed(_KEY_SPAN_TABLE, KEY_FIELDS)}
    """


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
        cursor.execute(_peaks_sql(), {"a": _db_time(start), "b": _db_time(end)})
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
        SELECT limit_id, 'w' AS k, finished_at AS t, 0 AS o, -1 AS d FROM {_QUEUE_TABLE}
        WHERE {finished} AND finished_at < %(b)s
        UNION ALL
        SELECT limit_id, 'w', %(a)s, 1, count(*) FROM {_QUEUE_TABLE} WHERE {finished} AND enqueued_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'w', %(a)s, 1, count(*) FROM {_QUEUE_TABLE} WHERE {waiting} AND enqueued_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'w', enqueued_at, 2, 1 FROM {_QUEUE_TABLE}
        WHERE {finished} AND {begins.format(column="enqueued_at")}
        UNION ALL
        SELECT limit_id, 'w', enqueued_at, 2, 1 FROM {_QUEUE_TABLE}
        WHERE {waiting} AND {begins.format(column="enqueued_at")}
        UNION ALL
        SELECT limit_id, 'u', freed_at, 0, -1 FROM {_SLOT_TABLE} WHERE {freed} AND freed_at < %(b)s
        UNION ALL
        SELECT limit_id, 'u', %(a)s, 1, count(*) FROM {_SLOT_TABLE} WHERE {freed} AND granted_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'u', %(a)s, 1, count(*) FROM {_SLOT_TABLE} WHERE {live} AND granted_at < %(a)s
        GROUP BY limit_id
        UNION ALL
        SELECT limit_id, 'u', granted_at, 2, 1 FROM {_SLOT_TABLE} WHERE {freed} AND {begins.format(column="granted_at")}
        UNION ALL
        SELECT limit_id, 'u', granted_at, 2, 1 FROM {_SLOT_TABLE} WHERE {live} AND {begins.format(column="granted_at")}
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
        SELECT limit_id, {_minute_of("t")} AS m,
               max(CASE WHEN k = 'w' THEN {peak} END), max(CASE WHEN k = 'u' THEN {peak} END)
        FROM counts
        GROUP BY limit_id, {_minute_of("t")}
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
            SELECT q.enqueued_at FROM {_QUEUE_TABLE} AS q
            WHERE q.limit_id = ref.limit_id AND q.state = 'waiting'
              AND q.position >= ref.after AND q.position < ref.next_now AND q.enqueued_at >= %(a)s
            OFFSET 0
        ) AS tail"""
    return f"""JOIN {_QUEUE_TABLE} AS tail
            ON tail.limit_id = ref.limit_id AND tail.state = 'waiting'
               AND tail.position >= ref.after AND tail.position < ref.next_now
            WHERE tail.enqueued_at >= %(a)s"""


def purge(cutoff: datetime, key_cutoff: datetime | None = None) -> int:
    """Delete minute rows older than `cutoff` and key spans older than `key_cutoff` (default:
    KEY_RETENTION before `cutoff` + INSIGHTS_RETENTION, i.e. before now): about PURGE_BATCH of
    each per call (whole minutes or spans, so up to one minute's or span's rows more), four
    statements. LimitTotals are never purged."""
    if key_cutoff is None:
        key_cutoff = cutoff + INSIGHTS_RETENTION - KEY_RETENTION
    old_minutes = LimitMinute.objects.filter(minute__lt=cutoff)
    last = old_minutes.order_by("minute").values_list("minute", flat=True)[PURGE_BATCH - 1 : PURGE_BATCH].first()
    deleted, _ = (old_minutes if last is None else old_minutes.filter(minute__lte=last)).delete()
    old_spans = LimitKeySpan.objects.filter(span__lt=key_cutoff)
    last = old_spans.order_by("span").values_list("span", flat=True)[PURGE_BATCH - 1 : PURGE_BATCH].first()
    spans, _ = (old_spans if last is None else old_spans.filter(span__lte=last)).delete()
    return deleted + spans


# --- reading: the limit page's figures ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WaitFigures:
    """Time to grant over a window. Over all grants: how many, p50, p95 and the mean (a grant
    made at once counts as 0 s). Over the grants from the queue only (the runs that waited,
    `waited` of them): p50, p95 and the mean of their wait from joining the queue to the grant.
    Percentiles are bucket bounds in seconds (None: no grant; math.inf: beyond the last bound)."""

    grants: int
    waited: int
    p50: float | None
    p95: float | None
    mean_s: float | None
    queued_p50: float | None
    queued_p95: float | None
    queued_mean_s: float | None


def percentile_bound(counts: Sequence[int], total: int, fraction: float) -> float | None:
    """The smallest bucket bound (WAIT_BUCKETS_S) with at least ceil(fraction x total) of the
    `total` grants at or under it (nearest rank); math.inf when that rank lies past the last."""
    if total <= 0:
        return None
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for bound, count in zip(WAIT_BUCKETS_S, counts, strict=True):
        seen += count
        if seen >= rank:
            return float(bound)
    return math.inf


def wait_figures(limit: Limit, *, now: datetime | None = None) -> dict[str, WaitFigures]:
    """Time to grant over the last hour and the last 24 hours (rolled-up minutes that started in
    the window), one query."""
    now = now or box_clock.now()
    hour, day = floor_minute(now) - timedelta(hours=1), floor_minute(now) - timedelta(hours=24)
    in_hour = Q(minute__gte=hour)
    sums: dict[str, Sum] = {}
    for name in ("grants", "queue_grants", "wait_ms_sum", *BUCKET_FIELDS):
        sums[f"h_{name}"] = Sum(name, filter=in_hour, default=0)
        sums[f"d_{name}"] = Sum(name, default=0)
    row = LimitMinute.objects.filter(limit=limit, minute__gte=day).aggregate(**sums)
    return {"hour": _figures(row, "h_"), "day": _figures(row, "d_")}


def _figures(row: dict[str, Any], prefix: str) -> WaitFigures:
    grants = int(row[f"{prefix}grants"] or 0)
    queued = int(row[f"{prefix}queue_grants"] or 0)
    counts = [int(row[f"{prefix}{name}"] or 0) for name in BUCKET_FIELDS]
    # The grants made at once are all in the first bucket (0 s): without them, the queue grants.
    queued_counts = [max(counts[0] - (grants - queued), 0), *counts[1:]]
    wait_s = (row[f"{prefix}wait_ms_sum"] or 0) / 1000
    return WaitFigures(
        grants=grants,
        waited=queued,
        p50=percentile_bound(counts, grants, 0.50),
        p95=percentile_bound(counts, grants, 0.95),
        mean_s=wait_s / grants if grants else None,
        queued_p50=percentile_bound(queued_counts, queued, 0.50),
        queued_p95=percentile_bound(queued_counts, queued, 0.95),
        queued_mean_s=wait_s / queued if queued else None,
    )


@dataclass(frozen=True, slots=True)
class KeyWaits:
    """One key's time to grant: `hour` and `day` over the 10-minute spans that started in the
    last hour / 24 hours (so up to 10 minutes more than the window), and its runs waiting now."""

    key: str
    waiting: int
    hour: WaitFigures
    day: WaitFigures


def key_wait_figures(limit: Limit, *, now: datetime | None = None) -> list[KeyWaits]:
    """Time to grant of the limit's KEYS_SHOWN keys with the most runs waiting now (then the
    busiest): two queries, at most KEYS_SHOWN x 145 span rows, whatever the number of keys or
    the history. Empty, and no query, for a limit with no per-key pools and no slot or waiting
    run with a key now."""
    now = now or box_clock.now()
    if limit.per_key is None and not (
        limit.keyed_busy_count or limit.keyed_reserved_count or limit.keyed_waiting_count
    ):
        return []
    top = list(
        LimitKey.objects.filter(limit=limit)
        .order_by("-waiting_count", "-busy_count", "key")
        .values_list("key", "waiting_count")[:KEYS_SHOWN]
    )
    if not top:
        return []
    hour, day = floor_span(now) - timedelta(hours=1), floor_span(now) - timedelta(hours=24)
    in_hour = Q(span__gte=hour)
    sums: dict[str, Sum] = {}
    for name in KEY_FIELDS:
        sums[f"h_{name}"] = Sum(name, filter=in_hour, default=0)
        sums[f"d_{name}"] = Sum(name, default=0)
    rows: dict[str, dict[str, Any]] = {
        row["key"]: dict(row)
        for row in LimitKeySpan.objects.filter(limit=limit, key__in=[key for key, _ in top], span__gte=day)
        .values("key")
        .annotate(**sums)
    }
    empty = dict.fromkeys([f"{p}{name}" for p in ("h_", "d_") for name in KEY_FIELDS], 0)
    return [
        KeyWaits(key, waiting, _figures(rows.get(key, empty), "h_"), _figures(rows.get(key, empty), "d_"))
        for key, waiting in top
    ]


@dataclass(frozen=True, slots=True)
class Point:
    """One chart point: the average of the samples of its minutes (None: no sample), and the
    most waiting and in use at any instant of them (None: no minute of it has its peak yet)."""

    at: datetime
    busy: float | None
    reserved: float | None
    waiting: float | None
    capacity: float | None
    waiting_peak: float | None = None
    in_use_peak: float | None = None


def backlog_points(limit: Limit, *, now: datetime | None = None) -> dict[str, list[Point]]:
    """The backlog chart's points, one query: 'hour', the 60 minutes before the current one (one
    point each), and 'day', the 144 ten-minute spans before the current one (the average of each
    span's samples, the largest of its minutes' peaks). Oldest first."""
    now = now or box_clock.now()
    current = floor_minute(now)
    day_end = current.replace(minute=current.minute - current.minute % 10)
    day_start = day_end - timedelta(hours=24)
    hour_start = current - timedelta(hours=1)
    rows = LimitMinute.objects.filter(
        limit=limit, minute__gte=min(day_start, hour_start), minute__lt=current, busy__isnull=False
    ).values_list("minute", "busy", "reserved", "waiting", "capacity", "waiting_peak", "in_use_peak")
    by_minute = {row[0]: row[1:] for row in rows}
    hour = [_point(hour_start + i * MINUTE, [by_minute.get(hour_start + i * MINUTE)]) for i in range(60)]
    day = []
    for i in range(144):
        span = day_start + i * 10 * MINUTE
        day.append(_point(span, [by_minute.get(span + j * MINUTE) for j in range(10)]))
    return {"hour": hour, "day": day}


def _point(at: datetime, samples: list[tuple[int | None, ...] | None]) -> Point:
    present = [s for s in samples if s is not None]
    if not present:
        return Point(at, None, None, None, None)
    averages = [sum(float(s[i] or 0) for s in present) / len(present) for i in range(4)]
    peaks: list[float | None] = []
    for i in (4, 5):
        values = [value for s in present if (value := s[i]) is not None]
        peaks.append(float(max(values)) if values else None)
    return Point(at, *averages, *peaks)


# --- reading: Prometheus ----------------------------------------------------------------------


LimitFigures = tuple[str, str, int, int, int, int | None, int, datetime | None]


def metric_rows() -> tuple[list[LimitFigures], list[dict[str, Any]], SweepState | None]:
    """What /metrics reads, three queries whatever the number of limits or slots: each limit's
    counters, each limit's totals, the sweep's state."""
    limits = list(
        Limit.objects.filter(Q(declared=True) | Q(busy_count__gt=0) | Q(reserved_count__gt=0) | Q(waiting_count__gt=0))
        .order_by("name")
        .values_list(
            "name",
            "kind",
            "busy_count",
            "reserved_count",
            "waiting_count",
            "capacity_override",
            "declared_capacity",
            "paused_at",
        )
    )
    totals = list(LimitTotals.objects.order_by("limit__name").values("limit__name", "limit__kind", *COUNT_FIELDS))
    return limits, totals, SweepState.objects.filter(id=1).first()
