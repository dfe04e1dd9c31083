"""Django's task framework through the box (limits.django_tasks): TASKS names LimitsBackend for the
tests of this folder only, and one real Celery worker serves them all (it reads the same TASKS from
tests/django_tasks/settings.py)."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from types import ModuleType

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from tests.conftest import use_broker
from tests.runs.conftest import Worker, wait_for

TASKS = {"default": {"BACKEND": "limits.django_tasks.LimitsBackend"}}


@pytest.fixture(scope="package", autouse=True)
def tasks() -> Iterator[ModuleType]:
    """The test tasks, defined under LimitsBackend (a task's class is its backend's, chosen when
    it is defined); Django's own backend again for the folders after this one."""
    with override_settings(TASKS=TASKS):
        yield importlib.import_module("tests.django_tasks.tasks")


class PoolWorker(Worker):
    """tests/runs/conftest.py's worker with a pool of processes: tasks of different keys run side
    by side, as on a box's worker (`./scripts/dev` runs two)."""

    def __init__(self, processes: int) -> None:
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
            "DJANGO_SETTINGS_MODULE": "tests.django_tasks.settings",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=prefork", f"--concurrency={processes}",
             "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-n", f"tasks-{uuid.uuid4().hex[:8]}@%h"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=settings.BASE_DIR,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        wait_for(lambda: any("ready." in line for line in self.lines), what="the worker to start", worker=self)


@pytest.fixture(scope="package")
def shared_worker(django_db_setup: None) -> Iterator[Worker]:
    """One worker for the folder, over the configured broker, with TASKS on LimitsBackend."""
    from studio.celery import app

    use_broker(settings.CELERY_BROKER_URL, eager=False)
    app.control.purge()
    worker = PoolWorker(processes=3)
    yield worker
    worker.process.send_signal(signal.SIGQUIT)  # a cold shutdown: its pool goes with it, at once
    try:
        worker.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()


@pytest.fixture
def worker(shared_worker: Worker, eager_celery: None) -> Iterator[Worker]:
    """Tasks go to the shared worker (after the root conftest made them eager for every test)."""
    use_broker(settings.CELERY_BROKER_URL, eager=False)
    yield shared_worker
    use_broker("memory://", eager=True)
