"""Example: place a call that holds a `voice-calls` slot; the call's end, reported by a webhook,
releases it from another workflow. An `account` in the input is the slot's key (SPEC 9): shown
next to the slot, and its own pool on a limit that declares `per_key`."""

from __future__ import annotations

import logging
from typing import Any

from limits.workflow import SlotTimeoutError, acquire_slot, release_slot
from studio.workflows import step, workflow

logger = logging.getLogger(__name__)


@step
def dial_out(call_id: str, slot_id: str) -> None:
    logger.info("dialling %s with slot %s", call_id, slot_id)  # a real one calls the provider here


@workflow(reference="call_id")  # a search for the call id finds the run, even before it takes a slot
def place_call(input: dict[str, Any]) -> dict[str, Any]:
    """Place a call that keeps a voice-calls slot after the run ends; `call_ended` releases it.
    Input: {"call_id": "c-1"}; optional "account" (the key, its pool) and "timeout" (default "30m")."""
    try:
        slot = acquire_slot(
            "voice-calls", label=input["call_id"], timeout=input.get("timeout", "30m"), key=input.get("account")
        )
    except SlotTimeoutError:
        return {"slot_id": None}
    dial_out(input["call_id"], slot.id)
    return {"slot_id": slot.id}


@workflow
def call_ended(input: dict[str, Any]) -> dict[str, Any]:
    """Release the slot a call kept when the call ends. Input: {"slot_id": "slot_..."}."""
    return release_slot(input["slot_id"])
