"""Example: a call placed for an account through the partner's API needs a `partner-api` session
from that account's pool and a `voice-calls` line at the same time. `with_limits` takes both, all
or nothing (SPEC 10): while one of them is full the run waits holding neither, its hook step
named `Esperando hueco · partner-api + voice-calls`, and both slots are given back when the call
ends."""

from __future__ import annotations

import logging
import time
from typing import Any

from limits.workflow import SlotTimeoutError, with_limits
from studio.workflows import step, workflow

logger = logging.getLogger(__name__)

LIMITS = ["partner-api", "voice-calls"]


@step
def bridge_call(account: str, call_id: str, seconds: float) -> dict[str, Any]:
    logger.info("bridging %s for %s", call_id, account)  # a real one asks the partner, then dials
    time.sleep(seconds)  # stands in for the call
    return {"call_id": call_id, "account": account}


@workflow
def partner_call(input: dict[str, Any]) -> dict[str, Any]:
    """Bridge a partner call: one slot of partner-api and one of voice-calls at once, under the
    account's key. Input: {"account": "acme", "call_id": "c-1"}; optional "seconds" (how long the
    call lasts) and "timeout" (the wait for both, default "30m")."""
    account, call_id = input["account"], input["call_id"]
    try:
        return with_limits(
            LIMITS,
            lambda: bridge_call(account, call_id, float(input.get("seconds", 0))),
            key=account,
            label=call_id,
            timeout=input.get("timeout", "30m"),
        )
    except SlotTimeoutError:
        return {"call_id": call_id, "account": account, "timed_out": True}
