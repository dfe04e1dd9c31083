"""The rollups: what the limits did over time, counted per minute by the sweep (its writes).

The 15-second sweep (limits.engine.sweeper) calls `record` once per pass; it does two things.

1. **Sample** (once per minute, at the minute's first pass): one ``INSERT ... SELECT`` copies every
   limit's busy, reserved and waiting counters, its capacity and its next queue position into
   that minute's `LimitMinute` row. These are the backlog chart's points: the state about
   0-15 s after the minute began. A second statement sets the minute before's peaks, the most
   waiting and in use at any instant of it (peaks.record_peaks: a burst that came and went between
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
  per-limit rows), only for keys granted something, kept 25 h (what the page shows of them:
  limits.insights.reads).
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

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from limits.insights.minutes import (
    COUNT_FIELDS,
    KEY_FIELDS,
    KEY_SPAN_TABLE,
    LIMIT_TABLE,
    MINUTE,
    MINUTE_TABLE,
    QUEUE_TABLE,
    ROLLUP_GRACE,
    SLOT_TABLE,
    TOTALS_TABLE,
    db_time,
    floor_minute,
    floor_span,
    minute_of,
)
from limits.insights.peaks import peak_params, record_peaks_sql
from limits.models import CAPACITY_IN_FORCE_SQL, WAIT_BUCKETS_S, LimitKeySpan, LimitMinute, SweepState

MAX_MINUTES_PER_PASS = 10
MAX_BACKFILL = timedelta(hours=1)
RECOUNT_WINDOW = timedelta(minutes=15)
INSIGHTS_RETENTION = timedelta(days=7)
KEY_RETENTION = timedelta(hours=25)
PURGE_BATCH = 5_000
EVENT_FIELDS = (
    "grants",
    "released_by_workflow",
    "released_by_operator",
    "released_by_max_hold",
    "released_by_run_end",
    "lapses",
    "timeouts",
)


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
                cursor.execute(_SAMPLE_SQL, [db_time(minute)])
                cursor.execute(record_peaks_sql(), peak_params(minute - MINUTE))
    return bool(claimed)


_SAMPLE_SQL = f"""
    INSERT INTO {MINUTE_TABLE} (limit_id, minute, busy, reserved, waiting, capacity, next_position,
                                 {", ".join(COUNT_FIELDS)})
    SELECT id, %s, busy_count, reserved_count, waiting_count, {CAPACITY_IN_FORCE_SQL},
           next_position, {", ".join("0" for _ in COUNT_FIELDS)}
    FROM {LIMIT_TABLE}
    WHERE declared OR busy_count + reserved_count + waiting_count > 0
    ON CONFLICT (limit_id, minute) DO UPDATE SET
        busy = excluded.busy, reserved = excluded.reserved, waiting = excluded.waiting, capacity = excluded.capacity,
        next_position = excluded.next_position
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
        params = {"a": db_time(recount_from), "b": db_time(end)}
        with connection.cursor() as cursor:
            for statement in _recount_statements():  # b, c: the totals' differences, the minutes
                cursor.execute(statement, params)
            spans = {"a": db_time(floor_span(recount_from)), "b": params["b"]}
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
        FROM {QUEUE_TABLE}
        WHERE state <> 'waiting' AND finished_at >= %(a)s AND finished_at < %(b)s
          AND state IN ({"'granted'" if keyed else "'granted', 'timed_out'"}){with_key}
        UNION ALL
        SELECT limit_id, {key}granted_at, {grant}, 0 FROM {SLOT_TABLE}
        WHERE state IN ('reserved', 'busy') AND {at_once}
        UNION ALL
        SELECT limit_id, {key}granted_at, {grant}, 0 FROM {SLOT_TABLE}
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
        FROM {SLOT_TABLE}
        WHERE freed_at IS NOT NULL AND freed_at >= %(a)s AND freed_at < %(b)s
    """
    return events


def _per_minute_sql() -> str:
    """SQL: each (limit, minute) of [%(a)s, %(b)s) with any event, its counts (COUNT_FIELDS)."""
    sums = ["sum(g)", "sum(qg)", "sum(rw)", "sum(ro)", "sum(rm)", "sum(rr)", "sum(lp)", "sum(t)", "coalesce(sum(w), 0)"]
    columns = ", ".join(f"{expr} AS {name}" for expr, name in zip([*sums, *_bucket_sums()], COUNT_FIELDS, strict=True))
    minute = minute_of("at")
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
        INSERT INTO {MINUTE_TABLE} (limit_id, minute, {columns})
        SELECT limit_id, m, {columns} FROM {counted} AS n
        WHERE true
        ON CONFLICT (limit_id, minute) DO UPDATE SET {updates}
        WHERE {_changed(MINUTE_TABLE, COUNT_FIELDS)}
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
    adds = ", ".join(f"{name} = {TOTALS_TABLE}.{name} + excluded.{name}" for name in COUNT_FIELDS)
    return f"""
        INSERT INTO {TOTALS_TABLE} (limit_id, {columns})
        SELECT n.limit_id, {", ".join(diff(name) for name in COUNT_FIELDS)}
        FROM {counted} AS n
        LEFT JOIN {MINUTE_TABLE} AS o ON o.limit_id = n.limit_id AND o.minute = n.m
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
        INSERT INTO {KEY_SPAN_TABLE} (limit_id, key, span, {columns})
        SELECT limit_id, key, {span}, count(*), sum(qg), coalesce(sum(w), 0), {", ".join(_bucket_sums())}
        FROM ({_events_sql(keyed=True)}) AS events
        WHERE true
        GROUP BY limit_id, key, {span}
        ON CONFLICT (limit_id, key, span) DO UPDATE SET {updates}
        WHERE {_changed(KEY_SPAN_TABLE, KEY_FIELDS)}
    """
