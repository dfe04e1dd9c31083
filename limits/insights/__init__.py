"""Insights: what the limits did over time, rolled up per minute by the sweep.

One module a seam (issue 48), every name handed on from here (import them from limits.insights):

    rollups  the sweep's writes: sample each minute's counters, roll up the minutes that ended
             (the totals, the minute rows, the keys' 10-minute spans), purge old rows; its
             docstring tells how, and what must never happen
    peaks    a minute's peaks (the most waiting and in use at any instant of it): written by the
             next minute's sample, and derived from the history rows for the tests
    reads    what Studio (time to grant, the backlog chart), /metrics and the ETA read of them
    minutes  what both sides share: the minute and the key span, the rollup's grace, the fields

A tunable (PURGE_BATCH, ...) is read where it is defined: a test that changes one changes it
there (monkeypatch.setattr("limits.insights.rollups.PURGE_BATCH", 3)).
"""

from limits.insights.minutes import (
    BUCKET_FIELDS,
    COUNT_FIELDS,
    KEY_FIELDS,
    KEY_SPAN,
    MINUTE,
    ROLLUP_GRACE,
    SWEEP_PERIOD,
    floor_minute,
    floor_span,
)
from limits.insights.peaks import PEAK_REFERENCE_AGE, Peak, minute_peaks, no_jit, record_peaks
from limits.insights.reads import (
    KEYS_SHOWN,
    RATE_WINDOW_MINUTES,
    KeyWaits,
    LimitFigures,
    Point,
    WaitFigures,
    backlog_points,
    eta_rates,
    grant_rates,
    key_wait_figures,
    metric_rows,
    percentile_bound,
    wait_figures,
)
from limits.insights.rollups import (
    EVENT_FIELDS,
    INSIGHTS_RETENTION,
    KEY_RETENTION,
    MAX_BACKFILL,
    MAX_MINUTES_PER_PASS,
    PURGE_BATCH,
    RECOUNT_WINDOW,
    history_needed_from,
    purge,
    record,
    roll_up,
    sample,
)

__all__ = [
    "BUCKET_FIELDS",
    "COUNT_FIELDS",
    "EVENT_FIELDS",
    "INSIGHTS_RETENTION",
    "KEYS_SHOWN",
    "KEY_FIELDS",
    "KEY_RETENTION",
    "KEY_SPAN",
    "MAX_BACKFILL",
    "MAX_MINUTES_PER_PASS",
    "MINUTE",
    "PEAK_REFERENCE_AGE",
    "PURGE_BATCH",
    "RATE_WINDOW_MINUTES",
    "RECOUNT_WINDOW",
    "ROLLUP_GRACE",
    "SWEEP_PERIOD",
    "KeyWaits",
    "LimitFigures",
    "Peak",
    "Point",
    "WaitFigures",
    "backlog_points",
    "eta_rates",
    "floor_minute",
    "floor_span",
    "grant_rates",
    "history_needed_from",
    "key_wait_figures",
    "metric_rows",
    "minute_peaks",
    "no_jit",
    "percentile_bound",
    "purge",
    "record",
    "record_peaks",
    "roll_up",
    "sample",
    "wait_figures",
]
