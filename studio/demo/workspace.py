from limits.config import define_workspace

# partner-api has a pool per account (SPEC 9): at most 2 sessions each, 5 in all, so a busy
# account waits while the others go on.
workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 20, "max_hold": "45s"},
        "partner-api": {"capacity": 5, "max_hold": "20s", "per_key": 2},
        "report-exports": {"capacity": 2, "max_hold": "5m"},
    }
)
