from limits.config import define_workspace

# partner-api has a pool per account (SPEC 9): at most 2 sessions each, 5 in all, so a busy
# account waits while the others go on. The box runs at most 9 runs at once (base 6 x burst 1.5),
# no workflow more than 6 (SPEC 12): the demo's arrivals keep it full, so its queue moves.
# tenant-jobs shares its 5 slots fairly between tenants (SPEC 13): one floods it, three small ones
# still get their share as slots free, then two newcomers make six keys for 5 slots and the keys
# take turns, a newcomer served within one hold (studio/demo/load.py; initech's weight is 2).
# account-refresh gives each account one refresh at a time, and a newer refresh of an account takes
# the place of the one waiting (SPEC 14.3: studio/demo/when_full.py).
workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 20, "max_hold": "45s"},
        "partner-api": {"capacity": 5, "max_hold": "20s", "per_key": 2},
        "report-exports": {"capacity": 2, "max_hold": "5m"},
        "tenant-jobs": {"capacity": 5, "max_hold": "1m", "share": "fair"},
        "account-refresh": {"capacity": 3, "max_hold": "1m", "per_key": 1, "on_full": "replace"},
    },
    run_concurrency={"base": 6, "burst": 1.5},
)
