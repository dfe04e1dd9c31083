"""The chaos run's checks of the real concurrency of guarded work (issues 11 and 13), on
hand-made side files and slot rows: each check must catch the violation it is there for."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from limits.models import Limit, Slot
from tests.chaos.__main__ import ChaosFigures, guarded_figures, worker_figures
from tests.chaos.records import Records
from tests.factories import declare

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0


@pytest.fixture(autouse=True)
def limits() -> dict[str, Limit]:
    return declare(
        guarded_work={"capacity": 1, "max_hold": "2m"},
        guarded_keyed={"capacity": 2, "max_hold": "2m", "per_key": 1},
    )


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


def slot(
    run_id: str,
    granted: float,
    freed: float | None,
    limit: str = "guarded-work",
    key: str = "",
    group_size: int = 1,
) -> str:
    row = Slot.objects.create(
        limit=Limit.objects.get(name=limit),
        run_id=run_id,
        request=f"{run_id}:1",
        key=key,
        group_size=group_size,
        state="released" if freed is not None else "busy",
        granted_at=at(granted),
        expires_at=at(granted + 120),
        freed_at=at(freed) if freed is not None else None,
    )
    return row.id


Execution = tuple[str, str | None | list[list[str | None]], float, float | None, float]


def write(folder: Path, *executions: Execution, key: str | None = None) -> Records:
    """(run id, slot id on guarded-work or [[limit, slot id], ...], start, end or None for a
    SIGKILLed step, planned seconds)"""
    lines: list[dict[str, Any]] = []
    for index, (run_id, slots, start, end, planned) in enumerate(executions):
        claimed = slots if isinstance(slots, list) else [["guarded-work", slots]]
        limits = [limit for limit, _ in claimed]
        lines.append({"event": "start", "id": f"e{index}", "run_id": run_id, "limits": limits, "slots": claimed})
        lines[-1].update({"key": key, "planned": planned, "t": T0 + start, "pid": 1, "ppid": 0})
        if end is not None:
            lines.append({"event": "end", "id": f"e{index}", "t": T0 + end, "pid": 1, "ppid": 0})
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


def test_a_group_step_inside_both_of_its_slots_passes(tmp_path: Path) -> None:
    work = slot("run_a", 0, 2.0, group_size=2)
    keyed = slot("run_a", 0, 2.0, limit="guarded-keyed", key="t1", group_size=2)
    claimed = [["guarded-keyed", keyed], ["guarded-work", work]]
    records = write(tmp_path, ("run_a", claimed, 0.1, 1.9, 1.8), key="t1")

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert problems == []
    assert (figures["guarded_group_executions"], figures["guarded_outside_slot"]) == (1, 0)
    assert figures["guarded_max_per_key"] == {"guarded-keyed": "1 (pool 1; 0 time(s) over)"}


def test_a_group_step_that_outlived_one_of_its_slots_is_outside_it(tmp_path: Path) -> None:
    work = slot("run_a", 0, 3.0, group_size=2)
    keyed = slot("run_a", 0, 1.0, limit="guarded-keyed", group_size=2)  # released on its own, early
    records = write(tmp_path, ("run_a", [["guarded-work", work], ["guarded-keyed", keyed]], 0.1, 2.0, 1.9))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_outside_slot"] == 1
    assert "ran outside its slot" in problems[0] and f"guarded-keyed: slot {keyed}" in problems[0]


def test_a_handle_that_names_the_slot_of_another_limit_is_caught(tmp_path: Path) -> None:
    """SPEC 10.1: acquire_slots returns the handles in the order given."""
    work = slot("run_a", 0, 2.0, group_size=2)
    keyed = slot("run_a", 0, 2.0, limit="guarded-keyed", group_size=2)
    swapped = [["guarded-work", keyed], ["guarded-keyed", work]]
    records = write(tmp_path, ("run_a", swapped, 0.1, 1.9, 1.8))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert (figures["guarded_handles_mislabelled"], figures["guarded_outside_slot"]) == (2, 0)
    assert problems[0] == f"guarded step of run_a: its handle for guarded-work names slot {keyed} of guarded-keyed"


def test_a_group_step_without_a_slot_of_one_of_its_limits_is_partial(tmp_path: Path) -> None:
    work = slot("run_a", 0, 2.0, group_size=2)
    records = write(tmp_path, ("run_a", [["guarded-work", work], ["guarded-keyed", None]], 0.1, 1.9, 1.8))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_partial"] == 2  # the step ran without it, and the grant gave one slot of two
    assert "guarded step of run_a ran at" in problems[1] and "without a slot of guarded-keyed" in problems[1]
    assert problems[2].startswith("group run_a:1 was granted 1 of its 2 slots at")


def test_two_steps_of_one_key_at_once_on_a_pool_of_one_are_caught(tmp_path: Path) -> None:
    """The total (2) allows them; the key's pool (1) does not, and the rows alone could not show it."""
    first = slot("run_a", 0, 3.0, limit="guarded-keyed", key="t1")
    second = slot("run_b", 0.5, 3.5, limit="guarded-keyed", key="t1")
    records = write(
        tmp_path,
        ("run_a", [["guarded-keyed", first]], 0.1, 2.0, 2),
        ("run_b", [["guarded-keyed", second]], 1.0, 3.0, 2),
    )

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_max_overlap"] == {"guarded-keyed": "2 (capacity 2; 0 time(s) over)"}
    assert figures["guarded_max_per_key"] == {"guarded-keyed": "2 (pool 1; 1 time(s) over)"}
    assert any("2 guarded steps of guarded-keyed key 't1' ran at once" in problem for problem in problems)


def test_steps_of_two_keys_at_once_on_pools_of_one_pass(tmp_path: Path) -> None:
    first = slot("run_a", 0, 3.0, limit="guarded-keyed", key="t1")
    second = slot("run_b", 0.5, 3.5, limit="guarded-keyed", key="t2")
    records = write(
        tmp_path,
        ("run_a", [["guarded-keyed", first]], 0.1, 2.0, 2),
        ("run_b", [["guarded-keyed", second]], 1.0, 3.0, 2),
    )

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert problems == []
    assert figures["guarded_max_per_key"] == {"guarded-keyed": "1 (pool 1; 0 time(s) over)"}


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


def test_the_longest_time_without_a_sweep_counts_from_the_start_to_the_end(tmp_path: Path) -> None:
    from tests.chaos.__main__ import sweep_figures

    records = Records(tmp_path)
    sweep = "limits.tasks.sweep"
    records.tasks = [{"event": "task", "task": sweep, "t": T0 + t, "pid": 7, "ppid": 1} for t in (5, 20, 70)]
    records.tasks.append({"event": "task", "task": "studio.tasks.advance_run", "t": T0 + 40, "pid": 7, "ppid": 1})

    assert sweep_figures(records, began=T0, ended=T0 + 80) == {"sweeps": 3, "longest_without_sweep_s": 50.0}


def test_a_load_that_cannot_start_any_run_gives_up_instead_of_looping(monkeypatch) -> None:
    import argparse
    import random

    from tests.chaos import __main__ as chaos

    monkeypatch.setattr(chaos, "STALL_SECONDS", 0.3)
    load = chaos.Load(random.Random(1), argparse.Namespace(runs=5, rate=50.0))

    def start_one() -> None:
        raise RuntimeError("no broker")

    monkeypatch.setattr(load, "start_one", start_one)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)

    load.run()

    assert load.stalled == "no run could be started for 0 s: RuntimeError: no broker"
    assert load.errors["RuntimeError"] > 0
