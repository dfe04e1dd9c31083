"""The limits the benchmarks use (STACKBONE_WORKSPACE=tests.bench.workspace in the bench database)."""

from limits.config import define_workspace

HOT = "bench-hot"
HOT_2 = "bench-hot-2"
HANDOFF = "bench-handoff"
SWEEP = "bench-sweep"
STUDIO = "bench-studio"
# Scenario 7: one slot per key; on KEYED the keys bind (8 processes can never fill 1,000 slots),
# on KEYED_TOTAL the total of 4 binds, as on HOT.
KEYED = "bench-keyed"
KEYED_TOTAL = "bench-keyed-total"
KEYED_CAPACITY = 1_000
# Scenario 8: one slot of each, all or nothing.
GROUP_A = "bench-group-a"
GROUP_B = "bench-group-b"
# The run scenario of issue 17: the shipped `sync_partner` (studio/workflows/timeouts.py) takes a
# slot of this limit; capacity 4 here, as DBOS's queue beside it.
PARTNER = "partner-api"
# Scenario 14 (issue 28, SPEC 13): the same load on a fair limit, a fifo limit with per_key 2 and a
# fifo limit without per_key, all of capacity 10; and the key choice at 10,000 waiting keys.
FAIR = "bench-fair"
FIFO_PER_KEY = "bench-fifo-per-key"
FIFO_PLAIN = "bench-fifo-plain"
FAIR_WIDE = "bench-fair-wide"
FIFO_WIDE = "bench-fifo-wide"
# Scenario 14's turns (issue 43, SPEC 13.2 amended): six tenants on 4 slots, fair against fifo
# with per_key 2.
FAIR_TURNS = "bench-fair-turns"
FIFO_TURNS = "bench-fifo-turns"

workspace = define_workspace(
    limits={
        HOT: {"capacity": 4, "max_hold": "1h"},
        HOT_2: {"capacity": 4, "max_hold": "1h"},
        HANDOFF: {"capacity": 1, "max_hold": "1h"},
        SWEEP: {"capacity": 100_000, "max_hold": "1h"},
        STUDIO: {"capacity": 100_000, "max_hold": "1h"},
        KEYED: {"capacity": KEYED_CAPACITY, "per_key": 1, "max_hold": "1h"},
        KEYED_TOTAL: {"capacity": 4, "per_key": 1, "max_hold": "1h"},
        GROUP_A: {"capacity": 4, "max_hold": "1h"},
        GROUP_B: {"capacity": 4, "max_hold": "1h"},
        PARTNER: {"capacity": 4, "max_hold": "1h"},
        FAIR: {"capacity": 10, "share": "fair", "max_hold": "1h"},
        FIFO_PER_KEY: {"capacity": 10, "per_key": 2, "max_hold": "1h"},
        FIFO_PLAIN: {"capacity": 10, "max_hold": "1h"},
        FAIR_WIDE: {"capacity": 10, "share": "fair", "max_hold": "1h"},
        FIFO_WIDE: {"capacity": 10, "per_key": 2, "max_hold": "1h"},
        FAIR_TURNS: {"capacity": 4, "share": "fair", "max_hold": "1h"},
        FIFO_TURNS: {"capacity": 4, "per_key": 2, "max_hold": "1h"},
    }
)
