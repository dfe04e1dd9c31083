"""The box's second ceiling: the Celery workers alive, and the runs waiting for one (issue 30).

A limit of capacity 20 runs at most as many runs at once as the workers run tasks: with 2 worker
processes, runs that hold its slots while they run never pass 2, and the rest sit `pending`.
Studio's Limits list (a panel), `stackbone workers` and `/metrics` show it from here:

- `alive()`: the workers that answer Celery's remote control (`inspect().stats()`, then
  `inspect().active()` of those that answered), each with its host, pool, concurrency and busy
  processes. The broadcast waits ANSWER_SECONDS for answers, in a thread joined for at most
  GIVE_UP_SECONDS (a broker that hangs never holds a page), and the answer is kept CACHE_SECONDS
  per process, so a page or a scrape asks at most that often. A worker of the `solo` pool cannot
  answer while it runs a task (its one thread is busy): it is missing from the list until then.
- `pending()`: the runs no worker has started yet (status `pending`) and how long the oldest has
  waited since it was created; one aggregate over the run_by_status index.
- `bounded_by_workers(total)`: the declared limits whose capacity is more than the workers' total
  concurrency: while runs hold their slots as they run, the workers, not the limit, bound them.
- `report()`: all three in the JSON shape of `stackbone workers --json` and of the API's
  `GET /api/limits/-/workers/` (what `stackbone workers --agent <id>` reads).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Min
from django.db.models.functions import Coalesce

from limits.models import Limit
from stackbone.plumbing import clock as box_clock
from stackbone.runs.models import Run

ANSWER_SECONDS = 0.5
GIVE_UP_SECONDS = 3.0
CACHE_SECONDS = 10.0
BOUNDED_SHOWN = 20

EAGER = "tasks run in the caller (CELERY_TASK_ALWAYS_EAGER): there are no workers"
IN_PROCESS = "the broker is in-process (memory://): no worker can reach it"
NO_ANSWER = "no answer from the broker within {seconds:g} s"
BROKER_ERROR = "the broker cannot be asked: {error}"

_lock = threading.Lock()
_cache: tuple[float, Workers] | None = None


@dataclass(frozen=True, slots=True)
class Worker:
    name: str
    host: str
    pool: str
    concurrency: int
    busy: int

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "host": self.host,
            "pool": self.pool,
            "concurrency": self.concurrency,
            "busy": self.busy,
        }


@dataclass(frozen=True, slots=True)
class Workers:
    """The workers that answered, and why none could when none did (`note`)."""

    workers: tuple[Worker, ...] = ()
    note: str = ""
    asked_at: float = field(default_factory=time.time)  # Unix time of the question

    @property
    def concurrency(self) -> int:
        return sum(worker.concurrency for worker in self.workers)

    @property
    def busy(self) -> int:
        return sum(worker.busy for worker in self.workers)


@dataclass(frozen=True, slots=True)
class Pending:
    runs: int
    oldest_seconds: float | None

    @property
    def oldest_ms(self) -> int | None:
        return None if self.oldest_seconds is None else int(self.oldest_seconds * 1000)


@dataclass(frozen=True, slots=True)
class Bounded:
    """A declared limit whose capacity is more than the workers' total concurrency."""

    name: str
    kind: str
    capacity: int


def alive(*, fresh: bool = False) -> Workers:
    """The workers alive, asked at most every CACHE_SECONDS in this process (`fresh`: ask now)."""
    global _cache
    with _lock:
        if not fresh and _cache is not None and time.monotonic() - _cache[0] < CACHE_SECONDS:
            return _cache[1]
        found = ask()
        _cache = (time.monotonic(), found)
        return found


def forget_answers() -> None:
    """Drop the kept answer (tests, and a new broker)."""
    global _cache
    with _lock:
        _cache = None


def ask() -> Workers:
    """Ask the broker now which workers are alive, waiting at most GIVE_UP_SECONDS."""
    from celery import current_app

    conf = current_app.conf
    if conf.task_always_eager:
        return Workers(note=EAGER)
    if str(conf.broker_url or "").startswith("memory://"):
        return Workers(note=IN_PROCESS)
    answer: dict[str, Workers] = {}
    thread = threading.Thread(target=lambda: answer.update(found=_inspect(current_app)), daemon=True)
    thread.start()
    thread.join(GIVE_UP_SECONDS)
    return answer.get("found") or Workers(note=NO_ANSWER.format(seconds=GIVE_UP_SECONDS))


def _inspect(app: Any) -> Workers:
    try:
        stats: dict[str, Any] = app.control.inspect(timeout=ANSWER_SECONDS).stats() or {}
        names = sorted(stats)
        active: dict[str, Any] = {}
        if names:  # only those that answered, so it returns as soon as they all have
            inspector = app.control.inspect(timeout=ANSWER_SECONDS, destination=names, limit=len(names))
            active = inspector.active() or {}
    except Exception as error:  # a broker down or refusing: say so, never fail the page
        return Workers(note=BROKER_ERROR.format(error=f"{type(error).__name__}: {error}"))
    return Workers(tuple(_worker(name, stats[name], active.get(name)) for name in names))


def _worker(name: str, stats: dict[str, Any], active: list[Any] | None) -> Worker:
    pool = stats.get("pool") or {}
    implementation = str(pool.get("implementation") or "")  # 'celery.concurrency.prefork:TaskPool'
    kind = implementation.rpartition(":")[0].rpartition(".")[2] or "?"
    concurrency = pool.get("max-concurrency")
    return Worker(
        name=name,
        host=name.partition("@")[2] or str(stats.get("hostname") or name),
        pool={"thread": "threads"}.get(kind, kind),
        concurrency=concurrency if isinstance(concurrency, int) else 0,
        busy=len(active or []),
    )


def pending(now: datetime) -> Pending:
    """The runs no worker has started yet, and how long (seconds) the oldest has waited."""
    row = Run.objects.filter(status=Run.Status.PENDING).aggregate(runs=Count("id"), oldest=Min("created_at"))
    oldest = row["oldest"]
    return Pending(row["runs"], None if oldest is None else max((now - oldest).total_seconds(), 0.0))


def bounded_by_workers(total: int) -> list[Bounded]:
    """The declared limits (and workflows' bounds) of capacity above `total`, the workers' total
    concurrency, by name; at most BOUNDED_SHOWN + 1 (one more says there are more). None when no
    worker answered (total 0): every limit would be, which says nothing."""
    if total <= 0:
        return []
    rows = (
        Limit.objects.filter(declared=True)
        .annotate(in_force=Coalesce("capacity_override", "declared_capacity"))
        .filter(in_force__gt=total)
        .order_by("name")
        .values_list("name", "kind", "in_force")[: BOUNDED_SHOWN + 1]
    )
    return [Bounded(name, kind, capacity) for name, kind, capacity in rows]


def report(*, fresh: bool = False) -> dict[str, Any]:
    """The workers alive (`fresh`: asked now, not from the kept answer), the runs pending for one
    and the limits the workers bound, as `stackbone workers --json` prints them."""
    found = alive(fresh=fresh)
    waiting = pending(box_clock.display_now())
    bounded = bounded_by_workers(found.concurrency)
    return {
        "workers": [worker.as_json() for worker in found.workers],
        "concurrency": found.concurrency,
        "busy": found.busy,
        "note": found.note or None,
        "pending": {"runs": waiting.runs, "oldest_seconds": waiting.oldest_seconds},
        "bounded_by_workers": [
            {"limit": limit.name, "kind": limit.kind, "capacity": limit.capacity} for limit in bounded
        ],
    }
