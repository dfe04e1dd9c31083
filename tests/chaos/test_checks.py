"""The chaos run's checks of the real concurrency of guarded work (issues 11 and 13) and of the fair
limit's tenants (issue 28; their turns and issue 43's fault run), and of its checks in the
database's time (tests/chaos/clocks.py, the clock-skew finding), on hand-made side files, slot
rows and probe lives: each check must catch the violation it is there for."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from limits.engine.keys import PASS_STRIDE
from limits.models import AuditEvent, Limit, LimitKey, QueueEntry, Slot
from limits.services import set_per_key
from tests.chaos import clocks
from tests.chaos.__main__ import (
    FLOOD,
    TURN_HEAVY,
    TURN_TENANTS,
    ChaosFigures,
    box_figures,
    fair_figures,
    fault_run_figures,
    guarded_figures,
    pause_figures,
    worker_figures,
)
from tests.chaos.records import Records
from tests.conftest import requires_postgres
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


def paused(start: float, end: float) -> None:
    """An audited pause of guarded-work over [start, end), as pause_limit/resume_limit write it."""
    limit = Limit.objects.get(name="guarded-work")
    for when, action in ((start, "pause"), (end, "resume")):
        AuditEvent.objects.create(at=at(when), actor="chaos", action=action, limit=limit, old_value="", new_value="")


def test_a_step_in_a_slot_held_from_before_a_pause_passes(tmp_path: Path) -> None:
    held = slot("run_a", 0, 6.0)
    paused(1.0, 5.0)
    records = write(tmp_path, ("run_a", held, 2.0, 3.0, 1))  # a reservation confirmed while paused

    figures, problems = pause_figures(records, tolerance=0.05)

    assert problems == []
    assert (figures["guarded_started_while_paused"], figures["guarded_peak_while_paused"]) == (1, 1)
    assert figures["paused_seconds"] == 4.0


def test_a_step_in_a_slot_granted_during_a_pause_is_caught(tmp_path: Path) -> None:
    held = slot("run_a", 0, 0.9)  # freed before the pause: it began with nothing held
    sneaky = slot("run_b", 2.0, 4.0)
    paused(1.0, 5.0)
    records = write(tmp_path, ("run_a", held, 0.1, 0.8, 0.7), ("run_b", sneaky, 2.1, 3.9, 1.8))

    _, problems = pause_figures(records, tolerance=0.05)

    assert any("granted during its pause" in problem for problem in problems), problems
    assert any("ran at once during its pause" in problem for problem in problems), problems


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


# --- the fair limit (SPEC 13): fair_figures, and guarded_figures on its tenants' pools -------------


@pytest.fixture
def fair(clock) -> Limit:
    """guarded-fair of capacity 2 beside the guarded limits; small-3 has a pool of 1 (set on the
    test's clock, before T0: the rows below come after the last change of the limit's rules)."""
    limits = declare(
        guarded_work={"capacity": 1, "max_hold": "2m"},
        guarded_keyed={"capacity": 2, "max_hold": "2m", "per_key": 1},
        guarded_fair={"capacity": 2, "max_hold": "2m", "share": "fair"},
    )
    set_per_key("guarded-fair", 1, key="small-3")
    return limits["guarded-fair"]


def fair_run(
    limit: Limit,
    run_id: str,
    key: str,
    granted: float | None,
    freed: float | None,
    enqueued: float | None = None,
    *,
    joined: float | None = None,
    ranked: float | None = None,
) -> str | None:
    """A run of `key` on the fair limit: its wait from `enqueued` (none: granted at once) until its
    grant at `granted` (None: it timed out at `freed`), and its slot until `freed`. `joined`: its
    key's pass when it joined, `ranked`: the pass its grant was ranked at, in turns (none: not
    kept, as before SPEC 13.2's turns)."""
    entry = None
    if enqueued is not None:
        ended = granted if granted is not None else freed
        entry = QueueEntry.objects.create(
            limit=limit,
            run_id=run_id,
            request=f"{run_id}:1",
            key=key,
            position=QueueEntry.objects.filter(limit=limit).count() + 1,
            state="granted" if granted is not None else "timed_out",
            enqueued_at=at(enqueued),
            finished_at=at(ended) if ended is not None else None,
            deadline=at(enqueued + 90),
            timeout_ms=90_000,
            fair_pass=None if joined is None else round(joined * PASS_STRIDE),
        )
    if granted is None:
        return None
    row = Slot.objects.create(
        limit=limit,
        run_id=run_id,
        request=f"{run_id}:1",
        key=key,
        queue_entry=entry,
        state="released" if freed is not None else "busy",
        granted_at=at(granted),
        expires_at=at(granted + 120),
        freed_at=at(freed) if freed is not None else None,
        fair_pass=None if ranked is None else round(ranked * PASS_STRIDE),
    )
    return row.id


def keeps(limit: Limit, **passes: float) -> None:
    """The pass (in turns) each key keeps on its row, as the engine leaves it."""
    for key, value in passes.items():
        LimitKey.objects.update_or_create(
            limit=limit, key=key.replace("_", "-"), defaults={"fair_pass": round(value * PASS_STRIDE)}
        )


def fair_steps(folder: Path, *executions: tuple[str, str | None, str, float, float]) -> Records:
    """(run id, slot id on guarded-fair, key, start, end) of each guarded step."""
    lines: list[dict[str, Any]] = []
    for index, (run_id, slot_id, key, start, end) in enumerate(executions):
        claimed = [["guarded-fair", slot_id]]
        lines.append({"event": "start", "id": f"e{index}", "run_id": run_id, "limits": ["guarded-fair"]})
        lines[-1].update({"slots": claimed, "key": key, "planned": end - start, "t": T0 + start, "pid": 1, "ppid": 0})
        lines.append({"event": "end", "id": f"e{index}", "t": T0 + end, "pid": 1, "ppid": 0})
    (folder / "1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Records(folder).read()


def test_a_small_tenant_served_before_the_floods_backlog_passes_and_shows(fair, tmp_path: Path) -> None:
    a = fair_run(fair, "flood_a", "flood", 0, 2.0)
    b = fair_run(fair, "flood_b", "flood", 0, 3.0)
    queued = fair_run(fair, "flood_c", "flood", 3.0, 4.5, enqueued=0.5)  # the flood's backlog
    small = fair_run(fair, "small_a", "small-1", 2.0, 3.5, enqueued=1.0)  # arrived behind it, served first
    records = fair_steps(
        tmp_path,
        ("flood_a", a, "flood", 0.1, 1.9),
        ("flood_b", b, "flood", 0.1, 2.9),
        ("small_a", small, "small-1", 2.1, 3.4),
        ("flood_c", queued, "flood", 3.1, 4.4),
    )

    figures, problems = fair_figures(records, tolerance=0.05)

    assert problems == []
    assert figures["fair_grants"] == {"flood": 3, "small-1": 1}
    assert (
        figures["fair_peak_executing"] == "2 (capacity 2); by tenant {'flood': 2, 'small-1': 1} (pools {'small-3': 1})"
    )
    assert figures["fair_waits_p50_max_s"] == {"flood": [2.5, 2.5], "small": [1.0, 1.0]}
    assert (
        figures["fair_small_behind_flood"]
        == "1 of 1 served before the flood's next slot (at most 0 flood slots during one)"
    )
    assert figures["fair_order_jumps"] == 0
    assert guarded_figures(records, tolerance=0.05)[1] == []


def test_a_small_tenant_that_timed_out_while_the_flood_was_served_is_caught(fair, tmp_path: Path) -> None:
    """small-2 waits from 1.0 until it times out at 3.5, holding nothing, while the flood is granted
    three slots: three turns ahead of it (with turns the flood gets its own while others wait)."""
    fair_run(fair, "flood_a", "flood", 0, 2.0)
    fair_run(fair, "flood_b", "flood", 0, 3.0)
    fair_run(fair, "flood_c", "flood", 2.0, 3.1, enqueued=0.5)
    fair_run(fair, "flood_d", "flood", 3.0, 5.0, enqueued=0.5)
    fair_run(fair, "flood_e", "flood", 3.1, 5.0, enqueued=0.5)
    fair_run(fair, "small_a", "small-2", None, 3.5, enqueued=1.0)  # starved: timed out

    figures, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert problems[0] == (
        "small_a of small-2 timed out on guarded-fair at 08:00:03.500 while the flood was granted 3 slot(s) "
        "during its wait and its tenant 0: three turns or more ahead of it"
    )
    assert problems[1].startswith("3 grant(s) on guarded-fair jumped SPEC 13.2's order, the first: ")
    assert problems[2].startswith(
        "1 tenant(s) on guarded-fair were not interleaved, the first: guarded-fair: key 'flood' served 3 times"
    )
    assert len(problems) == 3
    assert (
        figures["fair_small_behind_flood"]
        == "0 of 1 served before the flood's next slot (at most 3 flood slots during one)"
    )
    assert figures["fair_order_jumps"] == 3  # the flood at 1 each time, while small-2 waited at 0
    assert figures["fair_interleaving"] == 1  # and three times while small-2 got none


def test_a_small_tenant_that_timed_out_while_every_tenant_got_its_turns_is_no_starvation(fair, tmp_path: Path) -> None:
    """An outage: small-1's third run times out while the flood got two turns and small-1 two
    during its wait (its other runs): the flood was not ahead of it."""
    fair_run(fair, "flood_a", "flood", 0, 1.0)
    fair_run(fair, "small_a", "small-1", 0, 1.0)
    fair_run(fair, "flood_b", "flood", 1.0, 2.0, enqueued=0.5)
    fair_run(fair, "small_b", "small-1", 1.0, 2.0, enqueued=0.6)
    fair_run(fair, "flood_c", "flood", 2.0, 3.0, enqueued=0.5)
    fair_run(fair, "small_c", "small-1", 2.0, 3.0, enqueued=0.6)
    fair_run(fair, "small_d", "small-1", None, 2.9, enqueued=0.7)  # timed out (an outage, say)

    _, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert problems == []


def test_no_small_tenant_behind_the_flood_proves_nothing(fair, tmp_path: Path) -> None:
    fair_run(fair, "flood_a", "flood", 0, 2.0)
    fair_run(fair, "small_a", "small-1", 3.0, 4.0)  # granted at once: the flood had no backlog

    _, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert problems == ["no small tenant waited behind the flood on guarded-fair: the fair figures proved nothing"]


def test_three_guarded_steps_at_once_on_the_fair_limit_are_caught(fair, tmp_path: Path) -> None:
    """Capacity 2: the slot rows could look right (a slot freed early), the real work did not."""
    slots = [fair_run(fair, f"run_{i}", "flood", 0, 3.0) for i in range(2)] + [
        fair_run(fair, "run_2", "small-1", 1.0, 3.0)
    ]
    records = fair_steps(tmp_path, *((f"run_{i}", slot, "flood", 1.0 + i / 10, 2.5) for i, slot in enumerate(slots)))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_max_overlap"] == {"guarded-fair": "3 (capacity 2; 1 time(s) over)"}
    assert "3 guarded steps of guarded-fair ran at once at 08:00:01.250: capacity 2" in problems


def test_two_steps_of_a_tenant_with_a_pool_of_one_on_the_fair_limit_are_caught(fair, tmp_path: Path) -> None:
    """The fair limit has no per_key: only small-3's own pool of 1 applies, and the flood's two at
    once are fine."""
    first, second = fair_run(fair, "run_a", "small-3", 0, 3.0), fair_run(fair, "run_b", "small-3", 0.5, 3.5)
    records = fair_steps(tmp_path, ("run_a", first, "small-3", 0.1, 2.0), ("run_b", second, "small-3", 1.0, 3.0))

    figures, problems = guarded_figures(records, tolerance=0.05)

    assert figures["guarded_max_per_key"] == {"guarded-fair": "2 (pools small-3 1; 1 time(s) over)"}
    assert problems == ["2 guarded steps of guarded-fair key 'small-3' ran at once at 08:00:01.050: pool 1"]


# --- the fair limit's turns (SPEC 13.2 amended, issue 43) -----------------------------------------


def taking_turns(limit: Limit, *, flood_first: bool = False, flood_c_ranked: float = 2) -> None:
    """Capacity 2: small-2 holds one slot throughout (granted at once at pass 0); the flood holds
    the other from 0.1 (it entered at small-2's pass, 1) and queues flood_c at 0.5 (its pass 2);
    small-1 arrives at 1.0 with nothing held (it enters at the smallest active pass, 1). When the
    flood's slot frees at 2.0 both hold nothing: small-1's turn (pass 1) comes before the flood's
    (2). `flood_first`: the flood is served then anyway."""
    fair_run(limit, "small_2", "small-2", 0, 9.0, ranked=0)
    fair_run(limit, "flood_a", "flood", 0.1, 2.0, ranked=1)
    first, second = (3.5, 2.0) if flood_first else (2.0, 3.5)
    fair_run(limit, "small_1", "small-1", first, first + 1.5, enqueued=1.0, joined=1, ranked=1)
    fair_run(limit, "flood_c", "flood", second, second + 1.5, enqueued=0.5, joined=2, ranked=flood_c_ranked)
    keeps(limit, small_2=1, flood=flood_c_ranked + 1, small_1=2)


def test_tenants_taking_their_turns_pass(fair, tmp_path: Path) -> None:
    taking_turns(fair)

    figures, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert problems == []
    assert (figures["fair_order_jumps"], figures["fair_turn_errors"], figures["fair_interleaving"]) == (0, 0, 0)


def test_a_grant_to_the_flood_before_the_turn_of_a_tenant_holding_as_little_is_caught(fair, tmp_path: Path) -> None:
    """Both hold nothing: the share ties, and the flood (pass 2) jumped small-1's turn (pass 1).
    Before the amendment a tie went to the oldest run, the flood's: no jump then."""
    taking_turns(fair, flood_first=True)

    figures, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert figures["fair_order_jumps"] == 1
    assert problems[0].startswith("1 grant(s) on guarded-fair jumped SPEC 13.2's order, the first: ")
    assert "of key 'small-1' waited ahead of it in the turns (its pass 1 against 2) (SPEC 13.2)" in problems[0]
    assert figures["fair_turn_errors"] == 0


def test_a_grant_ranked_at_a_pass_its_turns_do_not_add_up_to_is_caught(fair, tmp_path: Path) -> None:
    taking_turns(fair, flood_c_ranked=3)  # a turn too late: the flood's pass was 2

    figures, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert figures["fair_turn_errors"] == 1
    assert problems == [
        "1 turn(s) on guarded-fair do not add up, the first: guarded-fair: slot "
        f"{Slot.objects.get(run_id='flood_c').id} of key 'flood' granted at {at(3.5).isoformat()} ranked at pass 3, "
        "where its turns add up to 2 (SPEC 13.2)"
    ]


def interleaved(limit: Limit, order: list[str]) -> None:
    """Capacity 2, small-2 holding one slot throughout (pass 0, then 1): the flood and small-1 each
    queue three runs at 0.5 and 0.6 (both entering at pass 1, holding nothing) and are served
    one at a time in `order`, at 1, 2, 3, ... for 0.9 s each."""
    fair_run(limit, "small_2", "small-2", 0, 20.0, ranked=0)
    turns = {"flood": 1, "small-1": 1}
    for i, key in enumerate(order):
        served = order[:i].count(key)
        enqueued = 0.5 if key == "flood" else 0.6
        fair_run(limit, f"{key}-{served}", key, 1 + i, 1.9 + i, enqueued=enqueued, joined=1, ranked=turns[key])
        turns[key] += 1
    keeps(limit, small_2=1, flood=turns["flood"], small_1=turns["small-1"])


def test_tenants_served_in_turn_pass_the_interleaving(fair, tmp_path: Path) -> None:
    interleaved(fair, ["flood", "small-1", "flood", "small-1", "flood", "small-1"])

    figures, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert problems == []
    assert figures["fair_interleaving"] == 0


def test_a_tenant_served_three_times_while_a_competing_one_is_served_once_is_caught(fair, tmp_path: Path) -> None:
    interleaved(fair, ["flood", "small-1", "flood", "flood", "small-1", "small-1"])

    figures, problems = fair_figures(Records(tmp_path), tolerance=0.05)

    assert figures["fair_interleaving"] == 1
    assert (
        "1 tenant(s) on guarded-fair were not interleaved, the first: guarded-fair: key 'flood' served 3 times from "
        f"{at(1).isoformat()} to {at(4).isoformat()} while key 'small-1' competed throughout and was served 1 "
        "time(s) (issue 43: keys take turns)"
    ) in problems
    assert figures["fair_order_jumps"] == 1  # the flood's third grant (pass 3) before small-1's turn (2)


# Issue 43's fault run (fault_run_figures) on hand-made rows: each run of the flood and of the ten
# tenants waits from 0.1 and is granted in the order given, one every 0.1 s from 1.0.
LIGHTS = [tenant for tenant in TURN_TENANTS if tenant != TURN_HEAVY]
ROUND = [FLOOD, *LIGHTS[:2], TURN_HEAVY, *LIGHTS[2:5], TURN_HEAVY, *LIGHTS[5:], TURN_HEAVY]  # 3 turns of heavy


def fault_run(limit: Limit, order: list[str], stretched: str | None = None) -> None:
    for i, key in enumerate(order):
        hold = 31.0 if key == stretched and order.index(key) == i else 0.35
        fair_run(limit, f"{key}-{order[:i].count(key)}", key, 1 + i / 10, 1 + i / 10 + hold, enqueued=0.1)


def test_the_fault_runs_shape_served_in_turns_passes(fair) -> None:
    fault_run(fair, ROUND * 2)

    figures, problems = fault_run_figures(sent=26, paused_s=3.0)

    assert problems == []
    assert figures["fault_run_flood_share"] == "0.077 (bound 0.136 = 1.5 / 11 keys)"
    assert figures["fault_run_heavy_against_light"] == "3.00 (6 against 2.00; at least 2)"
    assert figures["fault_run_judged"] == "yes"


def test_a_flood_served_more_than_its_turn_is_caught(fair) -> None:
    """The flood wins one grant in four (it kept one of the 4 slots, before the amendment)."""
    others = [key for key in ROUND if key != FLOOD]
    order = [key for i in range(0, len(others) * 2, 3) for key in [FLOOD, *(others * 2)[i : i + 3]]]
    fault_run(fair, order)

    _, problems = fault_run_figures()

    assert len(problems) == 1 and problems[0].startswith("the flood got 8 of 32 grants (0.250)"), problems


def test_a_tenant_of_weight_3_served_like_the_others_is_caught(fair) -> None:
    fault_run(fair, [FLOOD, *LIGHTS, TURN_HEAVY] * 2)

    figures, problems = fault_run_figures()

    assert figures["fault_run_heavy_against_light"] == "1.00 (2 against 2.00; at least 2)"
    assert problems == [
        "heavy (weight 3) got 2 grants against 2.00 for a weight-1 tenant while all eleven competed on guarded-fair: "
        "1.00 times, not about three (issue 43)"
    ]


def test_the_fault_runs_shares_are_not_judged_after_a_stretched_hold(fair) -> None:
    """light-1's first slot held 31 s (its worker killed in the step): its turns would catch up
    afterwards, so the shares are reported, not judged."""
    fault_run(fair, [FLOOD, *LIGHTS, TURN_HEAVY] * 2, stretched="light-1")

    figures, problems = fault_run_figures()

    assert problems == []
    assert figures["fault_run_judged"] == "no: a hold of 31.0 s (light-1) (the shares assume the hold model)"


def test_a_fault_run_that_never_formed_proves_nothing(fair) -> None:
    fault_run(fair, [FLOOD, *LIGHTS])  # heavy never came

    figures, problems = fault_run_figures(sent=10)

    assert figures == {"fault_run": "10 runs sent; the eleven tenants never all waited"}
    assert problems == [
        "issue 43's fault run never formed on guarded-fair (the flood and ten tenants waiting at once): "
        "its figures proved nothing"
    ]


def test_the_fault_run_pauses_the_fair_limit_until_its_runs_have_joined(fair, monkeypatch) -> None:
    """Load.fault_run: once TURN_AT of the runs have started, the fair limit is paused, the
    flood's runs and then the ten tenants' in rounds (heavy last in each) are sent, and the
    limit is resumed once all of them wait in its queue; a run that never joins holds it paused
    at most TURN_JOIN_S after the last was sent."""
    import argparse
    import random

    from studio import workflows
    from tests.chaos import __main__ as chaos

    sent: list[dict[str, Any]] = []

    def start_run(workflow: str, input: dict[str, Any]) -> SimpleNamespace:
        sent.append(input)
        return SimpleNamespace(id=f"turn-run-{len(sent)}", workflow=workflow)

    def join(*indexes: int) -> None:
        for i in indexes:
            fair_run(fair, f"turn-run-{i}", sent[i - 1]["key"], None, None, enqueued=5.0)
            QueueEntry.objects.filter(run_id=f"turn-run-{i}").update(state="waiting", finished_at=None)

    monkeypatch.setattr(workflows, "start_run", start_run)
    load = chaos.Load(random.Random(1), argparse.Namespace(runs=100, rate=8.0))
    load.started["place_call"] = 85
    load.fault_run()
    assert load.turn_phase == "planned" and not sent  # below 86 % of the runs
    load.started["place_call"] = 86
    load.fault_run()

    assert load.turn_phase == "joining" and Limit.objects.get(name="guarded-fair").paused_at is not None
    assert [run["key"] for run in sent[:17]] == [FLOOD] * 16 + ["light-1"]
    assert [run["key"] for run in sent[16:26]] == list(TURN_TENANTS) and sent[-1]["key"] == TURN_HEAVY
    assert len(sent) == 76 and {run["timeout"] for run in sent} == {"110s"}
    join(*range(1, 76))
    load.fault_run()
    assert load.turn_phase == "joining"  # one still on its way
    join(76)
    load.fault_run()
    assert load.turn_phase == "done" and Limit.objects.get(name="guarded-fair").paused_at is None
    assert load.started["chaos_fair"] == 76

    late = chaos.Load(random.Random(1), argparse.Namespace(runs=100, rate=8.0))
    late.started["place_call"] = 90
    monkeypatch.setattr(chaos, "TURN_JOIN_S", 0.3)
    late.fault_run()
    assert late.turn_phase == "joining"
    late.finish_fault_run(until=time.monotonic() + 5)  # the load ended; none of its runs joins
    assert late.turn_phase == "done" and Limit.objects.get(name="guarded-fair").paused_at is None
    assert 0.3 <= late.turn_paused_s < 5


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


# --- the checks in the database's time (tests/chaos/clocks.py: the clock-skew finding) -------------


def slot_row(
    slot_id: str,
    granted: float,
    max_hold: float = 4.0,
    *,
    freed: float | None = None,
    reservation: float | None = None,
    kind: str = "limit",
) -> dict[str, Any]:
    """A slot row as clocks.slot_rows() reads it (its stamps in seconds after T0)."""
    return {
        "id": slot_id,
        "limit__name": "voice-calls",
        "limit__kind": kind,
        "run_id": f"run_{slot_id}",
        "state": "busy",
        "granted_at": at(granted),
        "expires_at": at(granted + max_hold),
        "reserved_until": at(granted + reservation) if reservation is not None else None,
        "freed_at": at(freed) if freed is not None else None,
    }


def entry_row(
    entry_id: str, timeout: float, *, request: str | None = None, enqueued: float = 0.0, finished: float | None = None
) -> dict[str, Any]:
    return {
        "id": entry_id,
        "limit__name": "guarded-work",
        "run_id": f"run_{request or entry_id}",
        "request": request or entry_id,
        "state": "waiting",
        "timeout_ms": int(timeout * 1000),
        "enqueued_at": at(enqueued),
        "finished_at": at(finished) if finished is not None else None,
    }


def life(*states: tuple[str, float]) -> clocks.Life:
    """(state, seconds after T0), the first at its insert."""
    return clocks.Life([(state, T0 + t) for state, t in states])


SWEEPS = [(T0 + t, T0 + t + 0.2) for t in range(0, 300, 15)]  # a pass every 15 s


def test_a_slot_stamped_ten_minutes_off_the_databases_time_is_caught() -> None:
    slots = [slot_row("ahead", granted=600.0, freed=632.0), slot_row("on_time", granted=0.1, freed=2.0)]
    lives = {"ahead": life(("busy", 0.0), ("released", 32.0)), "on_time": life(("busy", 0.0), ("released", 2.0))}

    worst, problems = clocks.stamp_problems(slots, lives, [], {})

    assert worst == 600.0
    assert len(problems) == 2 and "granted_at is +600.0 s off" in problems[0] and "freed_at is +600.0 s" in problems[1]


def test_a_wait_stamped_by_a_clock_behind_is_caught() -> None:
    entries = [entry_row("1", 8, enqueued=-600.0)]

    _, problems = clocks.stamp_problems([], {}, entries, {"1": life(("waiting", 0.0))})

    assert problems == [
        "wait 1 of guarded-work (run run_1): enqueued_at is -600.0 s off the database's time of that change"
        f" ({clocks._fmt(T0)}): stamped by a host's clock"
    ]


def test_a_slot_live_past_its_max_hold_after_a_sweep_passed_is_caught() -> None:
    """A worker ahead stamped expires_at in its future: the sweeps on time leave the slot."""
    slots = [slot_row("held", granted=600.0)]  # the stamps of a worker 10 minutes ahead
    lives = {"held": life(("busy", 0.0))}  # still busy, 40 s after the database wrote it

    worst, problems = clocks.slot_problems(slots, lives, SWEEPS, now=T0 + 40)

    assert worst == 36.0
    assert problems == [
        f"slot held of voice-calls (run run_held) live 40.0 s from {clocks._fmt(T0)} (still): max hold 4 s, "
        "and a sweep pass after it was due left it"
    ]


def test_a_slot_live_past_its_max_hold_with_no_sweep_since_is_not_the_clocks_fault() -> None:
    """No pass began after its expiry (beat's message lost in a Redis restart): nothing to judge."""
    lives = {"held": life(("busy", 0.0))}

    _, problems = clocks.slot_problems([slot_row("held", 0.0)], lives, [(T0 - 1, T0 - 0.8)], now=T0 + 40)

    assert problems == []


def test_a_slot_freed_within_one_sweep_of_its_max_hold_passes() -> None:
    lives = {"held": life(("busy", 0.0), ("expired", 15.1))}

    worst, problems = clocks.slot_problems([slot_row("held", 0.0)], lives, SWEEPS, now=T0 + 60)

    assert (worst, problems) == (11.1, [])


def test_a_reserved_slot_is_held_to_its_max_hold_only_once_its_run_confirmed_it() -> None:
    """Found by the chaos run on the fixed code: a woken run's wake was lost in a PostgreSQL
    restart and it confirmed its reservation 40 s later; the next pass took the slot back."""
    slots = [slot_row("late", granted=0.0, max_hold=8, reservation=120)]
    lives = {"late": life(("reserved", 0.0), ("busy", 40.0), ("expired", 45.2))}

    worst, problems = clocks.slot_problems(slots, lives, SWEEPS, now=T0 + 60)

    assert (worst, problems) == (5.2, [])


def test_a_reservation_never_confirmed_and_never_lapsed_is_caught() -> None:
    slots = [slot_row("kept", granted=600.0, max_hold=8, reservation=120)]  # stamped 10 minutes ahead
    lives = {"kept": life(("reserved", 0.0))}

    _, problems = clocks.slot_problems(slots, lives, SWEEPS, now=T0 + 150)

    assert problems == [
        f"slot kept of voice-calls (run run_kept) live 150.0 s from {clocks._fmt(T0)} (still): reservation 120 s, "
        "never confirmed, and a sweep pass after it was due left it"
    ]


def test_a_slot_taken_back_before_its_max_hold_is_caught() -> None:
    """A worker behind stamped expires_at in the past: the next sweep on time took it back."""
    slots = [slot_row("early", granted=-600.0, max_hold=60)]
    lives = {"early": life(("busy", 0.0), ("expired", 2.0))}

    _, problems = clocks.slot_problems(slots, lives, SWEEPS, now=T0 + 60)

    assert problems == [
        "slot early of voice-calls (run run_early) taken back by max hold after 2.0 s: its max hold is 60 s"
    ]


def test_a_reservation_lapsed_before_its_time_is_caught() -> None:
    slots = [slot_row("reserved", granted=-600.0, max_hold=60, reservation=120)]
    lives = {"reserved": life(("reserved", 0.0), ("lapsed", 1.5))}

    _, problems = clocks.slot_problems(slots, lives, SWEEPS, now=T0 + 60)

    assert problems == [
        "slot reserved of voice-calls (run run_reserved): reservation lapsed after 1.5 s: it was for 120 s"
    ]


def test_a_workflows_own_bound_has_no_max_hold() -> None:
    lives = {"bound": life(("busy", 0.0))}

    _, problems = clocks.slot_problems([slot_row("bound", 0.0, kind="workflow")], lives, SWEEPS, now=T0 + 100)

    assert problems == []


def test_a_wait_past_its_timeout_after_a_sweep_passed_is_caught() -> None:
    lives = {"1": life(("waiting", 0.0), ("granted", 34.0))}

    worst, problems = clocks.wait_problems([entry_row("1", 8)], lives, SWEEPS, now=T0 + 60)

    assert worst == 26.0
    assert problems == [
        "wait of run run_1 on guarded-work lasted 34.0 s: timeout 8 s, and a sweep pass after its deadline left it",
        "wait of run run_1 on guarded-work granted 26.0 s after its timeout (8 s)",
    ]


def test_a_grant_just_after_the_timeout_is_caught_and_a_time_out_within_one_sweep_passes() -> None:
    entries = [entry_row("1", 8), entry_row("2", 8)]
    lives = {"1": life(("waiting", 0.0), ("granted", 9.5)), "2": life(("waiting", 0.0), ("timed_out", 15.1))}

    _, problems = clocks.wait_problems(entries, lives, SWEEPS, now=T0 + 60)

    assert problems == ["wait of run run_1 on guarded-work granted 1.5 s after its timeout (8 s)"]


def test_a_wait_timed_out_before_its_timeout_is_caught() -> None:
    lives = {"1": life(("waiting", 0.0), ("timed_out", 0.4))}

    _, problems = clocks.wait_problems([entry_row("1", 60)], lives, SWEEPS, now=T0 + 60)

    assert problems == ["wait of run run_1 on guarded-work timed out after 0.4 s: timeout 60 s"]


def test_a_wait_back_in_the_queue_after_its_deadline_is_judged_from_its_return() -> None:
    """A reservation that lapsed puts the run back with its original deadline: its second entry,
    born after that deadline, times out at the next sweep, not before."""
    entries = [entry_row("1", 8, request="r"), entry_row("2", 8, request="r")]
    lives = {
        "1": life(("waiting", 0.0), ("granted", 2.0)),
        "2": life(("waiting", 122.0), ("timed_out", 135.2)),
    }

    _, problems = clocks.wait_problems(entries, lives, SWEEPS, now=T0 + 200)

    assert problems == []


def test_two_executions_of_one_step_at_once_are_caught_one_after_another_pass() -> None:
    executions = [
        {"run_id": "run_a", "seq": 2, "t": T0, "end": T0 + 32, "pid": 1, "skew": -600.0},
        {"run_id": "run_a", "seq": 2, "t": T0 + 3, "end": T0 + 35, "pid": 2, "skew": 0.0},
        {"run_id": "run_b", "seq": 2, "t": T0, "end": T0 + 1, "pid": 3},
        {"run_id": "run_b", "seq": 2, "t": T0 + 31, "end": T0 + 32, "pid": 4},  # replayed after a cut connection
        {"run_id": "run_b", "seq": 4, "t": T0 + 31.5, "end": T0 + 33, "pid": 4},  # another step
    ]

    problems = clocks.step_overlap_problems(executions, tolerance=0.05)

    assert problems == [
        f"two executions of step #2 of run_a at once for 29.0 s from {clocks._fmt(T0 + 3)} (pids 1 and 2, "
        "clocks -600 s and +0 s)"
    ]


def test_a_message_discarded_before_its_expiry_is_caught(tmp_path: Path) -> None:
    records = Records(tmp_path)
    expires = at(14).isoformat()
    records.revoked = [
        {"task": "limits.tasks.sweep", "expired": True, "expires": expires, "t": T0 + 0.1, "pid": 9, "skew": 600.0},
        {"task": "limits.tasks.sweep", "expired": True, "expires": expires, "t": T0 + 2, "pid": 9, "skew": 600.0},
        {"task": "limits.tasks.sweep", "expired": True, "expires": expires, "t": T0 + 14.5, "pid": 8, "skew": 0.0},
        {"task": "studio.tasks.advance_run", "expired": False, "expires": None, "t": T0, "pid": 8, "skew": 0.0},
    ]

    assert clocks.discard_problems(records) == [
        "2 limits.tasks.sweep message(s) discarded as expired up to 14 s before their expiry"
        " (worker pid 9, clock +600 s)"
    ]


Step = tuple[str, float, float | None]


def steps(folder: Path, *executions: Step) -> Records:
    """Side files of any step of any run (records.record_steps): (run id, start, end or None)."""
    lines: list[dict[str, Any]] = []
    for index, (run_id, start, end) in enumerate(executions):
        lines.append({"event": "step", "id": f"s{index}", "run_id": run_id, "name": "work", "t": T0 + start})
        lines[-1].update({"pid": 1, "ppid": 0})
        if end is not None:
            lines.append({"event": "step_end", "id": f"s{index}", "t": T0 + end, "pid": 1, "ppid": 0})
    (folder / "2.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Records(folder).read()


WORKFLOWS = {"run_a": "calls", "run_b": "calls", "run_c": "reports", "run_d": "reports"}


def test_runs_at_work_within_the_ceiling_and_the_base_pass(tmp_path: Path) -> None:
    records = steps(
        tmp_path,
        ("run_a", 0.0, 1.0),
        ("run_a", 0.5, 2.0),  # the same run twice at once counts once
        ("run_b", 1.0, 2.0),
        ("run_c", 1.0, 2.0),
        ("run_c", 3.0, 4.0),
    )

    figures, problems = box_figures(records, 0.05, ceiling=3, base=2, workflow_of=WORKFLOWS)

    assert problems == []
    assert figures["box_peak_executing"] == "3 (ceiling 3; 0 time(s) over)"
    assert figures["box_peak_per_workflow"] == "2 (calls; base 2; 0 time(s) over)"


def test_more_runs_at_work_than_the_ceiling_are_caught(tmp_path: Path) -> None:
    records = steps(tmp_path, ("run_a", 0.0, 2.0), ("run_c", 0.5, 2.0), ("run_d", 1.0, 2.0))

    figures, problems = box_figures(records, 0.05, ceiling=2, base=2, workflow_of=WORKFLOWS)

    assert figures["box_peak_executing"] == "3 (ceiling 2; 1 time(s) over)"
    assert problems == ["3 runs executed steps at once at 08:00:01.050: the box's ceiling is 2"]


def test_more_runs_of_one_workflow_at_work_than_the_base_are_caught(tmp_path: Path) -> None:
    records = steps(tmp_path, ("run_c", 0.0, 2.0), ("run_d", 1.0, None))  # run_d's worker was SIGKILLed

    figures, problems = box_figures(records, 0.05, ceiling=4, base=1, workflow_of=WORKFLOWS, died={0: T0 + 1.5})

    assert figures["box_peak_per_workflow"] == "2 (reports; base 1; 1 time(s) over)"
    assert problems == ["2 runs of reports executed steps at once at 08:00:01.050: the base is 1"]
    (_, no_kill) = box_figures(records, 0.05, ceiling=4, base=1, workflow_of=WORKFLOWS)
    assert no_kill == []  # a step without an end whose worker was not killed is left out


def test_a_step_whose_worker_was_sigkilled_ends_when_the_worker_died(tmp_path: Path) -> None:
    from tests.chaos.__main__ import executions_of

    records = write(tmp_path, ("run_a", None, 0.0, None, 32))  # its pool's parent has pid 0

    (killed,) = executions_of(records, died={0: T0 + 5})
    (planned,) = executions_of(records)

    assert (killed["end"], planned["end"]) == (T0 + 5, T0 + 32)


def test_side_files_keep_the_real_time_in_a_process_whose_clock_travels(tmp_path: Path, monkeypatch) -> None:
    import time_machine

    from tests.chaos import records as side_files

    monkeypatch.setenv(side_files.RECORDS_ENV, str(tmp_path))
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=600), tick=True):
        side_files.record({"event": "task", "task": "limits.tasks.sweep", "t": side_files.now()})
    (line,) = Records(tmp_path).read().tasks

    assert abs(line["t"] - time.time()) < 5 and abs(line["skew"] - 600) < 1


@pytest.mark.django_db(transaction=True)
def test_every_step_that_really_runs_writes_its_start_and_its_end(tmp_path: Path, monkeypatch, no_worker) -> None:
    """records.record_steps (in every pool process of the chaos run's workers): the lines the
    box's checks read, for any step of any workflow."""
    from limits.runs import start_run, step, workflow
    from stackbone.runs import runtime
    from tests.chaos import records as side_files

    @step(name="chaos_probe_step")
    def probe_step(label: str) -> str:
        return label

    @workflow(name="chaos_probe")
    def probe(input: dict[str, Any]) -> str:
        return probe_step(input["label"]) + probe_step("again")

    monkeypatch.setenv(side_files.RECORDS_ENV, str(tmp_path))
    monkeypatch.setattr(runtime, "run_step", runtime.run_step)  # put back after the test
    side_files.record_steps()
    side_files.record_steps()  # wrapped once
    run = start_run(probe, {"label": "x"})
    assert runtime.advance(run.id) == "completed"
    found = Records(tmp_path).read()

    assert [(s["run_id"], s["name"]) for s in found.steps.values()] == [(run.id, "chaos_probe_step")] * 2
    assert all(found.steps[key]["t"] <= found.step_ends[key] for key in found.steps)


@pytest.mark.postgres
@requires_postgres
def test_the_probe_writes_each_insert_and_change_of_state_with_the_databases_clock() -> None:
    from django.db import connection

    from limits.models import SweepState

    with connection.cursor() as cursor:
        clocks.install_probe(cursor)  # inside the test's transaction: rolled back with it
        slot_id = slot("run_a", 0, None)  # busy
        Slot.objects.filter(id=slot_id).update(label="renamed")  # no change of state: not written
        Slot.objects.filter(id=slot_id).update(state="released")
        SweepState.objects.create(id=1, last_run_at=at(0), last_duration_ms=250.0)  # a sweep pass
        SweepState.objects.filter(id=1).update(rolled_until=at(0))  # insights, not a pass
        SweepState.objects.filter(id=1).update(last_run_at=at(15), last_duration_ms=100.0)  # another pass
        probed = clocks.read_probe(cursor)

    slots = probed.slots
    assert list(slots) == [slot_id] and probed.entries == {}
    assert [state for state, _ in slots[slot_id].states] == ["busy", "released"]
    assert slots[slot_id].born <= slots[slot_id].states[1][1] <= probed.now
    assert slots[slot_id].left(clocks.LIVE_SLOT) == slots[slot_id].states[1]
    (first, second) = probed.passes  # (began, ended) in the database's time: ended - its duration
    assert first[1] - first[0] == pytest.approx(0.25) and second[1] - second[0] == pytest.approx(0.1)
    assert slots[slot_id].born <= first[1] <= second[1] <= probed.now
