"""The chaos run's own workflows (STACKBONE_WORKFLOWS adds this module): guarded work that writes
down when it really runs, so the chaos run can measure the real concurrency of the work a slot
guards, not only what the rows say (issue 11), with keys and several limits (issue 13).

Each takes `limits` (one name, or two for the group workflows, in the order the load chose),
`key` (or none) and `seconds`. Every execution of `guarded_work` appends a `start` line (run,
the step's call number in its run, the limits asked for, each with the slot the body's handle
names, key, pids, real wall-clock time, planned seconds) and an `end` line to its process's side
file (tests/chaos/records.py). A SIGKILLed execution has no `end`: it ran at most its planned
seconds. Times are the real time even in a worker whose clock is skewed (records.now()).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from limits.workflow import (
    HOOK_NAME,
    SlotReplacedError,
    SlotTimeoutError,
    SlotUnavailableError,
    acquire_slot,
    acquire_slots,
    release_slot,
    with_limit,
    with_limits,
)
from stackbone.runs.runtime import current_run
from studio.workflows import step, workflow
from tests.chaos.records import now, record

GUARDED_LIMIT = "guarded-work"
KEYED_LIMIT = "guarded-keyed"  # a pool of one per key
GUARDED_LIMITS = (GUARDED_LIMIT, KEYED_LIMIT)


def _slots_of_this_run(limits: list[str]) -> list[list[str | None]]:
    """[limit, slot id] for each limit, as the body's handles have them: from the latest completed
    hook step of this acquisition (with_limit and with_limits do not pass their slots to the
    function they guard), whose slot ids come in the order the limits were given."""
    ctx = current_run()
    name = HOOK_NAME.format(limit=" + ".join(limits))
    if ctx is not None:
        for seq in sorted(ctx.recorded, reverse=True):
            recorded = ctx.recorded[seq]
            if recorded.name == name and isinstance(recorded.result, dict) and recorded.result.get("slot_id"):
                ids = recorded.result.get("slot_ids") or [recorded.result["slot_id"]]
                return [[limit, str(slot_id)] for limit, slot_id in zip(limits, ids, strict=False)]
    return [[limit, None] for limit in limits]


@step
def guarded_work(
    limits: list[str], seconds: float, slots: list[list[str | None]] | None = None, key: str | None = None
) -> dict[str, Any]:
    ctx = current_run()
    execution = uuid.uuid4().hex
    slots = slots or _slots_of_this_run(limits)
    record(
        {
            "event": "start",
            "id": execution,
            "run_id": ctx.run_id if ctx else None,
            "seq": ctx.seq if ctx else None,  # the step's call number: one step of one run
            "limits": limits,
            "slots": slots,
            "key": key,
            "planned": seconds,
            "t": now(),
        }
    )
    time.sleep(seconds)  # the work: a connection kill or a SIGKILL may land here
    record({"event": "end", "id": execution, "t": now()})
    return {"execution": execution, "slots": slots}


def _limits(input: dict[str, Any]) -> list[str]:
    return list(input.get("limits") or [GUARDED_LIMIT])


@workflow
def chaos_with_limit(input: dict[str, Any]) -> dict[str, Any]:
    """with_limit around one guarded step (a SlotTimeoutError fails the run, as export_report)."""
    limits, key = _limits(input)[:1], input.get("key")
    try:
        return with_limit(
            limits[0],
            lambda: guarded_work(limits, float(input["seconds"]), key=key),
            label=input.get("label"),
            timeout=input.get("timeout"),
            key=key,
            on_full=input.get("on_full"),
        )
    except SlotUnavailableError as error:  # SPEC 14.2: full, skipped; the work never ran
        return {"skipped": error.reason}
    except SlotReplacedError as error:  # SPEC 14.3: a newer run of its key took its place; the work never ran
        return {"replaced_by": error.replaced_by_run}


@workflow
def chaos_acquire(input: dict[str, Any]) -> dict[str, Any]:
    """acquire_slot, a guarded step, release_slot."""
    limits, key = _limits(input)[:1], input.get("key")
    try:
        slot = acquire_slot(
            limits[0], label=input.get("label"), timeout=input.get("timeout"), key=key, on_full=input.get("on_full")
        )
    except SlotTimeoutError:
        return {"slot_id": None}
    except SlotUnavailableError as error:  # SPEC 14.2: full, skipped; the work never ran
        return {"slot_id": None, "skipped": error.reason}
    except SlotReplacedError as error:  # SPEC 14.3: a newer run of its key took its place; the work never ran
        return {"slot_id": None, "replaced_by": error.replaced_by_run}
    result = guarded_work(limits, float(input["seconds"]), [[slot.limiter, slot.id]], key=key)
    release_slot(slot.id)
    return {"slot_id": slot.id, **result}


@workflow
def chaos_with_limits(input: dict[str, Any]) -> dict[str, Any]:
    """with_limits over two limits around one guarded step (a timeout fails the run)."""
    limits, key = _limits(input), input.get("key")
    return with_limits(
        limits,
        lambda: guarded_work(limits, float(input["seconds"]), key=key),
        label=input.get("label"),
        timeout=input.get("timeout"),
        key=key,
    )


@workflow
def chaos_acquire_slots(input: dict[str, Any]) -> dict[str, Any]:
    """acquire_slots over two limits, a guarded step given the handles, a release_slot each."""
    limits, key = _limits(input), input.get("key")
    try:
        slots = acquire_slots(limits, label=input.get("label"), timeout=input.get("timeout"), key=key)
    except SlotTimeoutError:
        return {"slot_id": None}
    result = guarded_work(limits, float(input["seconds"]), [[slot.limiter, slot.id] for slot in slots], key=key)
    for slot in slots:
        release_slot(slot.id)
    return {"slot_id": slots[0].id, **result}


FAIR_LIMIT = "guarded-fair"  # shared fairly between keys (SPEC 13)


@workflow
def chaos_fair(input: dict[str, Any]) -> dict[str, Any]:
    """A tenant's guarded work on the fair limit: acquire_slot with the tenant's key (or none), a
    guarded step, release_slot. Its own workflow, so the box's base per workflow (SPEC 12.3)
    bounds it apart from the other guarded runs."""
    key = input.get("key")
    try:
        slot = acquire_slot(FAIR_LIMIT, label=input.get("label"), timeout=input.get("timeout"), key=key)
    except SlotTimeoutError:
        return {"slot_id": None}
    result = guarded_work([FAIR_LIMIT], float(input["seconds"]), [[slot.limiter, slot.id]], key=key)
    release_slot(slot.id)
    return {"slot_id": slot.id, **result}


BOUNDED_WORKFLOW = "chaos_bounded"
BOUND = f"workflow.{BOUNDED_WORKFLOW}"  # its own bound (SPEC 11): two runs at once, one per key


@workflow(name=BOUNDED_WORKFLOW, concurrency={"total": 2, "per_key": 1})
def chaos_bounded(input: dict[str, Any]) -> dict[str, Any]:
    """Guarded work under a whole-run bound: the run queues before its first step, and its step
    must lie inside the slot the run holds of its bound (found by run, no handle names it)."""
    done: dict[str, Any] = guarded_work([BOUND], float(input["seconds"]), [[BOUND, None]], input.get("key"))
    return done
