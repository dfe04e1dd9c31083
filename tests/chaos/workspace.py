"""The limits of the chaos run (STACKBONE_WORKSPACE=tests.chaos.workspace): the ones the shipped
example workflows use, small enough that queues form, with max holds short enough that calls
nobody ends are taken back within the run; and `guarded-work`, the limit of the chaos run's own
workflows (tests/chaos/workflows.py), whose steps record when they really run. Its max hold is
far longer than any of its steps, so a step outside its slot is a bug, never max hold at work."""

from limits.config import define_workspace

workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 4, "max_hold": "8s"},
        "partner-api": {"capacity": 2, "max_hold": "6s"},
        "report-exports": {"capacity": 2, "max_hold": "30s"},
        "guarded-work": {"capacity": 2, "max_hold": "2m"},
    }
)
