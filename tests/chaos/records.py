"""Side files of the chaos run: what really ran, when, in which process (issue 11).

Each worker process appends JSON lines to its own file under $STACKBONE_CHAOS_RECORDS:

- `start` / `end` of every execution of a guarded step (tests/chaos/workflows.py);
- `task`: a task this process began (at most one line a second per process, every periodic
  task), so the chaos run can tell which worker processes kept consuming after a Redis restart.

Workers import this module at start (`celery worker --include tests.chaos.records`), before
their pool forks, so every pool process records its tasks. It imports nothing from Django.
Times are time.time(), the machine's wall clock, which the slots' timezone.now() also reads.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from celery.signals import task_prerun

RECORDS_ENV = "STACKBONE_CHAOS_RECORDS"
PERIODIC = ("limits.tasks.sweep", "studio.tasks.recover_runs")

_last_task_line = 0.0


def record(event: dict[str, Any]) -> None:
    """Append one line to this process's file (open, write, close: a SIGKILL loses nothing written)."""
    folder = os.environ.get(RECORDS_ENV)
    if not folder:
        return
    line = json.dumps({**event, "pid": os.getpid(), "ppid": os.getppid()}) + "\n"
    with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(line)


@task_prerun.connect(weak=False)
def _task_seen(sender: Any = None, **kwargs: Any) -> None:
    global _last_task_line
    now, name = time.time(), getattr(sender, "name", "")
    if name in PERIODIC or now - _last_task_line >= 1.0:
        _last_task_line = now
        record({"event": "task", "task": name, "t": now})


class Records:
    """Reads the side files as they grow (each file from where the last read stopped)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        self.starts: dict[str, dict[str, Any]] = {}
        self.ends: dict[str, float] = {}
        self.tasks: list[dict[str, Any]] = []

    def read(self) -> Records:
        for path in sorted(self.folder.glob("*.jsonl")):
            with path.open("rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                data = handle.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line being written waits for the next read
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            for line in complete.decode().splitlines():
                event = json.loads(line)
                if event["event"] == "start":
                    self.starts[event["id"]] = event
                elif event["event"] == "end":
                    self.ends[event["id"]] = event["t"]
                elif event["event"] == "task":
                    self.tasks.append(event)
        return self

    def running(self, now: float, min_age: float, min_left: float) -> list[dict[str, Any]]:
        """Guarded steps under way for at least `min_age` s, with at least `min_left` s planned left."""
        return [
            start
            for key, start in self.starts.items()
            if key not in self.ends and start["t"] + min_age <= now <= start["t"] + start["planned"] - min_left
        ]
