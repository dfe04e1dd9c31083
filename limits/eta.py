"""How long a waiting run can expect to wait: the one rule every surface uses (the run page in
Studio, `stackbone limits slots` and its `--json`, the JSON API's queue rows).

Pure functions, no Django: the CLI's renderer imports them without settings. The figures they
take come from limits.selectors (a run's places, `queue_etas`) and the grant rates from
limits.insights.eta_rates (the last minute's grants, else the per-minute rollup the sweep writes;
the rule is grant_rate below).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

UNKNOWN = "unknown"
RECENT_WINDOW_S = 60  # the grants of the last minute, read from the slots...
RECENT_MIN_GRANTS = 10  # ...give the rate when there were at least this many


def grant_rate(recent_grants: int, rollup_rate: float | None) -> float | None:
    """The grant rate an estimate divides by, in grants per second.

    The rule: when the limit handed out at least RECENT_MIN_GRANTS slots in the last
    RECENT_WINDOW_S seconds (counted from the slots' grant times), the rate of that minute:
    recent_grants / 60; else `rollup_rate`, the rate of the last 10 rolled-up minutes
    (limits.insights.grant_rates; None when it granted nothing then).

    Why: a rate averaged over 10 minutes is far too slow for a burst of fast hand-offs (20 grants
    in the last 20 s after a quiet quarter of an hour read as 1 grant every 5 minutes, and a
    queue of 14 that drained in 15 s was "about 70 min"), and the rollup is 30 s to 1 min 45 s
    behind real time, so it never sees a burst that is still going on. Below RECENT_MIN_GRANTS a
    minute says too little (3 grants could be one release or a lucky second): a quiet limit keeps
    the steadier 10-minute figure. A limit that slowed down sharply (10 or more grants in the
    last minute, but fewer than its 10-minute average) gets the slower, recent rate too: the rule
    follows the current speed both ways.
    """
    if recent_grants >= RECENT_MIN_GRANTS:
        return recent_grants / RECENT_WINDOW_S
    return rollup_rate


def eta_seconds(place: int, rate: float | None) -> int | None:
    """The estimated wait, in whole seconds, of the run at 1-based `place` in a limit's queue,
    when the limit recently granted `rate` slots per second (grant_rate: the grants of the last
    60 s when there were at least RECENT_MIN_GRANTS, else those of the last 10 complete minutes,
    at once or from the queue, divided by 600).

    The rule: ETA = place / rate, rounded up to a whole second (the head of a queue that got one
    slot a minute waits about 60 s; the 3rd waits about 180 s). None (unknown) when the limit
    granted nothing recently (`rate` None or 0): nothing tells when a slot will free up.

    What it does not count, on purpose:
    - A key pool. A run with a key waits in its limit's queue and in its key's pool; its place in
      the key's queue is shown beside it, but grants are counted per limit, not per key, so the
      estimate always counts from the place in the limit's whole queue (the key's place is never
      behind it). When the key's pool is full, the run also waits for its key's own slots to come
      back, and the estimate can be short.
    - Several limits at once (SPEC 10.5): each limit's queue has its own estimate; the run gets
      its slots when the slowest of them is done, run_eta_seconds(...).
    """
    if rate is None or rate <= 0 or place < 1:
        return None
    return math.ceil(place / rate - 1e-9)  # 1e-9: 3 / 0.05 is 60.00000000000001, and means 60 s


def run_eta_seconds(etas: Iterable[int | None]) -> int | None:
    """The estimate of a run that waits for several limits at once (all or nothing): the largest
    of their eta_seconds, unknown if any of them is unknown (or if there is none)."""
    found = list(etas)
    if not found or any(eta is None for eta in found):
        return None
    return max(eta for eta in found if eta is not None)


def eta_words(seconds: int | None) -> str:
    """An estimate rounded for people: "unknown", "under a minute", "about 4 min" (to the nearest
    minute, below 90 minutes), "about 3 h" (to the nearest hour, below 2 days), "about 5 days"."""
    if seconds is None:
        return UNKNOWN
    if seconds < 60:
        return "under a minute"
    if seconds < 90 * 60:
        return f"about {_nearest(seconds, 60)} min"
    if seconds < 48 * 3600:
        return f"about {_nearest(seconds, 3600)} h"
    return f"about {_nearest(seconds, 86400)} days"


def ordinal(number: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 101st, 111th."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def place_words(place: int, total: int, *, approximate: bool = False) -> str:
    """A place for people: "3rd of 41", "12,345th of 1,000,000", and an estimated one (limits
    .selectors.queue_place) "about 500,000th of 1,000,000". `total` is never shown below `place`."""
    words = f"{place:,}{ordinal(place)[len(str(place)) :]} of {max(total, place):,}"
    return f"about {words}" if approximate else words


def _nearest(seconds: int, unit: int) -> int:
    return max((seconds + unit // 2) // unit, 1)
