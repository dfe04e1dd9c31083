"""The tenants of the demo's fair limit `tenant-jobs` (SPEC 13), a part of its loop
(studio/demo/__main__.py) that a test drives on its own clock (tests/test_demo.py).

`tenant-jobs` has capacity 5 and `share: fair`. acme floods it from the start, keeping 10 jobs
waiting or holding a slot; globex, initech and hooli join after 5, 8 and 11 s and keep 3, 4 and
3, a backlog each beyond its share. initech's weight is 2, set at the demo's start as an operator
would (`services.set_weight`, audited). A job is a `tenant_job` run that takes a slot under its
tenant's key and keeps it after the run; the job goes on elsewhere and, 10-20 s later, gives its
slot back through the API (`services.release`, no run: the demo's worker has little to spare).
Nothing is taken back (13.3): acme holds all 5 slots at first, then each slot freed goes to the
tenant holding least for its weight, so within 20 s the Keys panel shows each tenant at its fair
share (5 x weight / 5: 1, 1, 2 and 1) while acme waits for its own.

Then two newcomers, umbrella and stark, join after 22 and 25 s (2 jobs each): now six keys of
weight 7 share 5 slots, more keys than slots, and the keys take turns (13.2, stride scheduling):
a newcomer enters the turns beside the others, not behind their backlogs, and is served within one
hold of the first slot freed after it arrives, while the tenants that were there before wait
their turn; the Keys panel shows fair shares below one slot (5 / 7) and the keys' passes moving on.
The box's run concurrency is declared. tests/test_demo.py plays it: the shares even out by 20 s,
the newcomers are served within one hold, and by 45 s every tenant has had its turn.
"""

from __future__ import annotations

import random
from collections import Counter

from limits import services
from limits.models import LimitKey
from stackbone.runs.models import FINISHED_STATUSES, Run
from studio.workflows import start_run

FAIR_LIMIT = "tenant-jobs"
FLOODER = "acme"
# Each tenant of tenant-jobs: seconds into the demo before its first job, and how many of its
# jobs it keeps waiting or holding a slot.
TENANTS = {
    FLOODER: (0.0, 10),
    "globex": (5.0, 3),
    "initech": (8.0, 4),
    "hooli": (11.0, 3),
    # The newcomers: they join once the others are at their shares, with backlogs queued before them.
    "umbrella": (22.0, 2),
    "stark": (25.0, 2),
}
NEWCOMERS = ("umbrella", "stark")
WEIGHTS = {"initech": 2}
FLOOD_PER_TICK = 2  # acme's jobs started at once while it has fewer than it keeps
# Seconds a job keeps its slot: long enough that the jobs cost the worker little (a run about every
# 3 s), short enough that the turns show within the first minute.
JOB_HOLD = (10.0, 20.0)
ACTOR = "stackbone dev --demo"
ENDED = FINISHED_STATUSES  # stackbone.runs.models: skipped and replaced runs too (SPEC 14)


def set_weights() -> None:
    """Give the demo's tenants their weights on tenant-jobs, as an operator would (audited),
    unless they have them already (a restarted demo writes no audit event)."""
    have = dict(LimitKey.objects.filter(limit__name=FAIR_LIMIT, key__in=WEIGHTS).values_list("key", "weight"))
    for key, weight in WEIGHTS.items():
        if have.get(key) != weight:
            services.set_weight(FAIR_LIMIT, weight, key=key, actor=ACTOR)


class TenantJobs:
    """The jobs of tenant-jobs' tenants. A job is open from its start until its slot is given
    back (or its run ends without one, its wait timed out): each tick, each tenant whose time
    has come starts jobs while it has fewer open than it keeps (acme up to FLOOD_PER_TICK, the
    others one)."""

    def __init__(self, rng: random.Random, start: float) -> None:
        self.rng, self.start = rng, start
        self.open: dict[str, str] = {}  # run id -> tenant
        self.holding: dict[str, float] = {}  # run id -> seconds its slot is kept once it has one
        self.releases: list[tuple[float, str, str]] = []  # (when, slot id, run id)
        self.jobs = 0

    def arrive(self, now: float) -> None:
        counts = Counter(self.open.values())
        for tenant, (after, keeps) in TENANTS.items():
            if now - self.start < after:
                continue
            for _ in range(min(keeps - counts[tenant], FLOOD_PER_TICK if tenant == FLOODER else 1)):
                self.jobs += 1
                job = {"tenant": tenant, "job": f"job-{self.jobs}", "timeout": "2m", "demo": True}
                run = start_run("tenant_job", job)
                self.open[run.id] = tenant
                self.holding[run.id] = self.rng.uniform(*JOB_HOLD)

    def release_due(self, now: float) -> None:
        """Schedule the release of each job whose run ended with its slot; give back the slots
        due by `now`."""
        finished = Run.objects.filter(id__in=list(self.holding), status__in=ENDED)
        for run_id, output in finished.values_list("id", "output"):
            hold = self.holding.pop(run_id)
            slot_id = (output or {}).get("slot_id")
            if slot_id:
                self.releases.append((now + hold, slot_id, run_id))
            else:
                self.open.pop(run_id, None)
        for release in [r for r in self.releases if r[0] <= now]:
            self.releases.remove(release)
            services.release(release[1])
            self.open.pop(release[2], None)
