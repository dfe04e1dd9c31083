"""Keeps example runs going against the demo limits, through start_run and a real worker:

- a call about every second (`place_call`); most end after 5-40 s (`call_ended` releases the
  slot from another run), one in ten never ends and is taken back by max hold (45 s);
- a partner session every 2 s (`open_session`, 10 s timeout), released after 3-15 s, so the
  5 sessions fill, a queue forms and some waits time out;
- a partner call about every 5 s (`partner_call`), for a busy account: `with_limits` over
  `partner-api` and `voice-calls`, so runs wait for two limits at once, holding neither (SPEC 10)
  while their account's pool is full.

- whole runs under a bound (SPEC 11): every 8 s two `sync_tenant` runs for one account
  (`per_key: 1`: the second is `queued` until the first ends), and every 12 s a `partner_export`
  that holds a `partner-api` slot for its whole run, from the same pool the sessions take from.

Every run is for one of a handful of accounts, its key (SPEC 9), two of them busy: `partner-api`
gives each account at most 2 sessions, so the busy accounts fill their pools and wait while the
others go on. Arrivals pause while a queue is longer than 40, so the demo never runs away, and
while more than 8 runs wait for the worker or 40 for the box (its run concurrency, SPEC 12:
base 6, burst 1.5, so at most 9 runs execute and the rest queue): the box's sweep (sent every 15 s, dropped after 14 s
in the broker's queue) must not be stuck behind the demo's runs on a slow machine.

- skip when full (SPEC 14) on `report-exports` (2 slots): every 5 s a `refresh_report` takes a
  slot with `on_full="skip"` and keeps it for 8-14 s (released by `call_ended`); one that finds
  both slots busy ends at once, queued nowhere, with `{"skipped": "limit_full"}`, within the
  first minute (the limit's page counts the skips).

- when full (SPEC 14), from 2 s in and every 30 s: a `rebuild_search_index` run skipped (its bound
  skips when full), a `send_digest` run refused by its queue's cap ("the queue is full"), and a
  `refresh_account` waiting for `account-refresh` replaced by a newer one of its account, and a
  `deploy_branch` run cancelled by a newer deploy of its branch (cancel_running)
  (studio/demo/when_full.py, which a test drives; it prints the runs' pages the first time).

- fair shares (SPEC 13) on `tenant-jobs`: acme floods it from the start, three small tenants join
  within 11 s and get their share as slots free; two newcomers join after 22 s, more keys than
  slots, and are served in turn within one hold (studio/demo/load.py, which a test drives).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time

import django

django.setup()

from limits.models import Limit  # noqa: E402
from stackbone.runs.models import FINISHED_STATUSES, Run  # noqa: E402
from studio.demo.load import FAIR_LIMIT, TenantJobs, set_weights  # noqa: E402
from studio.demo.when_full import WhenFull  # noqa: E402
from studio.workflows import start_run  # noqa: E402

logger = logging.getLogger("studio.demo")
MAX_QUEUE = 40
MAX_BEHIND = 8  # runs dispatched to the worker and not yet taken up
# The demo's tenants and how much of the traffic each brings: acme and globex are the busy ones.
ACCOUNTS = {"acme": 40, "globex": 25, "initech": 15, "umbrella": 10, "hooli": 10}
BUSY_ACCOUNTS = ("acme", "acme", "globex")


def main() -> None:
    rng = random.Random()
    accounts, weights = list(ACCOUNTS), list(ACCOUNTS.values())

    def account() -> str:
        return rng.choices(accounts, weights)[0]

    holding: dict[str, float | None] = {}  # run id -> seconds to hold its slot (None: never release)
    releases: list[tuple[float, str]] = []  # (when, slot id)
    next_call = next_session = next_partner_call = next_sync = next_export = time.monotonic()
    next_reports, reports = next_call + 3, 0
    tenants = TenantJobs(rng, start=next_call)
    when_full = WhenFull(start=next_call, say=lambda line: print(f"demo: {line}", flush=True))
    set_weights()
    calls = 0
    print(f"demo: starting example runs against voice-calls, partner-api and {FAIR_LIMIT}", flush=True)
    while True:
        now = time.monotonic()
        limits = ["voice-calls", "partner-api", FAIR_LIMIT, "box"]
        waiting = dict(Limit.objects.filter(name__in=limits).values_list("name", "waiting_count"))
        # The worker is behind, or runs queue for the box (SPEC 12): no arrivals for now (the
        # releases below still go out).
        behind = (
            Run.objects.filter(status__in=["pending", "running"], suspended=False).count() > MAX_BEHIND
            or waiting.pop("box", 0) >= MAX_QUEUE
        )
        if waiting.pop(FAIR_LIMIT, 0) < MAX_QUEUE and not behind:
            tenants.arrive(now)
        if not behind and now >= next_call and waiting.get("voice-calls", 0) < MAX_QUEUE:
            calls += 1
            call = {"call_id": f"demo-{calls}", "account": account(), "timeout": "2m", "demo": True}
            run = start_run("place_call", call)
            holding[run.id] = None if rng.random() < 0.1 else rng.uniform(5, 40)
            next_call = now + rng.uniform(0.6, 1.4)
        if not behind and now >= next_session and waiting.get("partner-api", 0) < MAX_QUEUE:
            session = {"label": f"session-{calls}", "account": account(), "timeout": "10s", "demo": True}
            run = start_run("open_session", session)
            holding[run.id] = rng.uniform(3, 15)
            next_session = now + 2
        if not behind and now >= next_partner_call and max(waiting.values(), default=0) < MAX_QUEUE:
            seconds = round(rng.uniform(0.2, 0.8), 1)  # short: the step holds a worker process
            busy_account = rng.choice(BUSY_ACCOUNTS)
            bridged = {"call_id": f"bridge-{calls}", "account": busy_account, "seconds": seconds, "timeout": "90s"}
            start_run("partner_call", {**bridged, "demo": True})
            next_partner_call = now + rng.uniform(4, 6)
        if not behind and now >= next_sync:
            tenant = rng.choice(BUSY_ACCOUNTS)
            for _ in range(2):  # one at a time per tenant: the second waits queued
                sync = {"tenant": tenant, "seconds": round(rng.uniform(1, 3), 1), "demo": True}
                start_run("sync_tenant", sync, concurrency_key=tenant)
            next_sync = now + 8
        if not behind and now >= next_export and waiting.get("partner-api", 0) < MAX_QUEUE:
            export = {"name": f"export-{calls}", "seconds": round(rng.uniform(1, 2), 1), "demo": True}
            start_run("partner_export", export)
            next_export = now + 12
        if not behind and now >= next_reports:  # SPEC 14.2: skipped while both slots are held
            reports += 1
            run = start_run("refresh_report", {"report_id": f"report-{reports}", "demo": True})
            holding[run.id] = rng.uniform(8, 14)
            next_reports = now + 5
        finished = Run.objects.filter(id__in=list(holding), status__in=FINISHED_STATUSES)
        for run_id, output in finished.values_list("id", "output"):
            hold = holding.pop(run_id)
            slot_id = (output or {}).get("slot_id")
            if slot_id and hold is not None:
                releases.append((now + hold, slot_id))
        for due, slot_id in [r for r in releases if r[0] <= now]:
            releases.remove((due, slot_id))
            start_run("call_ended", {"slot_id": slot_id, "demo": True})
        tenants.release_due(now)
        when_full.tick(now, arrivals=not behind)
        time.sleep(0.25)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
