"""What Studio, /metrics and the ETA read of insights (the rollups' rows: limits.insights.rollups).

Decisions:
- Percentiles come from the bucket counts (WAIT_BUCKETS_S): p-th percentile = the smallest bucket
  bound with at least ceil(p x count) grants at or under it (the nearest-rank rule). The true
  value lies between the bound before and that bound; the page shows "≤ bound". When every wait
  falls on a bound (tests do that) the figure is exact. Beyond the last bound (24 h): "> 24 h".
- A key's figures are over its 10-minute spans: the page shows the KEYS_SHOWN keys with the most
  runs waiting now (two queries, at most 5 x 145 rows); a key's "last hour" is the spans that
  started in it, up to 10 minutes more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, OuterRef, Q, Subquery, Sum

from limits import eta
from limits.insights.minutes import (
    BUCKET_FIELDS,
    COUNT_FIELDS,
    KEY_FIELDS,
    MINUTE,
    ROLLUP_GRACE,
    SWEEP_PERIOD,
    floor_minute,
    floor_span,
)
from limits.models import (
    LIVE_SLOT_STATES,
    WAIT_BUCKETS_S,
    Limit,
    LimitKey,
    LimitKeySpan,
    LimitMinute,
    LimitTotals,
    Slot,
    SweepState,
)
from stackbone.plumbing import clock as box_clock

KEYS_SHOWN = 5
RATE_WINDOW_MINUTES = 10


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
