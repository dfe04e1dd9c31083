from limits.config import define_workspace

workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 20, "max_hold": "45s"},
        "partner-api": {"capacity": 5, "max_hold": "20s"},
        "report-exports": {"capacity": 2, "max_hold": "5m"},
    }
)
