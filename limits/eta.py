"""How long a waiting run can expect to wait: the one rule every surface uses (the run page in
Studio, `stackbone limits slots` and its `--json`, the JSON API's queue rows).

Pure functions, no Django: the CLI's renderer imports them without settings. The figures they
take come from limits.selectors (a run's places, `queue_etas`) and the grant rates from
limits.insights.eta_rates (the last minute's grants, else the per-minute rollup the sweep writes;
the rule is grant_rate below).

On a fair limit a place is a place in the order the grant will serve the queue (SPEC 13.7):
`fair_order` below walks it, from figures limits.selectors reads (and limits.engine.waiting
.why_waiting, for the key that is next).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

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


# --- a fair limit's order (SPEC 13.2, 13.7) ------------------------------------------------------

FAIR_ORDER = "fair"  # a queue listed in the order of SPEC 13.2 (the API's `order`)
ARRIVAL_ORDER = "arrival"  # first come, first served


def fair_share_sql(vendor: str) -> str:
    """A key row's (busy + reserved) / weight in SQL, as SPEC 13.2 ranks the keys: on PostgreSQL
    the expression of the index limitkey_fair_order (numeric, so a page reads the keys along it),
    on SQLite a real (its NUMERIC keeps whole numbers whole, and would divide them whole)."""
    if vendor == "postgresql":
        return "((busy_count + reserved_count)::numeric / weight)"
    return "(CAST(busy_count + reserved_count AS REAL) / weight)"


@dataclass(slots=True)
class FairKey:
    """One key of a fair limit as its grant ranks it (SPEC 13.2), as `fair_order` walks it: `in_use`
    (busy + reserved), `weight`, `minimum`, `pool` (its pool size in force; None: only the total),
    `fair_pass` and `stride` (what one grant adds to the pass), `waiting` (its runs waiting, from
    its counter) and `heads`: the positions of its first waiting runs that were read, in arrival
    order; `floor` is a position no unread run of it comes before (the last read one + 1)."""

    key: str
    in_use: int
    weight: int
    minimum: int
    pool: int | None
    fair_pass: int
    stride: int
    waiting: int
    heads: list[int] = field(default_factory=list)
    floor: int = 0
    taken: int = 0  # its runs the walk granted

    @property
    def servable(self) -> bool:
        """A run of it waits (not yet granted by the walk) and its pool has room."""
        return self.taken < self.waiting and (self.pool is None or self.in_use < self.pool)

    @property
    def head(self) -> int | None:
        """The position of its next run in the walk; None when that run was not read."""
        return self.heads[self.taken] if self.taken < len(self.heads) else None

    def rank(self) -> tuple[bool, Fraction, int, int]:
        """SPEC 13.2's order: under its min first, then (busy + reserved) / weight, then the pass,
        then the oldest run (for a run not read, `floor`: no read run of another key that ties
        with it is placed after it by mistake, as the walk stops when it comes up)."""
        head = self.head
        at = max(self.floor, self.heads[-1] + 1 if self.heads else 0) if head is None else head
        return (self.in_use >= self.minimum, Fraction(self.in_use, self.weight), self.fair_pass, at)


@dataclass(frozen=True, slots=True)
class FairWalk:
    """What `fair_order` found: `order`, the (key, position) of each run it granted, in order; the
    keys as they stand after those grants (`keys`: their passes, in use and runs taken); and
    `short`, the key whose next run came up unread (then the walk stopped there: read more of that
    key's runs and walk again)."""

    order: list[tuple[str, int]]
    keys: dict[str, FairKey]
    short: str | None = None


def fair_order(keys: Mapping[str, FairKey], *, room: int, frees: Sequence[str], rows: int) -> FairWalk:
    """The order in which a fair limit's grant will serve its waiting runs if nothing else changes
    (SPEC 13.7), up to `rows` runs. The model, step by step:

    1. While the limit has room (`room`: its capacity less its slots in use; a paused limit as if
       resumed), the next slot goes to the key first in the order of SPEC 13.2 among the keys with
       a run waiting and room in their pool: under its min first, then the smallest (busy +
       reserved) / weight, then the smallest pass, then the oldest run. That key's next run in
       arrival order is served; its in use grows by one and its pass by its stride.
    2. Without room, or without a key that can be served, a slot frees: the one held longest, as
       max hold takes them back (`frees`: the keys of the slots in use, oldest grant first; then
       the walk's own grants, in order). Its key's in use drops by one.
    3. It stops after `rows` runs, when nothing is left to free, or when a key's next run comes up
       unread (`FairWalk.short`).

    Runs of several limits are placed as if their other limits had room, and an owed run (10.4) as
    any other; their reasons say what stops them. `keys` are not changed (the walk works on
    copies)."""
    walked = {name: replace(key, heads=list(key.heads)) for name, key in keys.items()}
    versions = dict.fromkeys(walked, 0)
    ready: list[tuple[tuple[bool, Fraction, int, int], int, str]] = []

    def push(key: FairKey) -> None:
        versions[key.key] += 1
        if key.servable:
            heapq.heappush(ready, (key.rank(), versions[key.key], key.key))

    for key in walked.values():
        push(key)
    held, own = deque(frees), deque[str]()
    order: list[tuple[str, int]] = []
    while len(order) < rows:
        best = None
        while room > 0 and ready:
            _, version, name = heapq.heappop(ready)
            if version == versions[name] and walked[name].servable:
                best = walked[name]
                break
        if best is None:
            if not held and not own:
                break
            freed = walked.get(held.popleft() if held else own.popleft())
            room += 1
            if freed is not None and freed.in_use > 0:
                freed.in_use -= 1
                push(freed)
            continue
        head = best.head
        if head is None:
            return FairWalk(order, walked, short=best.key)
        order.append((best.key, head))
        best.taken += 1
        best.in_use += 1
        best.fair_pass += best.stride
        room -= 1
        own.append(best.key)
        push(best)
    return FairWalk(order, walked)
