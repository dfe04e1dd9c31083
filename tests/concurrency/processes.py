"""Start worker processes (tests/concurrency/worker.py) against the test database: one at a time
(`Worker`, a fresh interpreter each), or a crew forked from one process that set Django up once
(`Crew`)."""

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


class Forked:
    """A worker forked by the crew's zygote (worker.zygote): the same reading as Worker, from its
    files."""

    def __init__(self, crew: Crew, role: str, params: dict[str, Any]) -> None:
        self.crew, self.role = crew, role
        name = f"{role}-{params.get('index', id(self))}"
        self.out_path, self.stderr_path = crew.dir / f"{name}.stdout", crew.dir / f"{name}.stderr"
        self.rc_path = crew.dir / f"{name}.rc"
        answer = crew.order(
            {
                "role": role,
                "params": params,
                "out": str(self.out_path),
                "err": str(self.stderr_path),
                "rc": str(self.rc_path),
            }
        )
        self.pid: int = answer["pid"]
        self._read = 0  # how many lines line() has returned

    def returncode(self) -> int | None:
        return int(self.rc_path.read_text()) if self.rc_path.exists() else None

    def _lines(self) -> list[str]:
        text = self.out_path.read_text() if self.out_path.exists() else ""
        return text.splitlines(keepends=True)

    def line(self, timeout: float = 120) -> dict[str, Any]:
        """The next JSON line the worker prints (waits until it does)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [text for text in self._lines() if text.endswith("\n")]
            if len(lines) > self._read:
                self._read += 1
                return json.loads(lines[self._read - 1])
            if self.returncode() is not None:
                raise AssertionError(f"{self.role} exited with {self.returncode()}:\n{self.errors()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.role} printed nothing in {timeout} s:\n{self.errors()}")
            time.sleep(0.01)

    def result(self, timeout: float) -> dict[str, Any]:
        """The worker's final JSON document; fails if it exits badly or takes longer than timeout."""
        deadline = time.monotonic() + timeout
        while self.returncode() is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"{self.role} did not finish in {timeout} s:\n{self.errors()}")
            time.sleep(0.02)
        if self.returncode() != 0:
            raise AssertionError(f"{self.role} exited with {self.returncode()}:\n{self.errors()}")
        return json.loads(self._lines()[-1])

    def kill(self) -> None:
        if self.returncode() is None:
            self.crew.order({"kill": self.pid})

    def errors(self) -> str:
        return self.stderr_path.read_text()[-4000:] if self.stderr_path.exists() else ""


class Crew:
    """Workers that start together: each says it is ready, then the start file releases them.
    They are forked from one zygote process that set Django up once (worker.zygote)."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.start_file = tmp_path / "start"
        self.stop_file = tmp_path / "stop"
        self.workers: list[Forked] = []
        self._zygote: subprocess.Popen[str] | None = None
        self._zygote_err: IO[str] | None = None

    def order(self, order: dict[str, Any]) -> dict[str, Any]:
        """Send the zygote one order and read its answer."""
        if self._zygote is None:
            self._zygote_err = (self.dir / "zygote.stderr").open("w")
            self._zygote = subprocess.Popen(
                [sys.executable, "-m", "tests.concurrency.worker", "zygote", "{}"],
                cwd=BASE_DIR,
                env=child_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._zygote_err,
                text=True,
            )
        assert self._zygote.stdin is not None and self._zygote.stdout is not None
        self._zygote.stdin.write(json.dumps(order) + "\n")
        self._zygote.stdin.flush()
        answer = self._zygote.stdout.readline()
        if not answer:
            raise AssertionError(f"the zygote exited:\n{(self.dir / 'zygote.stderr').read_text()[-4000:]}")
        return json.loads(answer)

    def add(self, role: str, **params: Any) -> Forked:
        params = {"start_file": str(self.start_file), "stop_file": str(self.stop_file), **params}
        worker = Forked(self, role, params)
        self.workers.append(worker)
        return worker

    def start(self) -> None:
        for worker in self.workers:
            assert worker.line() == {"ready": True}
        self.start_file.touch()

    def stop(self) -> None:
        self.stop_file.touch()

    def kill_all(self) -> None:
        """Kill the workers still running, then let the zygote reap them and exit."""
        if self._zygote is None:
            return
        for worker in self.workers:
            worker.kill()
        assert self._zygote.stdin is not None
        self._zygote.stdin.close()
        try:
            self._zygote.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._zygote.kill()
            self._zygote.wait()
        if self._zygote_err is not None:
            self._zygote_err.close()


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
