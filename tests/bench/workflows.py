"""The workflow of the hand-off benchmark: take a slot of a limit and end (the slot stays busy:
a run that ends does not release what it holds, SPEC 2.7)."""

from __future__ import annotations

from limits.workflow import acquire_slot
from studio.workflows import workflow


@workflow(name="bench_take_slot")
def take_slot(input: dict) -> dict:
    slot = acquire_slot(input["limit"], label=input.get("label"))
    return {"slot_id": slot.id}
