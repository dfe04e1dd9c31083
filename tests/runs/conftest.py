"""A real Celery worker process for the run-layer tests, over the configured broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.db import connection

from stackbone.models import Run
from tests.conftest import use_broker


class Worker:
    def __init__(self, env: dict[str, str] | None = None, *, pool: str = "solo", concurrency: int = 1) -> None:
        self.lines: list[str] = []
        db = connection.settings_dict
        if connection.vendor == "sqlite":
            database_url = f"sqlite:///{db['NAME']}"
        else:
            database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            **(env or {}),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "studio", "worker", f"--pool={pool}", f"--concurrency={concurrency}",
             "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"test-{uuid.uuid4().hex[:8]}@%h"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=settings.BASE_DIR,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: any("ready." in line for line in self.lines), what="the worker to start", worker=self)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 10) -> None:
        """A warm shutdown (SIGTERM); killed if it has not ended within `timeout` seconds."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for(condition: Callable[[], bool], *, what: str, worker: Worker | None = None, timeout: float = 60) -> float:
    """Poll until condition holds; return the seconds it took (reported, never asserted)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            log = "".join(worker.lines[-40:]) if worker else ""
            raise AssertionError(f"timed out waiting for {what}\n{log}")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.fixture
def real_broker() -> Iterator[None]:
    from studio.celery import app

    use_broker(settings.CELERY_BROKER_URL, eager=False)
    app.control.purge()
    yield
    use_broker("memory://", eager=True)


@pytest.fixture
def workers(real_broker) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def status(run: Run) -> str:
    run.refresh_from_db()
    return run.status
