"""Example: export a report while holding a `report-exports` slot, released however it ends."""

from __future__ import annotations

import time
from typing import Any

from limits.workflow import with_limit
from studio.workflows import step, workflow


@step
def build_report(report_id: str, seconds: float) -> dict[str, Any]:
    time.sleep(seconds)  # stands in for the slow export
    return {"report_id": report_id, "rows": 1000}


@workflow
def export_report(input: dict[str, Any]) -> dict[str, Any]:
    """Build a report inside a report-exports slot (with_limit: freed when it returns). Input:
    {"report_id": "r-1"}; optional "seconds" (how long it takes) and "timeout" (the wait)."""
    report_id = input["report_id"]
    return with_limit(
        "report-exports",
        lambda: build_report(report_id, float(input.get("seconds", 0))),
        label=report_id,
        timeout=input.get("timeout"),
    )
