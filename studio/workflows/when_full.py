"""Examples of what a run does instead of waiting when a limit is full (SPEC 14); the live demo
plays each (studio/demo/when_full.py).

`rebuild_search_index` skips: one rebuild at a time, and a rebuild asked for while one is under
way is not needed, so its bound says `on_full: "skip"`: the run ends at once, `skipped`, never
started and queued nowhere::

    start_run(rebuild_search_index, {})   # a second one, while the first runs: skipped

`send_digest` caps its queue: one at a time, and at most one waiting (`max_waiting: 1`); a third
start while one runs and one waits ends `skipped`, "the queue is full" (SPEC 14.5).

`refresh_account` takes an `account-refresh` slot under the account's key, and a newer refresh
of an account takes the place of the one already waiting for it (`on_full="replace"`, SPEC
14.3): the older one's acquire_slot raises SlotReplacedError naming the run that replaced it.

`deploy_branch` deploys one branch at a time, and a newer deploy of a branch makes the one under
way pointless: its bound says `per_key: 1, on_full: "cancel_running"` (SPEC 14.4), so a deploy
started while one of its branch holds the slot cancels that one (as cancel_run does: a run
executing stops at its next step, and only then is its slot free) and takes the slot first::

    start_run(deploy_branch, {"seconds": 1}, concurrency_key="main")   # cancels main's deploy
"""

from __future__ import annotations

import time
from typing import Any

from limits.workflow import SlotReplacedError, SlotTimeoutError, acquire_slot
from studio.workflows import step, workflow


@step
def rebuild_index(seconds: float) -> dict[str, Any]:
    time.sleep(seconds)  # stands in for the rebuild
    return {"documents": 1000}


@workflow(concurrency={"total": 1, "on_full": "skip"})
def rebuild_search_index(input: dict[str, Any]) -> dict[str, Any]:
    """Rebuild the search index, one at a time: a rebuild started while another runs is not
    needed and ends at once, skipped (on_full "skip", SPEC 14.2). Input: {}; optional "seconds"
    (how long it takes)."""
    rebuilt: dict[str, Any] = rebuild_index(float(input.get("seconds", 0)))
    return rebuilt


@step
def send_digest_mail(name: str, seconds: float) -> dict[str, Any]:
    time.sleep(seconds)  # stands in for the mailing
    return {"digest": name}


@workflow(concurrency={"total": 1, "max_waiting": 1})
def send_digest(input: dict[str, Any]) -> dict[str, Any]:
    """Send a digest, one at a time, with at most one more waiting: a start past that ends at
    once, skipped, "the queue is full" (max_waiting, SPEC 14.5). Input: {"name": "daily"};
    optional "seconds" (how long it takes)."""
    sent: dict[str, Any] = send_digest_mail(input.get("name", ""), float(input.get("seconds", 0)))
    return sent


@workflow
def refresh_account(input: dict[str, Any]) -> dict[str, Any]:
    """Refresh an account's cached data: take an account-refresh slot under the account's key and
    keep it after the run (the refresh goes on elsewhere; `call_ended` gives it back). A newer
    refresh of the account takes the place of one waiting (on_full "replace", SPEC 14.3): the
    replaced run ends with {"replaced_by_run": <the newer run>}. Input: {"account": "acme"};
    optional "label", "timeout" (the wait, default "2m")."""
    account = input["account"]
    try:
        slot = acquire_slot(
            "account-refresh",
            key=account,
            label=input.get("label", ""),
            timeout=input.get("timeout", "2m"),
            on_full="replace",
        )
    except SlotReplacedError as error:
        return {"account": account, "slot_id": None, "replaced_by_run": error.replaced_by_run}
    except SlotTimeoutError:
        return {"account": account, "slot_id": None}
    return {"account": account, "slot_id": slot.id}


@step
def deploy_step(name: str, seconds: float) -> dict[str, Any]:
    time.sleep(seconds)  # stands in for building, then rolling out
    return {"done": name}


@workflow(concurrency={"per_key": 1, "on_full": "cancel_running"})
def deploy_branch(input: dict[str, Any]) -> dict[str, Any]:
    """Deploy a branch (the run's concurrency key), one deploy of a branch at a time: a newer
    deploy of the branch cancels the one under way (on_full "cancel_running", SPEC 14.4), whose
    run ends cancelled naming the newer one; it stops between its steps. Input: {}; optional
    "seconds" (how long each of its two steps takes)."""
    seconds = float(input.get("seconds", 0))
    deploy_step("build", seconds)
    deploy_step("roll out", seconds)
    return {"deployed": True}
