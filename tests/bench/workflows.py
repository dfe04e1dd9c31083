"""The workflows of the benchmarks (STACKBONE_WORKFLOWS names this module, so the Celery workers
import it too).

- `bench_take_slot` (scenario 2): take a slot of a limit and end (the slot stays busy: a run that
  ends does not release what it holds, SPEC 2.7).
- `bench_run_plain` and `bench_run_bounded` (scenario 9): one quick step and end; the same body,
  registered twice, the second with `concurrency={"total": 4}` (its own bound
  `workflow.bench_run_bounded`, SPEC 11).
"""

from __future__ import annotations

from limits.workflow import acquire_slot
from studio.workflows import step, workflow

RUN_PLAIN = "bench_run_plain"
RUN_BOUNDED = "bench_run_bounded"
RUN_BOUND_TOTAL = 4


@workflow(name="bench_take_slot")
def take_slot(input: dict) -> dict:
    slot = acquire_slot(input["limit"], label=input.get("label"))
    return {"slot_id": slot.id}


@step
def quick_step(n: int) -> int:
    return n + 1


@workflow(name=RUN_PLAIN)
def run_plain(input: dict) -> dict:
    return {"n": quick_step(int(input.get("n", 0)))}


@workflow(name=RUN_BOUNDED, concurrency={"total": RUN_BOUND_TOTAL})
def run_bounded(input: dict) -> dict:
    return {"n": quick_step(int(input.get("n", 0)))}
