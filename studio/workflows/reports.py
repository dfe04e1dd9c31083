"""Example: export a report while holding a `report-exports` slot, released however it ends."""

from __future__ import annotations

import time
from typing import Any

from limits.workflow import SlotUnavailableError, acquire_slot, with_limit
from studio.workflows import step, workflow


@step
def build_report(report_id: str, seconds: float) -> dict[str, Any]:
    time.sleep(seconds)  # stands in for the slow export
    return {"report_id": report_id, "rows": 1000}


@workflow
def export_report(input: dict[str, Any]) -> dict[str, Any]:
    """Build a report inside a report-exports slot (with_limit: freed when it returns). Input:
    {"report_id": "r-1"}; optional "seconds" (how long it takes), "timeout" (the wait) and
    "on_full": "skip" (SPEC 14.2: if both slots are busy, don't queue another export: the run
    ends at once with {"report_id": ..., "skipped": <why>})."""
    report_id = input["report_id"]
    try:
        return with_limit(
            "report-exports",
            lambda: build_report(report_id, float(input.get("seconds", 0))),
            label=report_id,
            timeout=input.get("timeout"),
            on_full=input.get("on_full"),
        )
    except SlotUnavailableError as error:
        return {"report_id": report_id, "skipped": error.reason}


@workflow
def refresh_report(input: dict[str, Any]) -> dict[str, Any]:
    """Take a report-exports slot for a refresh that goes on elsewhere and return its slot id (the
    refresh gives it back when done, from another run: call_ended, or services.release). If both
    slots are busy another refresh is under way, so this one is not needed: on_full "skip" (SPEC
    14.2) ends the run at once, queued nowhere. Input: {"report_id": "r-1"}."""
    report_id = input["report_id"]
    try:
        slot = acquire_slot("report-exports", label=report_id, on_full="skip")
    except SlotUnavailableError as error:
        return {"report_id": report_id, "slot_id": None, "skipped": error.reason}
    return {"report_id": report_id, "slot_id": slot.id}
