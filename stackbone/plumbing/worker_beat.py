"""Each Celery worker's own report of what it runs (WorkerBeat rows), read by the Workers panel,
`stackbone workers` and /metrics (limits.workers).

Asking the workers over the broker (Celery's remote control, `inspect().active()`) gave wrong
figures (issue 45): a threads-pool worker busy with runs answered late or not within the time
asked, and was shown busy 0 of 8 while it ran 4 tasks; a solo worker cannot answer at all while
it runs a task; and every page waited for the answers. Here each worker counts itself, in its main
process, where Celery keeps the requests it has accepted and not finished
(`celery.worker.state.active_requests`, what `celery inspect active` lists) whatever the pool:
prefork (the children report each start to the main process), threads, solo.

1. At start (`worker_ready`): its row, with its node name, host, pid, pool and concurrency.
2. A daemon thread looks at the count every CHECK_SECONDS and writes it when it changed (at
   most once a GAP_SECONDS), and at least every BEAT_SECONDS (the worker is alive), with the
   database's clock (`beat_at`), through a connection of its own, closed after each write: a
   prefork worker forks its children from this process, and a child must never inherit an open
   connection of this thread. A write that cannot reach the database is skipped; the next one
   tries again.
3. At a warm shutdown (`worker_shutdown`) its row is deleted. A worker killed leaves its row: the
   readers count a worker alive only ALIVE_SECONDS after its last beat, and the next start of any
   worker deletes rows silent for FORGET.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

logger = logging.getLogger(__name__)

CHECK_SECONDS = 0.25  # how often the thread looks at the count
GAP_SECONDS = 1.0  # at most one report a second while the count changes
BEAT_SECONDS = 5.0  # a report at least this often, changed or not
ALIVE_SECONDS = 3 * BEAT_SECONDS  # a worker silent longer than this is not counted alive
FORGET = timedelta(days=1)  # a row silent this long is deleted at the next worker's start

POOLS = {"thread": "threads"}  # Celery's module name of a pool -> the name its --pool option takes


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    host: str
    pid: int
    pool: str


def pool_name(pool: Any) -> str:
    """'prefork', 'threads', 'solo', 'eventlet', 'gevent' (the last part of the pool's module)."""
    kind = type(pool).__module__.rpartition(".")[2] or "?"
    return POOLS.get(kind, kind)


def concurrency_of(pool: Any) -> int:
    """The tasks the pool runs at once, as it says itself (solo: 1, whatever --concurrency said)."""
    try:
        found = pool.info.get("max-concurrency")
    except Exception:  # a pool that cannot describe itself now: its configured limit
        found = getattr(pool, "limit", None)
    return found if isinstance(found, int) and found >= 0 else 0


def busy() -> int:
    """The tasks this worker runs now: the requests its main process accepted and has not finished."""
    from celery.worker import state

    return len(state.active_requests)


def start(consumer: Any, **kwargs: Any) -> threading.Thread | None:
    """`worker_ready`: write this worker's row and start the thread that keeps it current."""
    controller = getattr(consumer, "controller", None)
    pool = getattr(controller, "pool", None)
    name = str(getattr(consumer, "hostname", "") or getattr(controller, "hostname", ""))
    if pool is None or not name:
        return None
    me = Identity(name=name, host=name.partition("@")[2] or name, pid=os.getpid(), pool=pool_name(pool))
    thread = threading.Thread(target=_beat, args=(me, pool), name="worker-beat", daemon=True)
    thread.start()
    return thread


def stop(sender: Any = None, **kwargs: Any) -> None:
    """`worker_shutdown`: this worker is gone; its row goes with it (best effort)."""
    from django.db import DatabaseError, connections

    from stackbone.plumbing.models import WorkerBeat

    name = str(getattr(sender, "hostname", "") or "")
    try:
        WorkerBeat.objects.filter(name=name, pid=os.getpid()).delete()
    except DatabaseError as error:
        logger.warning("could not remove this worker's report (%s)", error)
    finally:
        connections.close_all()


def _beat(me: Identity, pool: Any, stopping: threading.Event | None = None) -> None:
    """The thread: report at start, then when the count changes and every BEAT_SECONDS."""
    import time

    stopping = stopping or threading.Event()
    report(me, pool, first=True)
    last, written = busy(), time.monotonic()
    while not stopping.wait(CHECK_SECONDS):
        now, since = busy(), time.monotonic() - written
        if (now != last and since >= GAP_SECONDS) or since >= BEAT_SECONDS:
            report(me, pool)  # a failed one too waits for the next change or beat (no warning a tick)
            last, written = now, time.monotonic()


def report(me: Identity, pool: Any, *, first: bool = False) -> bool:
    """Write this worker's row now (its count, the database's time); at start also delete rows
    silent for FORGET. False when the database could not be reached."""
    from django.db import DatabaseError, connections

    from stackbone.plumbing import clock
    from stackbone.plumbing.models import WorkerBeat

    figures = {"host": me.host, "pid": me.pid, "pool": me.pool, "concurrency": concurrency_of(pool), "busy": busy()}
    try:
        if first:
            now = clock.now()
            WorkerBeat.objects.filter(beat_at__lt=now - FORGET).delete()
            WorkerBeat.objects.update_or_create(name=me.name, defaults={**figures, "started_at": now, "beat_at": now})
        elif not WorkerBeat.objects.filter(name=me.name).update(**figures, beat_at=clock.expression()):
            now = clock.now()  # deleted meanwhile (a worker of the same name stopped): write it again
            WorkerBeat.objects.update_or_create(name=me.name, defaults={**figures, "started_at": now, "beat_at": now})
        return True
    except DatabaseError as error:
        logger.warning("could not report this worker's busy processes (%s)", error)
        return False
    finally:
        connections.close_all()  # this thread's only
