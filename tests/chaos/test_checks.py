"""The chaos run's checks of the real concurrency of guarded work (issue 11), on hand-made side
files and slot rows: each check must catch the violation it is there for."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from limits.models import Slot
from tests.chaos.__main__ import ChaosFigures, guarded_figures, worker_figures
from tests.chaos.records import Records
from tests.factories import declare

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def slot(run_id: str, granted: float, freed: float | None) -> str:
    row = Slot.objects.create(
        limit=declare(guarded_work={"capacity": 1, "max_hold": "2m"})["guarded-work"],
        run_id=run_id,
        request=f"{run_id}:1",
        state="released" if freed is not None else "busy",
        granted_at=at(granted),
        expires_at=at(granted + 120),
        freed_at=at(freed) if freed is not None else None,
    )
    return row.id


def write(folder: Path, *executions: tuple[str, str | None, float, float | None, float]) -> Records:
    """(run id, slot id, start, end or None for a SIGKILLed step, planned seconds)"""
    lines = []
    for index, (run_id, slot_id, start, end, planned) in enumerate(executions):
        key = f"e{index}"
        lines.append({"event": "start", "id": key, "run_id": run_id, "slot_id": slot_id, "limit": "guarded-work"})
        lines[-1].update({"planned": planned, "t": T0 + start, "pid": 1, "ppid": 0})
        if end is not None:
            lines.append({"event": "end", "id": key, "t": T0 + end, "pid": 1, "ppid": 0})
    (folder / "1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Records(folder).read()


def test_steps_inside_their_slots_one_after_another_pass(tmp_path: Path) -> None:
    first, second = slot("run_a", 0, 2.0), slot("run_b", 2.01, 4.0)
    records = write(tmp_path, ("run_a", first, 0.01, 1.99, 2), ("run_b", second, 2.02, 3.99, 2))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert problems == []
    assert figures["guarded_outside_slot"] == 0
    assert figures["guarded_max_overlap"] == {"guarded-work": "1 (capacity 1; 0 time(s) over)"}


def test_a_step_run_again_after_its_slot_was_released_is_outside_its_slot(tmp_path: Path) -> None:
    first = slot("run_a", 0, 2.0)
    records = write(tmp_path, ("run_a", first, 0.01, 1.5, 1.5), ("run_a", first, 5.0, 6.5, 1.5))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_outside_slot"] == 1
    assert figures["guarded_runs_executed_twice"] == 1
    assert "ran outside its slot" in problems[0]


def test_a_step_without_any_slot_is_outside(tmp_path: Path) -> None:
    slot("run_a", 0, 2.0)
    records = write(tmp_path, ("run_zzz", None, 0.5, 1.0, 0.5))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_outside_slot"] == 1
    assert "no slot" in problems[0]


def test_two_steps_at_once_on_a_capacity_of_one_are_caught(tmp_path: Path) -> None:
    first, second = slot("run_a", 0, 3.0), slot("run_b", 0.5, 3.5)  # rows alone could not show it
    records = write(tmp_path, ("run_a", first, 0.1, 2.0, 2), ("run_b", second, 1.0, 3.0, 2))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_max_overlap"] == {"guarded-work": "2 (capacity 1; 1 time(s) over)"}
    assert any("2 guarded steps of guarded-work ran at once" in problem for problem in problems)


def test_a_sigkilled_step_counts_as_running_its_planned_seconds(tmp_path: Path) -> None:
    first = slot("run_a", 0, 1.0)
    records = write(tmp_path, ("run_a", first, 0.1, None, 3))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_unfinished"] == 1
    assert figures["guarded_outside_slot"] == 1
    assert "(killed)" in problems[0]


def test_a_worker_that_took_no_task_after_a_redis_restart_fails_the_run(tmp_path: Path) -> None:
    figures = ChaosFigures(redis_windows=[(T0, T0 + 2, {"worker-1": 101, "worker-2": 102})])
    chaos = SimpleNamespace(figures=figures)
    records = Records(tmp_path)
    records.tasks = [{"event": "task", "task": "studio.tasks.advance_run", "t": T0 + 5, "pid": 7, "ppid": 101}]

    counted, problems = worker_figures(chaos, records, ended=T0 + 10)  # type: ignore[arg-type]

    assert counted["workers_consuming_after_redis_restarts"] == 1
    assert problems == ["worker-2 (pid 102) took no task after the Redis restart at " + time.ctime(T0)]


def test_a_worker_that_exited_fails_the_run(tmp_path: Path) -> None:
    figures = ChaosFigures(worker_exits=["worker-1"], redis_windows=[(T0, T0 + 2, {"worker-1": 101})])

    counted, problems = worker_figures(SimpleNamespace(figures=figures), Records(tmp_path), ended=T0 + 10)  # type: ignore[arg-type]

    assert counted["worker_exits"] == 1
    assert problems[0] == "worker-1 exited on its own"
    assert problems[1].startswith("worker-1 (pid 101) exited after the Redis restart")
