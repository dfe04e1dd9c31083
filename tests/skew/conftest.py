"""Real Celery workers (prefork) whose clock is off, for the clock-skew tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.chaos.records import RECORDS_ENV
from tests.runs.conftest import real_broker  # noqa: F401 - the fixture: tasks go to the run's real broker
from tests.skew.sitecustomize import SKEW_ENV

SKEW_DIR = Path(__file__).resolve().parent  # on a skewed worker's PYTHONPATH: its sitecustomize.py


def box_queues() -> list[str]:
    """The queues a worker of the box consumes when no -Q names them (settings)."""
    queues = [queue.name for queue in getattr(settings, "CELERY_TASK_QUEUES", None) or []]
    return queues or [settings.CELERY_TASK_DEFAULT_QUEUE]


class SkewedWorker:
    """`celery worker` with a prefork pool, its clock `skew` seconds off the machine's (0: on
    time), consuming the box's queues and one of its own (`queue`), recording what it runs in
    side files (tests/chaos/records.py) under `records`. A production process: the box's
    settings, no test clock setting (studio/plumbing/clock.py: the database's clock)."""

    def __init__(self, role: str, skew: float, records: Path, logs: Path, concurrency: int = 3) -> None:
        self.role, self.skew = role, skew
        self.queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-{role}"
        self.log = logs / f"worker-{role}.log"
        db = connection.settings_dict
        if connection.vendor == "sqlite":
            database_url = f"sqlite:///{db['NAME']}"
        else:
            database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "STACKBONE_WORKFLOWS": "studio.workflows,tests.chaos.workflows",
            RECORDS_ENV: str(records),
        }
        env.pop("STACKBONE_CLOCK", None)  # workers keep the production default, whatever the tests set
        env.pop(SKEW_ENV, None)
        if skew:
            env[SKEW_ENV] = f"{skew:g}"
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SKEW_DIR), env.get("PYTHONPATH", "")) if p)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=prefork",
                 f"--concurrency={concurrency}", "--loglevel=INFO", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", f"--hostname=skew-{role}-{uuid.uuid4().hex[:6]}@%h",
                 f"--queues={','.join([*box_queues(), self.queue])}", "--include=tests.chaos.records"],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=settings.BASE_DIR, start_new_session=True,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the {self.role} worker exited:\n{self.output()[-3000:]}")
        return " ready." in self.output()

    def stop(self) -> None:
        """SIGKILL of the whole group: the test is over, and a warm shutdown would wait for a long step."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def start_workers(roles: dict[str, float], records: Path, logs: Path, timeout: float = 60) -> list[SkewedWorker]:
    """Start one worker per role at once and wait until every one is ready."""
    started = [SkewedWorker(role, skew, records, logs) for role, skew in roles.items()]
    deadline = time.monotonic() + timeout
    try:
        while not all(worker.ready() for worker in started):
            if time.monotonic() > deadline:
                late = [w for w in started if not w.ready()]
                raise AssertionError(f"workers not ready after {timeout:.0f} s:\n{late[0].output()[-3000:]}")
            time.sleep(0.1)
    except BaseException:
        for worker in started:
            worker.stop()
        raise
    return started


@pytest.fixture
def skewed_workers(real_broker) -> Iterator[list[SkewedWorker]]:  # noqa: F811 - the imported fixture
    """A list to put started workers in; each is stopped at the end."""
    workers: list[SkewedWorker] = []
    yield workers
    for worker in workers:
        worker.stop()
