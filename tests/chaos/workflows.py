"""The chaos run's own workflows (STACKBONE_WORKFLOWS adds this module): guarded work that writes
down when it really runs, so the chaos run can measure the real concurrency of the work a slot
guards, not only what the rows say (issue 11).

Every execution of `guarded_work` appends a `start` line (run, slot, limit, pids, wall-clock
time, planned seconds) and an `end` line to its process's side file (tests/chaos/records.py). A
SIGKILLed execution has no `end`: it ran at most its planned seconds.
"""

from __future__ import annotations

import time
import uuid

from limits.workflow import SlotTimeoutError, acquire_slot, release_slot, with_limit
from studio.runs.runtime import current_run
from studio.workflows import step, workflow
from tests.chaos.records import record

GUARDED_LIMIT = "guarded-work"
HOOK_NAME = "Esperando hueco · {limit}"  # SPEC 3.2: the hook step acquire_slot records


def _slot_of_this_run(limit: str) -> str | None:
    """The slot the body was given for `limit`: the result of the latest completed hook step of
    acquire_slot (with_limit does not pass its slot to the function it guards)."""
    ctx = current_run()
    if ctx is None:
        return None
    name = HOOK_NAME.format(limit=limit)
    for seq in sorted(ctx.recorded, reverse=True):
        recorded = ctx.recorded[seq]
        if recorded.name == name and isinstance(recorded.result, dict) and recorded.result.get("slot_id"):
            return str(recorded.result["slot_id"])
    return None


@step
def guarded_work(limit: str, seconds: float, slot_id: str | None = None) -> dict:
    ctx = current_run()
    execution = uuid.uuid4().hex
    slot_id = slot_id or _slot_of_this_run(limit)
    began = time.time()
    record(
        {
            "event": "start",
            "id": execution,
            "run_id": ctx.run_id if ctx else None,
            "slot_id": slot_id,
            "limit": limit,
            "planned": seconds,
            "t": began,
        }
    )
    time.sleep(seconds)  # the work: a connection kill or a SIGKILL may land here
    record({"event": "end", "id": execution, "t": time.time()})
    return {"execution": execution, "slot_id": slot_id}


@workflow
def chaos_with_limit(input: dict) -> dict:
    """with_limit around one guarded step (a SlotTimeoutError fails the run, as export_report)."""
    return with_limit(
        GUARDED_LIMIT,
        lambda: guarded_work(GUARDED_LIMIT, float(input["seconds"])),
        label=input.get("label"),
        timeout=input.get("timeout"),
    )


@workflow
def chaos_acquire(input: dict) -> dict:
    """acquire_slot, a guarded step, release_slot."""
    try:
        slot = acquire_slot(GUARDED_LIMIT, label=input.get("label"), timeout=input.get("timeout"))
    except SlotTimeoutError:
        return {"slot_id": None}
    result = guarded_work(GUARDED_LIMIT, float(input["seconds"]), slot.id)
    release_slot(slot.id)
    return {"slot_id": slot.id, **result}
