"""The box's second ceiling: the Celery workers alive, and the runs waiting for one (issue 30).

A limit of capacity 20 runs at most as many runs at once as the workers run tasks: with 2 worker
processes, runs that hold its slots while they run never pass 2, and the rest wait for a worker.
Studio's Limits list (a panel), `stackbone workers` and `/metrics` show it from here:

- `alive()`: the workers alive, each as it reported itself (stackbone.plumbing.worker_beat: every
  worker writes its host, pool, concurrency and the tasks it runs now, counted in its own main
  process, within a second of a change and every 5 s), those that reported within ALIVE_SECONDS.
  One query, nothing asked over the broker: right for every pool (prefork, threads, solo, which
  cannot answer the broker while it runs a task), and never a wait for a page (issue 45).
- `pending()`: the runs waiting for a worker: those a worker may move now (not suspended: pending,
  woken from a wait, or queued and let through) that no worker holds (no live lease), and how
  long the oldest has waited since it was sent to the workers; one aggregate over the
  run_runnable index.
- `bounded_by_workers(total)`: the declared limits whose capacity is more than the workers' total
  concurrency: while runs hold their slots as they run, the workers, not the limit, bound them.
- `report()`: all three in the JSON shape of `stackbone workers --json` and of the API's
  `GET /api/limits/-/workers/` (what `stackbone workers --agent <id>` reads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.db.models.functions import Coalesce

from limits.durations import format_duration
from limits.models import CAPACITY_IN_FORCE, Limit
from stackbone.plumbing import clock as box_clock
from stackbone.plumbing.models import WorkerBeat
from stackbone.plumbing.worker_beat import ALIVE_SECONDS
from stackbone.runs.models import Run

BOUNDED_SHOWN = 20
CACHE_SECONDS = 0.0  # nothing is kept: each worker's report is at most a few seconds old already
RUNNABLE = (Run.Status.QUEUED, Run.Status.PENDING, Run.Status.RUNNING)

EAGER = "tasks run in the caller (CELERY_TASK_ALWAYS_EAGER): there are no workers"
IN_PROCESS = "the broker is in-process (memory://): no worker can reach it"
NO_ANSWER = "no worker has reported in the last {seconds:g} s"
LAST_SEEN = "; the last, {name}, {ago} ago"


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
    """The workers alive, and why there is none when there is none (`note`)."""

    workers: tuple[Worker, ...] = ()
    note: str = ""
    asked_at: float = field(default_factory=time.time)  # Unix time of the read

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
    """The workers alive, as they reported themselves (`fresh` is accepted for the callers that
    asked for a new answer when answers were kept: every read is fresh now)."""
    return ask()


def forget_answers() -> None:
    """Nothing is kept any more (each read is one query); kept for the callers that cleared it."""


def ask() -> Workers:
    """The workers that reported within ALIVE_SECONDS, by name; when none did, why (tasks run
    eagerly, the broker is in-process, or no report: with the last one seen, if any)."""
    from celery import current_app

    conf = current_app.conf
    if conf.task_always_eager:
        return Workers(note=EAGER)
    if str(conf.broker_url or "").startswith("memory://"):
        return Workers(note=IN_PROCESS)
    rows = list(
        WorkerBeat.objects.filter(beat_at__gte=box_clock.expression(-timedelta(seconds=ALIVE_SECONDS))).order_by("name")
    )
    if rows:
        found = (Worker(row.name, row.host, row.pool, row.concurrency, row.busy) for row in rows)
        return Workers(tuple(found))
    note = NO_ANSWER.format(seconds=ALIVE_SECONDS)
    last = WorkerBeat.objects.order_by("-beat_at").values_list("name", "beat_at").first()
    if last is not None:
        ago = max(int((box_clock.display_now() - last[1]).total_seconds() * 1000), 0)
        note += LAST_SEEN.format(name=last[0], ago=format_duration(ago) if ago >= 1000 else "under a second")
    return Workers(note=note)


def pending(now: datetime) -> Pending:
    """The runs waiting for a worker: not suspended (a worker may move them now: pending, woken
    from a wait, or queued and let through by their bounds) and held by no worker (no lease, or a
    lease past: its worker is gone), and how long (seconds) the oldest has waited since it was sent
    to the workers."""
    lease_live = Q(lease_until__isnull=False) & Q(lease_until__gt=box_clock.expression())
    row = (
        Run.objects.filter(status__in=RUNNABLE, suspended=False)
        .exclude(lease_live)
        .aggregate(runs=Count("id"), oldest=Min(Coalesce("dispatched_at", "created_at")))
    )
    oldest = row["oldest"]
    return Pending(row["runs"], None if oldest is None else max((now - oldest).total_seconds(), 0.0))


def bounded_by_workers(total: int) -> list[Bounded]:
    """The declared limits (and workflows' bounds) of capacity above `total`, the workers' total
    concurrency, by name; at most BOUNDED_SHOWN + 1 (one more says there are more). None when no
    worker is alive (total 0): every limit would be, which says nothing."""
    if total <= 0:
        return []
    rows = (
        Limit.objects.filter(declared=True)
        .annotate(in_force=CAPACITY_IN_FORCE)
        .filter(in_force__gt=total)
        .order_by("name")
        .values_list("name", "kind", "in_force")[: BOUNDED_SHOWN + 1]
    )
    return [Bounded(name, kind, capacity) for name, kind, capacity in rows]


def report(*, fresh: bool = False) -> dict[str, Any]:
    """The workers alive, the runs waiting for one and the limits the workers bound, as
    `stackbone workers --json` prints them (`fresh`: accepted, every read is fresh)."""
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
