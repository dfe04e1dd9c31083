"""The engine: every write to limits, slots and the queue (SPEC sections 2-5 and 9-13).

The public operations, each checking what callers pass in and then calling the database's engine:

- `slots`: the workflow-facing operations (acquire, acquire_group, confirm, release, end_run,
  tie_to_run);
- `operator_actions`: operator actions and deploys (set_capacity, set_max_hold, set_per_key,
  pause_limit, resume_limit, sync_workspace);
- `sweeper`: the 15-second sweep and the history purge.

The engines, chosen once per database (`engines`: the `Engine` behaviour and `engine()`):

- `server`: PostgresEngine, each operation one call of a function of limits/sql/engine.sql;
- `python` (with `python_operators`): PythonEngine, the Python track, the readable definition and
  SQLite's engine, built on
- `grant`: the grant rules, one Python track for every case (a plain limit is the case of one
  pool and no groups: `settle`), on
- `keys`: the key pools, a fair limit's turns, the locks, join, time out, the owed-run barrier,
  confirm, lapse, requeue;
- `waiting`: why a waiting run is not granted now (`why_waiting`, SPEC 6.5), by the same rules; and
- `rules`: what every locked section of the Python engine shares (locks, clock, counters, audit,
  waking, the grant: `settle_all`);
- `errors`, `refusals`, `results`, `woken`: LimitsError with its messages (an operator's refusals
  under the lock, worded once for both engines), what operations answer, and the runs they woke
  announced after commit.

Each operation runs in one transaction that locks the rows of the limits it touches (``SELECT ...
FOR NO KEY UPDATE`` on PostgreSQL; on SQLite every transaction is IMMEDIATE, so writers serialize).
Limits are always locked in id order, so two limits never wait on each other and several never
deadlock. NO KEY UPDATE, not FOR UPDATE: a row referencing a limit is checked at COMMIT under a KEY
SHARE lock on the limit, taken in the order the rows were written; FOR UPDATE would block that
check, and a commit that wrote rows for limits it does not hold (the sweep's insights rollup) would
wait out of id order and deadlock (limits/migrations/0015). Counters on the limit row change in the
same transaction as the slot and queue rows, under that lock. Runs woken by a change (granted a
reservation, or timed out) are announced with the ``limits.signals.runs_woken`` signal after the
transaction commits, never while a lock is held.

`limits.services` is the public face of this package (the names it exports stay stable).
"""

from limits.engine.errors import (
    BAD_CAPACITY,
    BAD_LABEL,
    BAD_LIMITS,
    BAD_MAX_HOLD,
    BAD_PER_KEY,
    BAD_REQUEST,
    BAD_RUN_ID,
    BAD_TIMEOUT,
    UNDECLARED_LIMIT,
    UNKNOWN_LIMIT,
    LimitsError,
)
from limits.engine.keys import OWED_AFTER_MS, held
from limits.engine.operator_actions import (
    ensure_workflow_bound,
    pause_limit,
    resume_limit,
    set_box,
    set_capacity,
    set_max_hold,
    set_max_waiting,
    set_min,
    set_on_full,
    set_per_key,
    set_share,
    set_weight,
    sync_workflow_bounds,
    sync_workspace,
)
from limits.engine.results import REASONS, WHOLE_RUN_SUFFIX, Acquisition, BoxPlace, Reason, SweepReport, SyncReport
from limits.engine.rules import (
    DEFAULT_TIMEOUT_MS,
    DEPLOY_ACTOR,
    GRANT_BATCH,
    RESERVATION_MS,
    SWEEP_ACTOR,
    SYSTEM_ACTOR,
)
from limits.engine.slots import acquire, acquire_group, confirm, end_run, release, release_slots, tie_to_run
from limits.engine.sweeper import HISTORY_BATCH, history_retention_ms, sweep
from limits.engine.waiting import why_waiting

__all__ = [
    "BAD_CAPACITY",
    "BAD_LABEL",
    "BAD_LIMITS",
    "BAD_PER_KEY",
    "OWED_AFTER_MS",
    "BAD_MAX_HOLD",
    "BAD_REQUEST",
    "BAD_RUN_ID",
    "BAD_TIMEOUT",
    "DEFAULT_TIMEOUT_MS",
    "DEPLOY_ACTOR",
    "GRANT_BATCH",
    "HISTORY_BATCH",
    "RESERVATION_MS",
    "SWEEP_ACTOR",
    "SYSTEM_ACTOR",
    "UNDECLARED_LIMIT",
    "UNKNOWN_LIMIT",
    "WHOLE_RUN_SUFFIX",
    "Acquisition",
    "BoxPlace",
    "REASONS",
    "Reason",
    "LimitsError",
    "SweepReport",
    "SyncReport",
    "acquire",
    "acquire_group",
    "held",
    "confirm",
    "end_run",
    "history_retention_ms",
    "pause_limit",
    "resume_limit",
    "release",
    "release_slots",
    "set_box",
    "set_capacity",
    "set_max_hold",
    "set_min",
    "set_share",
    "set_on_full",
    "set_max_waiting",
    "set_weight",
    "set_per_key",
    "sweep",
    "ensure_workflow_bound",
    "sync_workflow_bounds",
    "sync_workspace",
    "tie_to_run",
    "why_waiting",
]
