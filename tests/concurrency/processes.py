"""Start worker processes (tests/concurrency/worker.py) against the test database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

BASE_DIR = Path(settings.BASE_DIR)


def child_env() -> dict[str, str]:
    """The parent's environment, with DATABASE_URL naming the test database pytest-django made
    (test_<name>), so the children see the rows a transactional_db test commits."""
    db = connection.settings_dict
    password = f":{quote(str(db['PASSWORD']), safe='')}" if db.get("PASSWORD") else ""
    url = f"postgres://{quote(str(db['USER']), safe='')}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "studio.settings"}


class Worker:
    def __init__(self, role: str, params: dict[str, Any], log_dir: Path) -> None:
        self.role = role
        self.stderr_path = log_dir / f"{role}-{params.get('index', id(self))}.stderr"
        self._stderr: IO[str] = self.stderr_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.concurrency.worker", role, json.dumps(params)],
            cwd=BASE_DIR,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )

    def line(self) -> dict[str, Any]:
        """The next JSON line the worker prints (blocks until it does)."""
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        if not text:
            self.process.wait()
            raise AssertionError(f"{self.role} exited with {self.process.returncode}:\n{self.errors()}")
        return json.loads(text)

    def result(self, timeout: float) -> dict[str, Any]:
        """The worker's final JSON document; fails if it exits badly or takes longer than timeout."""
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.role} did not finish in {timeout} s:\n{self.errors()}") from None
        self._stderr.close()
        if self.process.returncode != 0:
            raise AssertionError(f"{self.role} exited with {self.process.returncode}:\n{self.errors()}")
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def errors(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text()[-4000:]


class Crew:
    """Workers that start together: each says it is ready, then the start file releases them."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.start_file = tmp_path / "start"
        self.stop_file = tmp_path / "stop"
        self.workers: list[Worker] = []

    def add(self, role: str, **params: Any) -> Worker:
        params = {"start_file": str(self.start_file), "stop_file": str(self.stop_file), **params}
        worker = Worker(role, params, self.dir)
        self.workers.append(worker)
        return worker

    def start(self) -> None:
        for worker in self.workers:
            assert worker.line() == {"ready": True}
        self.start_file.touch()

    def stop(self) -> None:
        self.stop_file.touch()

    def kill_all(self) -> None:
        for worker in self.workers:
            worker.kill()


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
