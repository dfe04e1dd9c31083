"""Insights: what the limits did over time, rolled up per minute by the sweep.

The 15-second sweep (limits.engine.sweeper) calls `record` once per pass; it does two things.

1. **Sample** (once per minute, at the minute's first pass): one ``INSERT ... SELECT`` copies every
   limit's busy, reserved and waiting counters and its capacity into that minute's `LimitMinute`
   row. These are the backlog chart's points: the state about 0-15 s after the minute began.
2. **Roll up** each minute that ended at least ROLLUP_GRACE ago, oldest first, at most
   MAX_MINUTES_PER_PASS per pass. For minute [a, b), in one transaction:
   a. compare-and-set SweepState.rolled_until from a to b (0 rows: another sweep did it: stop);
   b. one ``INSERT ... SELECT ... GROUP BY limit_id ... ON CONFLICT DO UPDATE`` counts, from the
      history rows, every limit's grants, releases (by the workflow, an operator, max hold, the
      run's end), lapses, time-outs and time-to-grant buckets into its minute row;
   c. one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` adds those counts to `LimitTotals`;
   d. one more adds the minute's grants with a key to their key's 10-minute `LimitKeySpan`.
   Then at most four statements purge minutes older than INSIGHTS_RETENTION (7 days) and key
   spans older than KEY_RETENTION (25 h), in batches.

So the number of statements per rolled-up minute is constant (4) whatever the number of limits,
and nothing is written on the hot path (acquire, confirm, release stay as they were).

Where the counts come from (each a range scan of an existing partial index):
- queue grants and time-outs: QueueEntry rows finished in [a, b) (``queue_history_age``); the
  wait of a queue grant is finished_at - enqueued_at (a run whose reservation lapsed and that
  went back to the queue waits again from then on);
- frees: Slot rows freed in [a, b) (``slot_history_age``): ``released`` with no actor is the
  workflow's release, with an actor an operator's; ``expired`` is max hold; ``run_ended`` the
  run's end (with_limit); ``lapsed`` a reservation not confirmed in time;
- grants made at once (no queue entry) in [a, b): those still live (``slot_live_by_limit``, a
  scan of the live slots, bounded by the total capacity, not by history) and those freed since a
  (``slot_history_age``, bounded by the rollup lag).

Decisions:
- A grant made at once counts in time to grant as 0 s (bucket ``le 0``): the figures answer "how
  long did an acquisition take to get its slot", so the histogram's count equals the grants.
  The limit page also shows how many of the grants had to wait.
- Percentiles come from the bucket counts (WAIT_BUCKETS_S): p-th percentile = the smallest bucket
  bound with at least ceil(p x count) grants at or under it (the nearest-rank rule). The true
  value lies between the bound before and that bound; the page shows "≤ bound". When every wait
  falls on a bound (tests do that) the figure is exact. Beyond the last bound (24 h): "> 24 h".
- Rollup lag: a minute is rolled up ROLLUP_GRACE (30 s) after it ends, so transactions that read
  their clock inside it have committed; with the 15 s sweep, the counts and counters are 30-45 s
  behind the end of their minute (up to 1 min 45 s behind real time).
- Per key: 10-minute spans, not minutes (10,000 keys x 1,440 minutes a day would dwarf the
  per-limit rows), only for keys granted something, kept 25 h; the page shows the KEYS_SHOWN
  keys with the most runs waiting now (two queries, at most 5 x 145 rows). A key's "last hour"
  is the spans that started in it: up to 10 minutes more.
- Counting starts at the first sweep that runs with insights (no history before it is rolled up).
  A sweep that was stopped for longer than MAX_BACKFILL (1 h) starts again from MAX_BACKFILL ago:
  the minutes before are skipped (counted nowhere), so a restart never scans days of history.

What must never happen (tests/insights/ checks each):
- a minute counted twice into LimitTotals or a key's span (the compare-and-set of step 2a, in
  the same transaction as the counts: a second sweep finds rolled_until moved and adds nothing);
- a counter going backwards (totals only ever add a minute's counts; the purge deletes
  LimitMinute rows, never totals);
- a grant counted in two minutes, or none (each is counted once, in the minute of its grant
  time: exactly one of the live and the freed arms sees a slot);
- the rollup writing to a limit, slot or queue row (it only reads them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from limits.models import (
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

MINUTE = timedelta(minutes=1)
ROLLUP_GRACE = timedelta(seconds=30)
SWEEP_PERIOD = timedelta(seconds=15)
MAX_MINUTES_PER_PASS = 10
MAX_BACKFILL = timedelta(hours=1)
INSIGHTS_RETENTION = timedelta(days=7)
KEY_SPAN = timedelta(minutes=10)
KEY_RETENTION = timedelta(hours=25)
KEYS_SHOWN = 5
PURGE_BATCH = 5_000
RATE_WINDOW_MINUTES = 10

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
    RATE_WINDOW_MINUTES (10) rolled-up minutes divided by their 600 s; None when nothing was
    granted then. One query, whatever the number of ids.

    The window ends at the last minute the rollup has surely done while the sweep runs (the one
    that ended ROLLUP_GRACE + SWEEP_PERIOD ago), so a minute not rolled up yet never reads as 0.
    In the first 10 minutes after insights began counting, the rate reads low (the minutes
    before count as 0 grants).
    """
    ids = list(dict.fromkeys(limit_ids))
    if not ids:
        return {}
    end = floor_minute((now or timezone.now()) - ROLLUP_GRACE - SWEEP_PERIOD)
    start = end - RATE_WINDOW_MINUTES * MINUTE
    rows = (
        LimitMinute.objects.filter(limit_id__in=ids, minute__gte=start, minute__lt=end, grants__gt=0)
        .values("limit_id")
        .annotate(granted=Sum("grants"))
        .values_list("limit_id", "granted")
    )
    rates: dict[int, float | None] = dict.fromkeys(ids)
    for limit_id, granted in rows:
        rates[limit_id] = granted / (RATE_WINDOW_MINUTES * 60)
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
    return bool(claimed)


_SAMPLE_SQL = f"""
    INSERT INTO {_MINUTE_TABLE} (limit_id, minute, busy, reserved, waiting, capacity, {", ".join(COUNT_FIELDS)})
    SELECT id, %s, busy_count, reserved_count, waiting_count, coalesce(capacity_override, declared_capacity),
           {", ".join("0" for _ in COUNT_FIELDS)}
    FROM {_LIMIT_TABLE}
    WHERE declared OR busy_count + reserved_count + waiting_count > 0
    ON CONFLICT (limit_id, minute) DO UPDATE SET
        busy = excluded.busy, reserved = excluded.reserved, waiting = excluded.waiting, capacity = excluded.capacity
"""


def roll_up(now: datetime, *, state: SweepState | None = None, max_minutes: int = MAX_MINUTES_PER_PASS) -> int:
    """Roll up the minutes that ended ROLLUP_GRACE before `now`, oldest first, at most
    `max_minutes`, each in its own transaction (the module docstring, step 2)."""
    ready_before = floor_minute(now - ROLLUP_GRACE)  # minutes that start before this are done
    start = (state or _state(now)).rolled_until
    rolled = 0
    while start is not None and start < ready_before and rolled < max_minutes:
        if start < ready_before - MAX_BACKFILL:
            # Stopped for long: skip ahead (compare-and-set too), never scan days of history.
            SweepState.objects.filter(id=1, rolled_until=start).update(rolled_until=ready_before - MAX_BACKFILL)
        else:
            end = start + MINUTE
            with transaction.atomic():
                if SweepState.objects.filter(id=1, rolled_until=start).update(rolled_until=end):
                    _count_minute(start, end)
                    _add_to_totals(start)
                    _add_to_key_spans(start, end)
                    rolled += 1
                    start = end
                    continue
        start = SweepState.objects.filter(id=1).values_list("rolled_until", flat=True).first()
    return rolled


def _state(now: datetime) -> SweepState:
    """The SweepState row, created if need be with rolled_until set: insights count from the
    first sweep that runs with them (the minute after it)."""
    state = SweepState.objects.filter(id=1).first()
    if state is None or state.rolled_until is None:
        start = floor_minute(now - ROLLUP_GRACE)
        if state is None:
            state, _ = SweepState.objects.get_or_create(id=1, defaults={"last_run_at": now, "rolled_until": start})
        SweepState.objects.filter(id=1, rolled_until__isnull=True).update(rolled_until=start)
        state.refresh_from_db()
    return state


def _count_minute(start: datetime, end: datetime) -> None:
    """Step 2b: (re)count minute [start, end) into its rows. Idempotent: the counts are set."""
    with connection.cursor() as cursor:
        cursor.execute(_count_sql(), {"a": _db_time(start), "b": _db_time(end)})


def _add_to_totals(start: datetime) -> None:
    """Step 2c: add minute `start`'s counts to the totals. Not idempotent: only ever called in
    the transaction whose compare-and-set claimed the minute."""
    with connection.cursor() as cursor:
        cursor.execute(_TOTALS_SQL, [_db_time(start)])


def _add_to_key_spans(start: datetime, end: datetime) -> None:
    """Step 2d: add minute [start, end)'s grants with a key to their key's 10-minute span. Not
    idempotent either: only in the transaction that claimed the minute."""
    params = {"a": _db_time(start), "b": _db_time(end), "span": _db_time(floor_span(start))}
    with connection.cursor() as cursor:
        cursor.execute(_key_spans_sql(), params)


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


def _bucket_sums() -> str:
    """SQL: per bucket, how many of the rows' waits `w` (ms) fall in it (above the bound before)."""
    buckets, previous = [], None
    for bound in WAIT_BUCKETS_S:
        low = "w IS NOT NULL" if previous is None else f"w > {previous * 1000}"
        buckets.append(f"sum(CASE WHEN {low} AND w <= {bound * 1000} THEN 1 ELSE 0 END)")
        previous = bound
    return ", ".join(buckets)


KEY_FIELDS = ("grants", "queue_grants", "wait_ms_sum", *BUCKET_FIELDS)


def _key_spans_sql() -> str:
    """Grants with a key in minute [%(a)s, %(b)s), one row per (limit, key), added to the span."""
    wait = _wait_ms("finished_at", "enqueued_at")
    at_once = "queue_entry_id IS NULL AND granted_at >= %(a)s AND granted_at < %(b)s AND key <> ''"
    events = f"""
        SELECT limit_id, key, 1 AS qg, {wait} AS w
        FROM {_QUEUE_TABLE}
        WHERE state <> 'waiting' AND finished_at >= %(a)s AND finished_at < %(b)s AND state = 'granted'
          AND key <> ''
        UNION ALL
        SELECT limit_id, key, 0, 0 FROM {_SLOT_TABLE} WHERE state IN ('reserved', 'busy') AND {at_once}
        UNION ALL
        SELECT limit_id, key, 0, 0 FROM {_SLOT_TABLE} WHERE freed_at IS NOT NULL AND freed_at >= %(a)s AND {at_once}
    """
    columns = ", ".join(KEY_FIELDS)
    adds = ", ".join(f"{name} = {_KEY_SPAN_TABLE}.{name} + excluded.{name}" for name in KEY_FIELDS)
    return f"""
        INSERT INTO {_KEY_SPAN_TABLE} (limit_id, key, span, {columns})
        SELECT limit_id, key, %(span)s, count(*), sum(qg), coalesce(sum(w), 0), {_bucket_sums()}
        FROM ({events}) AS events
        WHERE true
        GROUP BY limit_id, key
        ON CONFLICT (limit_id, key, span) DO UPDATE SET {adds}
    """


def _count_sql() -> str:
    """Every event of minute [%(a)s, %(b)s), one row per limit with any, into its minute row."""
    wait = _wait_ms("finished_at", "enqueued_at")
    at_once = "queue_entry_id IS NULL AND granted_at >= %(a)s AND granted_at < %(b)s"
    freed_in = "freed_at < %(b)s"
    events = f"""
        SELECT limit_id,
               CASE WHEN state = 'granted' THEN 1 ELSE 0 END AS g,
               CASE WHEN state = 'granted' THEN 1 ELSE 0 END AS qg,
               0 AS rw, 0 AS ro, 0 AS rm, 0 AS rr, 0 AS lp,
               CASE WHEN state = 'timed_out' THEN 1 ELSE 0 END AS t,
               CASE WHEN state = 'granted' THEN {wait} END AS w
        FROM {_QUEUE_TABLE}
        WHERE state <> 'waiting' AND finished_at >= %(a)s AND finished_at < %(b)s
          AND state IN ('granted', 'timed_out')
        UNION ALL
        SELECT limit_id, 1, 0, 0, 0, 0, 0, 0, 0, 0
        FROM {_SLOT_TABLE}
        WHERE state IN ('reserved', 'busy') AND {at_once}
        UNION ALL
        SELECT limit_id,
               CASE WHEN {at_once} THEN 1 ELSE 0 END,
               0,
               CASE WHEN {freed_in} AND state = 'released' AND freed_by = '' THEN 1 ELSE 0 END,
               CASE WHEN {freed_in} AND state = 'released' AND freed_by <> '' THEN 1 ELSE 0 END,
               CASE WHEN {freed_in} AND state = 'expired' THEN 1 ELSE 0 END,
               CASE WHEN {freed_in} AND state = 'run_ended' THEN 1 ELSE 0 END,
               CASE WHEN {freed_in} AND state = 'lapsed' THEN 1 ELSE 0 END,
               0,
               CASE WHEN {at_once} THEN 0 END
        FROM {_SLOT_TABLE}
        WHERE freed_at IS NOT NULL AND freed_at >= %(a)s
    """
    columns = ", ".join(COUNT_FIELDS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in COUNT_FIELDS)
    return f"""
        INSERT INTO {_MINUTE_TABLE} (limit_id, minute, {columns})
        SELECT limit_id, %(a)s, sum(g), sum(qg), sum(rw), sum(ro), sum(rm), sum(rr), sum(lp), sum(t),
               coalesce(sum(w), 0), {_bucket_sums()}
        FROM ({events}) AS events
        WHERE true
        GROUP BY limit_id
        HAVING sum(g) + sum(rw) + sum(ro) + sum(rm) + sum(rr) + sum(lp) + sum(t) > 0
        ON CONFLICT (limit_id, minute) DO UPDATE SET {updates}
    """


_TOTALS_SQL = f"""
    INSERT INTO {_TOTALS_TABLE} (limit_id, {", ".join(COUNT_FIELDS)})
    SELECT limit_id, {", ".join(COUNT_FIELDS)}
    FROM {_MINUTE_TABLE}
    WHERE minute = %s AND grants + released_by_workflow + released_by_operator + released_by_max_hold
          + released_by_run_end + lapses + timeouts > 0
    ON CONFLICT (limit_id) DO UPDATE SET
        {", ".join(f"{name} = {_TOTALS_TABLE}.{name} + excluded.{name}" for name in COUNT_FIELDS)}
"""


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
    """Time to grant over a window: how many grants, how many waited, p50 and p95 as bucket
    bounds in seconds (None: no grant; math.inf: beyond the last bound)."""

    grants: int
    waited: int
    p50: float | None
    p95: float | None
    mean_s: float | None


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
    now = now or timezone.now()
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
    counts = [int(row[f"{prefix}{name}"] or 0) for name in BUCKET_FIELDS]
    return WaitFigures(
        grants=grants,
        waited=int(row[f"{prefix}queue_grants"] or 0),
        p50=percentile_bound(counts, grants, 0.50),
        p95=percentile_bound(counts, grants, 0.95),
        mean_s=(row[f"{prefix}wait_ms_sum"] or 0) / 1000 / grants if grants else None,
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
    now = now or timezone.now()
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
    """One chart point: the average of the samples of its minutes (None: no sample)."""

    at: datetime
    busy: float | None
    reserved: float | None
    waiting: float | None
    capacity: float | None


def backlog_points(limit: Limit, *, now: datetime | None = None) -> dict[str, list[Point]]:
    """The backlog chart's points, one query: 'hour', the 60 minutes before the current one (one
    point each), and 'day', the 144 ten-minute spans before the current one (the average of each
    span's samples). Oldest first."""
    now = now or timezone.now()
    current = floor_minute(now)
    day_end = current.replace(minute=current.minute - current.minute % 10)
    day_start = day_end - timedelta(hours=24)
    hour_start = current - timedelta(hours=1)
    rows = LimitMinute.objects.filter(
        limit=limit, minute__gte=min(day_start, hour_start), minute__lt=current, busy__isnull=False
    ).values_list("minute", "busy", "reserved", "waiting", "capacity")
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
    return Point(at, *averages)


# --- reading: Prometheus ----------------------------------------------------------------------


LimitFigures = tuple[str, int, int, int, int | None, int]


def metric_rows() -> tuple[list[LimitFigures], list[dict[str, Any]], SweepState | None]:
    """What /metrics reads, three queries whatever the number of limits or slots: each limit's
    counters, each limit's totals, the sweep's state."""
    limits = list(
        Limit.objects.filter(Q(declared=True) | Q(busy_count__gt=0) | Q(reserved_count__gt=0) | Q(waiting_count__gt=0))
        .order_by("name")
        .values_list("name", "busy_count", "reserved_count", "waiting_count", "capacity_override", "declared_capacity")
    )
    totals = list(LimitTotals.objects.order_by("limit__name").values("limit__name", *COUNT_FIELDS))
    return limits, totals, SweepState.objects.filter(id=1).first()
