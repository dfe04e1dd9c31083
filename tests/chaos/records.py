"""Side files of the chaos run: what really ran, when, in which process (issue 11).

Each worker process appends JSON lines to its own file under $STACKBONE_CHAOS_RECORDS:

- `start` / `end` of every execution of a guarded step (tests/chaos/workflows.py);
- `step` / `step_end` of every execution of any step of any run (`record_steps`: the work a run
  does while it executes, for the box's run concurrency, SPEC 12): its run, its name;
- `task`: a task this process began (at most one line a second per process, every periodic
  task), so the chaos run can tell which worker processes kept consuming after a Redis restart;
- `revoked`: a message this worker discarded unrun (expired or revoked), with the expiry the
  message carried, so a discard before that expiry (a worker whose clock is ahead) shows;
- `process`: a pool process began (its clock's skew: the skew injector, tests/skew).

Workers import this module at start (`celery worker --include tests.chaos.records`), before
their pool forks, so every pool process records its tasks. It imports nothing from Django
(record_steps imports the run layer once a pool process begins, when Django is set up).

Times are the machine's real wall clock (`now()`), even in a worker whose clock the skew
injector moved (tests/skew/sitecustomize.py): every side file, the chaos driver and the
database (on the same machine) share one clock. Each line also says its process's skew (`skew`,
seconds: its time.time() minus the real time).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery.signals import task_prerun, task_revoked, worker_process_init

RECORDS_ENV = "STACKBONE_CHAOS_RECORDS"
PERIODIC = ("limits.tasks.sweep", "studio.tasks.recover_runs")

try:  # the test extras: present wherever the tests and the chaos run run
    from time_machine import escape_hatch
except ImportError:  # pragma: no cover - without time_machine nothing can skew a clock either
    escape_hatch = None

_last_task_line = 0.0


def now() -> float:
    """The real wall-clock time, whatever the skew injector (or a test) did to this process's clock."""
    if escape_hatch is not None and escape_hatch.is_travelling():
        return float(escape_hatch.time.time())
    return time.time()


def skew() -> float:
    """This process's clock minus the real time, in seconds (0.0 unless tests/skew moved it)."""
    return round(time.time() - now(), 1)


def record(event: dict[str, Any]) -> None:
    """Append one line to this process's file (open, write, close: a SIGKILL loses nothing written)."""
    folder = os.environ.get(RECORDS_ENV)
    if not folder:
        return
    line = json.dumps({**event, "pid": os.getpid(), "ppid": os.getppid(), "skew": skew()}) + "\n"
    with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(line)


@task_prerun.connect(weak=False)
def _task_seen(sender: Any = None, **kwargs: Any) -> None:
    global _last_task_line
    at, name = now(), getattr(sender, "name", "")
    if name in PERIODIC or at - _last_task_line >= 1.0:
        _last_task_line = at
        record({"event": "task", "task": name, "t": at})


@task_revoked.connect(weak=False)
def _task_discarded(sender: Any = None, request: Any = None, expired: bool = False, **kwargs: Any) -> None:
    expires = getattr(request, "expires", None)
    record(
        {
            "event": "revoked",
            "task": getattr(sender, "name", ""),
            "expired": bool(expired),
            "expires": expires.isoformat() if hasattr(expires, "isoformat") else expires,
            "t": now(),
        }
    )


@worker_process_init.connect(weak=False)
def _process_began(**kwargs: Any) -> None:
    record({"event": "process", "t": now()})
    if os.environ.get(RECORDS_ENV):
        record_steps()


def record_steps() -> None:
    """In this process, every step of a run that really runs (not a replay's recorded result)
    writes a `step` line as its function begins and a `step_end` line as it returns or raises
    (the run layer's run_step, through which every @step goes, wrapped once; Django is set up by
    the time a pool process begins)."""
    from stackbone.runs import runtime

    original: Callable[..., Any] = runtime.run_step
    if getattr(original, "chaos_records", False):
        return

    def run_step(name: str, fn: Callable[[], Any], *, atomic: bool = False) -> Any:
        ctx = runtime.current_run()
        if ctx is None or ctx.in_step:
            return original(name, fn, atomic=atomic)
        run_id, execution = ctx.run_id, uuid.uuid4().hex

        def timed() -> Any:
            record({"event": "step", "id": execution, "run_id": run_id, "name": name, "t": now()})
            try:
                return fn()
            finally:
                record({"event": "step_end", "id": execution, "t": now()})

        return original(name, timed, atomic=atomic)

    run_step.chaos_records = True  # type: ignore[attr-defined]
    runtime.run_step = run_step


class Records:
    """Reads the side files as they grow (each file from where the last read stopped)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        self.starts: dict[str, dict[str, Any]] = {}
        self.ends: dict[str, float] = {}
        self.tasks: list[dict[str, Any]] = []
        self.revoked: list[dict[str, Any]] = []
        self.processes: list[dict[str, Any]] = []
        self.steps: dict[str, dict[str, Any]] = {}  # any step of any run: execution id -> its `step` line
        self.step_ends: dict[str, float] = {}

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
                elif event["event"] == "revoked":
                    self.revoked.append(event)
                elif event["event"] == "process":
                    self.processes.append(event)
                elif event["event"] == "step":
                    self.steps[event["id"]] = event
                elif event["event"] == "step_end":
                    self.step_ends[event["id"]] = event["t"]
        return self

    def running(self, now: float, min_age: float, min_left: float) -> list[dict[str, Any]]:
        """Guarded steps under way for at least `min_age` s, with at least `min_left` s planned left."""
        return [
            start
            for key, start in self.starts.items()
            if key not in self.ends and start["t"] + min_age <= now <= start["t"] + start["planned"] - min_left
        ]
