"""Examples of concurrency of whole workflows (SPEC 11).

`sync_tenant` caps its own runs: one at a time per tenant (`per_key: 1`), any number of tenants
at once. Start it with the tenant as the key; a second run for the same tenant is `queued` and
takes no step until the first ends::

    start_run(sync_tenant, {"tenant": "acme"}, concurrency_key="acme")

`partner_export` holds a `partner-api` slot for the whole run: the same pool `acquire_slot` and
`with_limit` take from inside other runs (studio/workflows/calls.py, accounts.py), so Studio's
partner-api page shows both ways of taking that limit side by side.

`tenant_job` takes a `tenant-jobs` slot under its tenant's key: on the demo's fair limit (SPEC 13)
a tenant that floods the limit gets its share and the others theirs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from limits.workflow import SlotTimeoutError, acquire_slot
from studio.workflows import step, workflow

logger = logging.getLogger(__name__)


@step
def pull_changes(tenant: str, seconds: float) -> dict[str, Any]:
    logger.info("syncing %s", tenant)  # a real one pages through the tenant's changes
    time.sleep(seconds)
    return {"tenant": tenant, "synced_at": time.time()}


@workflow(concurrency={"per_key": 1})
def sync_tenant(input: dict[str, Any]) -> dict[str, Any]:
    """Sync one tenant, one run at a time per tenant: start it with the tenant as its key. Input:
    {"tenant": "acme"}, key "acme"; optional "seconds" (how long it takes)."""
    synced: dict[str, Any] = pull_changes(input["tenant"], float(input.get("seconds", 0)))
    return synced


@step
def upload_export(name: str, seconds: float) -> dict[str, Any]:
    logger.info("uploading %s to the partner", name)
    time.sleep(seconds)
    return {"export": name}


@workflow(limits=["partner-api"])
def partner_export(input: dict[str, Any]) -> dict[str, Any]:
    """Upload an export to the partner, holding a partner-api slot for the whole run. Input:
    {"name": "export-1"}; optional "seconds" (how long it takes)."""
    uploaded: dict[str, Any] = upload_export(input["name"], float(input.get("seconds", 0)))
    return uploaded


@workflow
def tenant_job(input: dict[str, Any]) -> dict[str, Any]:
    """Start one of a tenant's jobs: take a tenant-jobs slot with the tenant as its key and keep
    it after the run (the job goes on elsewhere); a later `call_ended` releases it. Input:
    {"tenant": "acme", "job": "j-1"}; optional "timeout" (the wait, default "30m")."""
    try:
        slot = acquire_slot(
            "tenant-jobs", label=input.get("job", ""), timeout=input.get("timeout", "30m"), key=input["tenant"]
        )
    except SlotTimeoutError:
        return {"slot_id": None}
    return {"slot_id": slot.id}
