"""The tasks of the tests: plain django.tasks code, run through LimitsBackend. Imported once TASKS
names it (conftest.py's `tasks` fixture; the worker's settings, tests/django_tasks/settings.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.tasks import TaskContext, task

GATE_TIMEOUT = 20.0  # s a gated task waits for its gate before it gives up (a test that failed)


def wait_for_gate(gate: str) -> None:
    """Hold the task (and whatever slot its run holds) until the test creates the file `gate`."""
    deadline = time.monotonic() + GATE_TIMEOUT
    while not Path(gate).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no gate {gate}")
        time.sleep(0.01)


@task
def add(a: int, b: int = 0) -> int:
    """Adds two numbers."""
    return a + b


@task
async def add_later(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def exit_task() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task
def complex_return_value() -> Any:
    return lambda: True  # neither JSON nor anything normalize_json takes


@task
def not_a_number() -> float:
    return float("nan")  # JSON for Python, not for any database of the box


@task(takes_context=True)
def whoami(context: TaskContext[Any, Any]) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "status": context.task_result.status}


@task
def touch(path: str) -> str:
    Path(path).write_text("ran")
    return path


@task
def gated(gate: str) -> str:
    wait_for_gate(gate)
    return "opened"


@task(limits=["tasks-partner"])  # type: ignore[call-overload]  # django-stubs' @task takes no backend options
def partner_call(gate: str) -> str:
    wait_for_gate(gate)
    return "called"


@task(concurrency={"per_key": 1}, concurrency_key="tenant")  # type: ignore[call-overload]
def per_tenant(gate: str, tenant: str = "acme") -> str:
    wait_for_gate(gate)
    return tenant


@task(concurrency={"total": 10}, concurrency_key=lambda account, **_: f"account-{account}")  # type: ignore[call-overload]
def per_account(account: int, note: str = "") -> int:
    return account


@task(concurrency={"per_key": 1}, concurrency_key="report", on_full="skip")  # type: ignore[call-overload]
def build_report(report: str) -> str:
    """SPEC 14.2 for a task: if the report is already being built, don't queue another."""
    return report


@task(concurrency={"per_key": 1}, concurrency_key="account", on_full="replace")  # type: ignore[call-overload]
def sync_account(account: str, note: str = "") -> str:
    """SPEC 14.3 for a task: if a sync of the account is already waiting, the newest one matters."""
    return note


@task
def noop(*args: Any, **kwargs: Any) -> None:
    return None
