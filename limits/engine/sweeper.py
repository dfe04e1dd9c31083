"""The background sweep (every 15 s, and `manage.py limits_sweep`): SPEC 4.2-4.4."""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection

from limits import insights
from limits.durations import parse_duration
from limits.engine.engines import engine
from limits.engine.results import SweepReport
from limits.models import QueueEntry, Slot, SweepState
from stackbone.plumbing import clock as box_clock

HISTORY_BATCH = 5_000


def sweep() -> SweepReport:
    """One pass of the background sweep (every 15 s). Idempotent, and safe to run twice at once.

    1. Find the limits with work, from partial indexes and the limit counters (a constant number
       of queries, whatever the size of the tables): busy slots past their expiry, reservations
       past their 2 minutes, waits past their deadline, and free capacity with runs waiting.
    2. For each such limit, in one transaction under its row lock:
       a. take back busy slots past expiry (one audit event for the lot);
       b. lapse reservations: the slot is freed and its run goes to the end of the queue with
          its original deadline;
       c. time out waits past their deadline;
       d. grant the free capacity to the head of the queue.
    Every step re-reads its rows under the lock, so a second sweep running at once finds them
    already done and changes nothing. Steps 1 and 2 are the engine's (limits.engine.engines): on
    PostgreSQL one statement whatever the number of limits (the procedure limits_sweep, which
    commits each limit before the next); in the Python engine (SQLite), four queries and a
    transaction per limit (PythonEngine.sweep).
    3. Delete history older than STACKBONE_HISTORY_RETENTION (default 7 days): freed slots and
       finished queue entries, a bounded batch of each per pass; never history the insights
       rollup may still recount (history_cutoff).
    4. Insights (limits.insights.record): sample this minute's counters once, roll up the minutes
       that ended, purge old minutes, a bounded number of statements.
    5. Record when it ran and how long it took (limits.models.SweepState), for /healthz and
       /metrics.
    """
    started = time.perf_counter()
    now, report = box_clock.now(), SweepReport()
    engine().sweep(now, report)  # steps 1 and 2
    report.purged = purge_history(history_cutoff(now))
    insights.record(box_clock.now())
    done = {"last_run_at": now, "last_report": asdict(report), "last_duration_ms": _ms_since(started)}
    if not SweepState.objects.filter(id=1).update(**done):
        SweepState.objects.get_or_create(id=1, defaults=done)
    return report


def analyze_partitioned() -> None:
    """ANALYZE limits_slot and limits_queueentry on PostgreSQL (limits.tasks.analyze, hourly).
    They are partitioned there (migration 0034): autovacuum analyzes each partition but never a
    partitioned table itself, whose statistics the planner reads for a query over both
    partitions (PostgreSQL's docs: "It is usually necessary to periodically run a manual
    ANALYZE"). It samples, and takes no lock a grant waits for: 1.5-3.7 s at 2,000,000 rows on
    the bench machine. Nothing to do on SQLite."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE limits_slot, limits_queueentry")


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def history_retention_ms() -> int:
    """settings.STACKBONE_HISTORY_RETENTION in ms (checked at start by limits.checks)."""
    return parse_duration(settings.STACKBONE_HISTORY_RETENTION, maximum=None)


def history_cutoff(now: datetime) -> datetime:
    """History older than this may go: STACKBONE_HISTORY_RETENTION before `now`, but never
    history the insights rollup may still read (limits.insights.history_needed_from: its trailing
    recount window before rolled_until). With a retention longer than the most the rollup reads
    back (MAX_BACKFILL + RECOUNT_WINDOW + a span + a sweep, about 1 h 30 min) no query is needed."""
    cutoff = now - timedelta(milliseconds=history_retention_ms())
    if now - cutoff > insights.MAX_BACKFILL + insights.RECOUNT_WINDOW + insights.KEY_SPAN + insights.SWEEP_PERIOD:
        return cutoff
    rolled_until = SweepState.objects.filter(id=1).values_list("rolled_until", flat=True).first()
    needed = insights.history_needed_from(rolled_until)
    return cutoff if needed is None else min(cutoff, needed)


def purge_history(cutoff: datetime) -> int:
    """Delete up to HISTORY_BATCH freed slots and finished queue entries older than `cutoff`.
    Slots go first: an entry is kept while a slot granted from it remains. History rows never
    change, so this needs no lock, and two sweeps at once delete each row once."""
    slot_ids = list(Slot.objects.filter(freed_at__lt=cutoff).values_list("id", flat=True)[:HISTORY_BATCH])
    if slot_ids:
        Slot.objects.filter(id__in=slot_ids).delete()
    # `exclude(state="waiting")` is the partial index's condition: without it PostgreSQL scans
    # every entry (a million waiting ones make an idle sweep 150 ms).
    entries = QueueEntry.objects.exclude(state=QueueEntry.State.WAITING).filter(
        finished_at__lt=cutoff, slot__isnull=True
    )
    entry_ids = list(entries.values_list("id", flat=True)[:HISTORY_BATCH])
    if entry_ids:
        entries.filter(id__in=entry_ids).delete()
    return len(slot_ids) + len(entry_ids)
