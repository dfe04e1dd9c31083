"""The limits the benchmarks use (STACKBONE_WORKSPACE=tests.bench.workspace in the bench database)."""

from limits.config import define_workspace

HOT = "bench-hot"
HOT_2 = "bench-hot-2"
HANDOFF = "bench-handoff"
SWEEP = "bench-sweep"
STUDIO = "bench-studio"

workspace = define_workspace(
    limits={
        HOT: {"capacity": 4, "max_hold": "1h"},
        HOT_2: {"capacity": 4, "max_hold": "1h"},
        HANDOFF: {"capacity": 1, "max_hold": "1h"},
        SWEEP: {"capacity": 100_000, "max_hold": "1h"},
        STUDIO: {"capacity": 100_000, "max_hold": "1h"},
    }
)
