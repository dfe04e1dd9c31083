"""Example: a run that gives up when no `partner-api` session frees within its timeout. With an
`account` in the input the session comes from that account's pool (SPEC 9: the demo's
`partner-api` gives each account at most `per_key` sessions, so a busy account waits alone)."""

from __future__ import annotations

from typing import Any

from limits.workflow import SlotTimeoutError, acquire_slot, release_slot
from studio.workflows import step, workflow


@step
def call_partner(session_label: str) -> dict[str, Any]:
    return {"ok": True, "label": session_label}


@workflow
def sync_partner(input: dict[str, Any]) -> dict[str, Any]:
    """Call the partner within a partner-api slot, giving up after a short wait. Input: {"label":
    "s-1"}; optional "account" (the key) and "timeout" (default "30s")."""
    label = input.get("label", "")
    try:
        slot = acquire_slot("partner-api", label=label, timeout=input.get("timeout", "30s"), key=input.get("account"))
    except SlotTimeoutError as error:
        return {"timed_out": True, "limiter": error.limiter, "timeout_ms": error.timeout}
    result = call_partner(label)
    release_slot(slot.id)
    return {"timed_out": False, **result}


@workflow
def open_session(input: dict[str, Any]) -> dict[str, Any]:
    """Open a partner session and keep its slot; a later `call_ended` run releases it. Input:
    {"label": "s-1"}; optional "account" (the key) and "timeout" (default "30s")."""
    try:
        slot = acquire_slot(
            "partner-api", label=input.get("label", ""), timeout=input.get("timeout", "30s"), key=input.get("account")
        )
    except SlotTimeoutError:
        return {"slot_id": None}
    return {"slot_id": slot.id}
