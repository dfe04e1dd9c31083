"""The skew injector (tests/skew/sitecustomize.py) really skews a Celery worker: its main process
and every process of its prefork pool (forks of it), and keeps ticking."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from studio.celery import app
from tests.chaos.records import Records
from tests.runs.conftest import wait_for
from tests.skew.conftest import SKEW_DIR, start_workers
from tests.skew.sitecustomize import SKEW_ENV

# The workers' recovery at start reads the runs; what is proved is the injector's clock, on any database.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.one_database]


def test_the_injector_skews_a_process_and_its_forks_and_the_clock_ticks() -> None:
    script = (
        "import os, time, datetime as dt\n"
        "from time_machine import escape_hatch as real\n"
        "def skew(): return round(time.time() - real.time.time())\n"
        "first = time.time(); time.sleep(0.3); ticked = time.time() - first\n"
        "now = round((dt.datetime.now(dt.UTC) - real.datetime.datetime.now(dt.UTC)).total_seconds())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('child', skew(), flush=True); os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('parent', skew(), now, ticked >= 0.29, time.monotonic() < 1e6)\n"
    )
    env = {"PYTHONPATH": str(SKEW_DIR), SKEW_ENV: "-600", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)

    assert done.stderr == ""
    assert done.stdout.split("\n")[:2] == ["child -600", "parent -600 -600 True True"]


def test_a_skewed_celery_worker_is_skewed_in_its_main_process_and_every_pool_process(
    skewed_workers, tmp_path: Path
) -> None:
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    roles = {"ahead": 600.0, "behind": -600.0}
    skewed_workers.extend(start_workers(roles, records_dir, tmp_path))
    pids = {worker.pid: worker for worker in skewed_workers}
    records = Records(records_dir)
    for worker in skewed_workers:
        app.send_task("studio.tasks.recover_runs", queue=worker.queue)  # a task in a pool process of each

    def pool_processes_and_tasks_seen() -> bool:
        records.read()
        return all(
            sum(1 for p in records.processes if p["ppid"] == pid) >= 3
            and any(t["ppid"] == pid and t["task"] == "studio.tasks.recover_runs" for t in records.tasks)
            for pid in pids
        )

    wait_for(pool_processes_and_tasks_seen, what="each pool process, and a task in each worker")
    ahead = next(worker for worker in skewed_workers if worker.role == "ahead")
    # An expiry two minutes away by the real clock: the worker 10 minutes ahead finds it long past.
    sent = time.time()
    app.send_task("studio.tasks.recover_runs", queue=ahead.queue, expires=120)
    wait_for(lambda: bool(records.read().revoked), what="the worker ahead to discard the message")

    for pid, worker in pids.items():
        mine = [p["skew"] for p in records.processes + records.tasks if p["ppid"] == pid]
        assert mine and all(abs(skew - worker.skew) < 2 for skew in mine), (worker.role, mine)
    (discarded,) = records.revoked
    assert discarded["pid"] == ahead.pid and abs(discarded["skew"] - 600) < 2  # the worker's main process
    assert discarded["expired"] and discarded["task"] == "studio.tasks.recover_runs"
    assert discarded["t"] - sent < 60  # discarded at once, by the real clock, though it had 120 s to go
