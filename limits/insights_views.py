"""The limit page's insights fragment: time to grant (p50, p95) and the backlog chart.

Loaded into the limit page by htmx (`templates/limits/limit_detail.html`, the `#insights` line)
and refreshed every 30 s; the figures come from the per-minute rollup (limits.insights), so the
cost is constant: the limit, the percentiles (one aggregate over at most 1,440 rows), the
chart's samples (at most 1,440 rows) and, for a limit with keys, its 5 keys with the most runs
waiting and their 10-minute spans (at most 5 x 145 rows), whatever the history.

The chart is inline SVG drawn here, no JavaScript: two panels sharing the time axis, the slots
in use (busy, then reserved stacked on it, under the capacity line) and the runs waiting (their
own scale: a queue may be many times the capacity), each with a thin line of its peaks (the
most at any instant of each minute: limits.insights.record_peaks). The SVG stretches to its box
(preserveAspectRatio="none", lines keep their width with vector-effect); the labels are HTML
around it, so they stay readable at 390 px. Colours are classes in static/studio/studio.css
(the CSP forbids inline style).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from limits import insights, selectors
from limits.insights import Point, WaitFigures
from stackbone.plumbing import clock as box_clock
from stackbone.plumbing.access import HtmxHttpRequest, studio_login_required

WIDTH = 600  # viewBox units; the SVG is scaled to its box
IN_USE_HEIGHT = 120
WAITING_HEIGHT = 60
REFRESH_SECONDS = 30
HEADROOM = 1.1


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel's geometry: SVG path data in a WIDTH x height box, and its scale's top."""

    height: int
    top: int
    areas: dict[str, str]
    line: str
    peak: str


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    starts: datetime
    ends: datetime
    step: str
    in_use: Panel
    waiting: Panel
    summary: str
    sampled: int


@require_GET
@studio_login_required
def limit_insights(request: HtmxHttpRequest, name: str) -> HttpResponse:
    limit = selectors.get_limit(name)
    if limit is None:
        raise Http404(f"No limit named {name!r}.")
    now = box_clock.now()
    figures = insights.wait_figures(limit, now=now)
    points = insights.backlog_points(limit, now=now)
    keys = insights.key_wait_figures(limit, now=now)
    context = {
        "limit": limit,
        "waits": [
            ("Last hour", describe(figures["hour"])),
            ("Last 24 hours", describe(figures["day"])),
        ],
        "charts": [
            chart("Last hour", points["hour"], now, "1-minute points"),
            chart("Last 24 hours", points["day"], now, "10-minute points"),
        ],
        "keys": [{"key": k.key, "waiting": k.waiting, "hour": describe(k.hour), "day": describe(k.day)} for k in keys],
        "keys_shown": insights.KEYS_SHOWN,
        "refresh_seconds": REFRESH_SECONDS,
    }
    return render(request, "limits/insights.html", context)


def format_wait(bound: float | None) -> str:
    """A percentile's bucket bound for people: '0 s', '≤ 15 s', '≤ 2 min', '> 24 h', '—'."""
    if bound is None:
        return "—"
    if math.isinf(bound):
        return "> 24 h"
    if bound == 0:
        return "0 s"
    seconds = int(bound)
    if seconds < 60:
        return f"≤ {seconds} s"
    if seconds < 3600:
        return f"≤ {seconds // 60} min"
    return f"≤ {seconds // 3600} h"


def describe(figures: WaitFigures) -> dict[str, object]:
    """The figures for the page: over all grants (p50, p95: a grant made at once is 0 s) and
    over the runs that waited (queued_p50, queued_p95: grants from the queue only)."""
    return {
        "p50": format_wait(figures.p50),
        "p95": format_wait(figures.p95),
        "queued_p50": format_wait(figures.queued_p50),
        "queued_p95": format_wait(figures.queued_p95),
        "any_waited": figures.waited > 0,
        "grants": f"{figures.grants:,}",
        "waited": f"{figures.waited:,}",
        "any": figures.grants > 0,
        "plural": figures.grants != 1,
    }


def chart(title: str, points: list[Point], now: datetime, step: str) -> Chart:
    present = [p for p in points if p.busy is not None]
    # The peaks (the most at any instant of a point's minutes) are drawn as a line over the
    # sampled areas: a burst that came and went between two samples shows there.
    in_use_peaks = [p.in_use_peak if p.busy is not None else None for p in points]
    waiting_peaks = [p.waiting_peak if p.busy is not None else None for p in points]
    # A little headroom, so the capacity line never runs along the top edge.
    top_in_use = nice_top(
        HEADROOM
        * max(
            [(p.busy or 0) + (p.reserved or 0) for p in present]
            + [p.capacity or 0 for p in present]
            + [peak for peak in in_use_peaks if peak is not None],
            default=0,
        )
    )
    top_waiting = nice_top(
        HEADROOM
        * max([p.waiting or 0 for p in present] + [peak for peak in waiting_peaks if peak is not None], default=0)
    )
    busy = [(p.busy, 0.0) if p.busy is not None else None for p in points]
    reserved = [((p.busy or 0) + (p.reserved or 0), p.busy or 0.0) if p.busy is not None else None for p in points]
    waiting = [(p.waiting or 0.0, 0.0) if p.busy is not None else None for p in points]
    capacity = [p.capacity if p.busy is not None else None for p in points]
    in_use = Panel(
        IN_USE_HEIGHT,
        top_in_use,
        {"busy": area(busy, top_in_use, IN_USE_HEIGHT), "reserved": area(reserved, top_in_use, IN_USE_HEIGHT)},
        line(capacity, top_in_use, IN_USE_HEIGHT),
        line(in_use_peaks, top_in_use, IN_USE_HEIGHT),
    )
    queue = Panel(
        WAITING_HEIGHT,
        top_waiting,
        {"waiting": area(waiting, top_waiting, WAITING_HEIGHT)},
        "",
        line(waiting_peaks, top_waiting, WAITING_HEIGHT),
    )
    if present:
        last = present[-1]
        peaks = ""
        if any(peak is not None for peak in waiting_peaks + in_use_peaks):
            peaks = (
                f" At any instant: peak {max(peak or 0 for peak in waiting_peaks):g} waiting, "
                f"{max(peak or 0 for peak in in_use_peaks):g} in use."
            )
        summary = (
            f"{title}: busy up to {max(p.busy or 0 for p in present):g}, reserved up to "
            f"{max(p.reserved or 0 for p in present):g}, waiting up to {max(p.waiting or 0 for p in present):g}; "
            f"latest: {last.busy:g} busy, {last.reserved:g} reserved, {last.waiting:g} waiting of capacity "
            f"{last.capacity:g}.{peaks}"
        )
    else:
        summary = f"{title}: no samples yet."
    return Chart(title, points[0].at, now, step, in_use, queue, summary, len(present))


NICE_FACTORS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def nice_top(value: float) -> int:
    """The scale's top: the value rounded up to a round number (NICE_FACTORS x a power of ten,
    a whole number, at least 1)."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for factor in NICE_FACTORS:
        candidate = round(factor * power, 6)
        if value <= candidate and candidate.is_integer():
            return int(candidate)
    return int(10 * power)  # pragma: no cover - the loop always returns


def _x(i: int, count: int) -> float:
    return 0.0 if count <= 1 else i * WIDTH / (count - 1)


def _y(value: float, top: int, height: int) -> float:
    return height - min(value, top) / top * height


def _segments[T](values: list[T | None]) -> list[list[tuple[int, T]]]:
    """Runs of consecutive points that have a value: a gap (no sample) breaks the path."""
    runs: list[list[tuple[int, T]]] = []
    current: list[tuple[int, T]] = []
    for i, value in enumerate(values):
        if value is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((i, value))
    if current:
        runs.append(current)
    return runs


def area(values: list[tuple[float, float] | None], top: int, height: int) -> str:
    """Path data of the band between each point's (upper, lower) values. A lone point is drawn
    half a step wide so it shows."""
    count, parts = len(values), []
    for run in _segments(values):
        if len(run) == 1:
            i, (upper, lower) = run[0]
            half = WIDTH / max(count - 1, 1) / 2
            x0, x1 = max(_x(i, count) - half, 0), min(_x(i, count) + half, WIDTH)
            run_xy = [(x0, upper, lower), (x1, upper, lower)]
        else:
            run_xy = [(_x(i, count), upper, lower) for i, (upper, lower) in run]
        upper_edge = " L".join(f"{x:.1f},{_y(u, top, height):.1f}" for x, u, _ in run_xy)
        lower_edge = " L".join(f"{x:.1f},{_y(low, top, height):.1f}" for x, _, low in reversed(run_xy))
        parts.append(f"M{upper_edge} L{lower_edge} Z")
    return " ".join(parts)


def line(values: list[float | None], top: int, height: int) -> str:
    """Path data of a step line through the points (the capacity changes at a point)."""
    count, parts = len(values), []
    for run in _segments(values):
        coords = []
        for n, (i, value) in enumerate(run):
            x, y = _x(i, count), _y(value, top, height)
            coords += [f"M{x:.1f},{y:.1f}"] if n == 0 else [f"H{x:.1f}", f"V{y:.1f}"]
        if len(run) == 1:
            coords.append(f"h{WIDTH / max(count - 1, 1) / 2:.1f}")
        parts.append(" ".join(coords))
    return " ".join(parts)
