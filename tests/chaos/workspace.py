"""The limits of the chaos run (STACKBONE_WORKSPACE=tests.chaos.workspace): the ones the shipped
example workflows use, small enough that queues form, with max holds short enough that calls
nobody ends are taken back within the run; `partner-api` has a pool per account (SPEC 9).

`guarded-work` and `guarded-keyed` are the limits of the chaos run's own workflows
(tests/chaos/workflows.py), whose steps record when they really run: `guarded-keyed` has a pool
of one per key, and some runs take both limits at once, in either order (SPEC 10). Their max
holds are far longer than any of their steps, so a step outside its slot is a bug, never max hold
at work; no operator changes their capacities or pools (the declared ones hold throughout); the
chaos driver pauses `guarded-work` now and then (SPEC 5.6).

`guarded-fair` shares its capacity fairly between keys (SPEC 13, issue 28): the chaos run's
tenants, one flooding it in bursts and small ones arriving now and then
(tests/chaos/workflows.py, chaos_fair); the chaos run gives one small tenant a weight of 2, one a
min of 1 and one a pool of 1 before the load (__main__.setup_fair), and no operator changes it
afterwards. Capacity 4: a burst of the flood fills it and queues, so the small tenants that
arrive meanwhile wait behind the flood's backlog, and the fair order decides. Once in the load
it takes issue 43's fault run (__main__.Load.fault_run): the flood and ten more tenants, one of
weight 3, all queued at once: eleven keys on 4 slots, where the keys' turns (13.2's pass) decide.

`guarded-long` takes the chaos run's long steps (`chaos_with_limit`, 31-34 s: longer than a run's
lease, 30 s), some run by the workers whose clock is 10 minutes ahead or behind: room for all of
them at once, so they all start early and end within the load. Its max hold is longer than the
whole run: a long step cut by a connection kill and then by a SIGKILL runs three times, and waits
for its lease to lapse, in one slot (2 minutes were once not enough).

The box's run concurrency (SPEC 12, issue 27): base 6, burst 3.0, so at most 18 runs execute at
once and at most 6 of one workflow. The base binds during the load: the 6 long runs are all
`chaos_with_limit` and fill its base for their 31-34 s, so the other `chaos_with_limit` runs
meanwhile queue for the box (and the long steps still all start early). The ceiling binds when the
workers fall behind (a worker killed, Redis restarted and its tasks lost until recovery): a run
whose task waits in the broker holds its box slot. The workers have 12 processes (3 x 2 + 2 x 3):
a ceiling of 12 or less throttled the whole load (on the shared 2-core machine, base 4 burst 2.0
queued 642 of ~800 runs for 20 s on average and doubled the runs that timed out; base 6 burst
2.0 still made the run 44 s longer). The chaos run measures from the side files that no more runs
ever executed steps at once than the ceiling, nor of one workflow than the base (box_figures)."""

from limits.config import define_workspace

BOX_BASE, BOX_BURST = 6, 3.0  # ceiling floor(6 x 3.0) = 18

workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 4, "max_hold": "8s"},
        "partner-api": {"capacity": 2, "max_hold": "6s", "per_key": 1},
        "report-exports": {"capacity": 2, "max_hold": "30s"},
        "guarded-work": {"capacity": 2, "max_hold": "2m"},
        "guarded-keyed": {"capacity": 2, "max_hold": "2m", "per_key": 1},
        "guarded-long": {"capacity": 6, "max_hold": "10m"},
        "guarded-fair": {"capacity": 4, "max_hold": "2m", "share": "fair"},
    },
    run_concurrency={"base": BOX_BASE, "burst": BOX_BURST},
)
