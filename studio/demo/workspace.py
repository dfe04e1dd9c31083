from limits.config import define_workspace

# partner-api has a pool per account (SPEC 9): at most 2 sessions each, 5 in all, so a busy
# account waits while the others go on. The box runs at most 9 runs at once (base 6 x burst 1.5),
# no workflow more than 6 (SPEC 12): the demo's arrivals keep it full, so its queue moves.
workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 20, "max_hold": "45s"},
        "partner-api": {"capacity": 5, "max_hold": "20s", "per_key": 2},
        "report-exports": {"capacity": 2, "max_hold": "5m"},
    },
    run_concurrency={"base": 6, "burst": 1.5},
)
