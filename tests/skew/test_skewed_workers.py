"""Workers whose clock is 10 minutes off the database's, with real Celery workers on PostgreSQL
and Redis (the clock-skew finding of an independent fault run).

Found: a worker 10 minutes BEHIND stamped its grants 580 s in the past, so the next sweep on a
normal host took the slots back 23 s into 45-second `with_limit` steps, which kept running; its
run leases were born expired, so recovery ran the same step again beside the first: 5 guarded
executions at once on a capacity of 3. A worker 10 minutes AHEAD held slots of a 30 s max hold up
to 641 s, let 60 s waits last up to 669 s and granted after their timeout, discarded every sweep
and recovery message (Celery's `expires`, judged by its clock), and its limits' `last_event_at`
(which never steps back) carried its future time to every other host's writes.

Must never happen, with workers on time, behind and ahead at once (every time comes from the
database's clock): a guarded execution outside its slot's [granted_at, freed_at]; two executions
of one step at once; more guarded executions at once than the capacity; a slot live past its max
hold + 15 s, or a wait past its timeout + 15 s, in the database's time; a slot or a wait stamped
by a host's clock; a message discarded as expired before its expiry.

Real time is judged by the database itself (tests/chaos/clocks.py: a trigger writes every change
of a slot or a wait with clock_timestamp()) and by the side files (tests/chaos/records.py: the
machine's real time, even in a skewed worker). The test plays a host on time: every PACE seconds
it sends each worker a sweep and a recovery (as beat would, with beat's options) and a duplicate
advance of each run under way (a redelivered message), so whichever clock a worker has, it gets
its chance to take back, time out, recover or take over.

About 50 s: the long steps must outlast the run lease (30 s, stackbone.runs.runtime.LEASE), and no
setting shortens the lease of a worker.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

import tests.chaos.workflows  # noqa: F401 - registers the chaos workflows in this process too
from stackbone.models import Run
from studio.celery import app
from studio.workflows import start_run
from tests.chaos.__main__ import executions_of, guarded_figures
from tests.chaos.clocks import clock_figures, drop_probe, first_advance_on, install_probe
from tests.chaos.records import Records
from tests.conftest import requires_postgres
from tests.factories import declare
from tests.skew.conftest import SkewedWorker, start_workers

pytestmark = [pytest.mark.django_db(transaction=True), requires_postgres, pytest.mark.postgres]

SKEW = 600.0
ROLES = {"on-time": 0.0, "behind": -SKEW, "ahead": SKEW}
LONG_STEP = 32.0  # seconds: longer than a run's lease (30 s)
PACE = 2.0  # seconds between two rounds of sweeps, recoveries and duplicate advances
DEADLINE = 150.0  # seconds: the most the runs may take before the checks (a stuck run is reported)
FINISHED = ("completed", "failed", "cancelled")


@pytest.fixture
def probe() -> Any:
    """tests/chaos/clocks.py's probe on the test database, for this test (asked for before the
    workers, so they are gone when it is dropped)."""
    with connection.cursor() as cursor:
        install_probe(cursor)
    yield
    with connection.cursor() as cursor:
        drop_probe(cursor)


def beat_options(task: str) -> dict[str, Any]:
    """The options beat sends `task` with (settings.CELERY_BEAT_SCHEDULE)."""
    schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    entries = [entry for entry in schedule.values() if entry["task"] == task]
    return dict(entries[0].get("options", {})) if entries else {}


def pace(workers: list[SkewedWorker], runs: list[str]) -> None:
    """One round of a host on time: a sweep and a recovery to each worker, as beat sends them,
    and a duplicate advance of each run under way (not waiting) to each worker."""
    under_way = list(Run.objects.filter(id__in=runs, status="running", suspended=False).values_list("id", flat=True))
    for worker in workers:
        for task in ("limits.tasks.sweep", "studio.tasks.recover_runs"):
            app.send_task(task, queue=worker.queue, **beat_options(task))
        for run_id in under_way:
            app.send_task("studio.tasks.advance_run", [run_id], queue=worker.queue)


def test_workers_ten_minutes_ahead_and_behind_keep_every_slot_lease_and_wait_in_the_databases_time(
    probe, skewed_workers, tmp_path: Path
) -> None:
    declare(skew_guarded={"capacity": 2, "max_hold": "60s"}, voice_calls={"capacity": 3, "max_hold": "4s"})
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    skewed_workers.extend(start_workers(ROLES, records_dir, tmp_path))
    by_role = {worker.role: worker for worker in skewed_workers}
    records = Records(records_dir)
    runs: dict[str, str] = {}  # run id -> what it is
    began = time.monotonic()

    def start(what: str, role: str, workflow: str, input: dict[str, Any]) -> str:
        with first_advance_on(by_role[role].queue):  # its grant and its step on that worker
            run = start_run(workflow, input)
        runs[run.id] = what
        return run.id

    def step_started(run_id: str) -> bool:
        pace(skewed_workers, list(runs))
        return any(e["run_id"] == run_id for e in records.read().starts.values())

    def wait_until(condition: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline:
            time.sleep(PACE)

    # Two long with_limit steps fill skew-guarded (capacity 2): one granted and run by the worker
    # behind, one by the worker ahead.
    for role in ("behind", "ahead"):
        long_run = {"limits": ["skew-guarded"], "seconds": LONG_STEP, "timeout": "60s", "label": f"long-{role}"}
        run_id = start(f"long step on the worker {role}", role, "chaos_with_limit", long_run)
        wait_until(lambda run_id=run_id: step_started(run_id), 20)
    # Then a wait of 8 s on each worker, which times out (both slots stay busy for 30 s more), and
    # a call on each worker whose voice-calls slot nobody releases: max hold (4 s) takes it back.
    for role in ROLES:
        short = {"limits": ["skew-guarded"], "seconds": 1, "timeout": "8s", "label": f"wait-{role}"}
        start(f"8 s wait on the worker {role}", role, "chaos_with_limit", short)
        start(f"kept slot on the worker {role}", role, "place_call", {"call_id": f"kept-{role}", "timeout": "5s"})

    def settled() -> bool:
        pace(skewed_workers, list(runs))
        statuses = Run.objects.filter(id__in=list(runs)).values_list("status", flat=True)
        return all(status in FINISHED for status in statuses)

    wait_until(settled, DEADLINE - (time.monotonic() - began))
    time.sleep(PACE)  # the last side-file lines
    records.read()

    # The injector applied: every process of each worker has its clock.
    for worker in skewed_workers:
        clocks = [p["skew"] for p in records.processes + records.tasks if p["ppid"] == worker.pid]
        assert clocks and all(abs(c - worker.skew) < 1 for c in clocks), f"{worker.role} worker's clocks: {clocks}"

    problems: list[str] = []
    for run in Run.objects.filter(id__in=list(runs)):
        what = runs[run.id]
        outcome = run.status if run.status != "failed" else run.error.strip().splitlines()[-1][:120]
        expected = "SlotTimeoutError" if what.startswith("8 s wait") else "completed"
        if expected not in outcome:
            problems.append(f"{what} ({run.id}): {outcome}, expected {expected}")
    executions = executions_of(records)
    _, guarded = guarded_figures(records, tolerance=0.05)
    figures, clock = clock_figures(records, executions, tolerance=0.05)
    problems += guarded + clock
    print(f"{time.monotonic() - began:.0f} s; {figures}; executions: {len(executions)}")
    long_steps = [e for e in executions if e["planned"] == LONG_STEP]
    assert len(long_steps) >= 2, f"the long steps did not run: {figures}"
    shown = problems[:60] + ([f"... and {len(problems) - 60} more"] if len(problems) > 60 else [])
    assert not problems, "\n".join([f"{len(problems)} problem(s); {figures}", *shown])
