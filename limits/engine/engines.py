"""One behaviour, an engine per database, chosen once (Oban's shape: `Oban.Engine` is the
behaviour, `Basic` runs it on PostgreSQL and `Lite` on SQLite).

`Engine` is what every database answers: each write of limits.engine.slots, operator_actions and
sweeper, given input those modules have already checked. Two engines implement it:

- `PostgresEngine` (limits.engine.server): each operation one call of a function of
  limits/sql/engine.sql, its answer worded as the Python engine words it;
- `PythonEngine` (limits.engine.python, its operator actions in limits.engine.python_operators):
  the Python track, the readable definition, on the rules of limits.engine.grant, keys and rules; SQLite
  runs it, and so would any database that is not PostgreSQL.

The public functions check what callers pass in, then call `engine()`: the engine of the
database `django.db.connection` uses, one per vendor, made once. No operation asks again which
database it is on, and neither engine hands a case to the other, with one exception left from
before: limits.runs.bounds.start_on_server answers None (the Python rules then start the runs) if
limits_start_runs answers 'slow', which only a list of bounds naming a limit twice could cause, and
the start refuses that before the call.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from django.db import connection

from limits.config import Workspace
from limits.engine.python import PythonEngine
from limits.engine.results import Acquisition, BoundValues, SweepReport, SyncReport
from limits.engine.server import PostgresEngine
from limits.models import Limit


class Engine(Protocol):
    """The operations, each in its own transaction or the caller's as its public function says
    (limits.engine.slots, operator_actions, sweeper); `actor` None is the system's."""

    # limits.runs.start_runs writes the runs and takes their bounds in one call
    # (limits.runs.bounds.start_on_server), rather than run by run through acquire_group.
    starts_runs_in_one_call: bool

    def acquire(
        self, limit_name: str, run_id: str, request: str, label: str, timeout_ms: int, on_full: str | None = None
    ) -> Acquisition: ...

    def acquire_group(
        self,
        names: list[str],
        run_id: str,
        request: str,
        label: str,
        member_keys: list[str],
        timeout_ms: int,
        box: bool,
        on_full: str | None = None,
    ) -> Acquisition: ...

    def confirm(self, slot_id: str) -> bool: ...

    def release(self, slot_id: str, actor: str | None) -> bool: ...

    def release_slots(self, slot_ids: list[str], actor: str | None) -> list[bool]: ...

    def tie_to_run(self, slot_id: str, run_id: str) -> bool: ...

    def end_run(self, run_id: str) -> int: ...

    def sweep(self, now: datetime, report: SweepReport) -> None: ...

    def set_capacity(self, name: str, capacity: int | None, actor: str | None) -> Limit: ...

    def set_paused(self, name: str, paused: bool, actor: str | None) -> Limit: ...

    def set_max_hold(self, name: str, ms: int | None, actor: str | None) -> Limit: ...

    def set_per_key(self, name: str, value: object, key: str | None, actor: str | None) -> Limit: ...

    def set_share(self, name: str, share: str | None, actor: str | None) -> Limit: ...

    def set_on_full(self, name: str, on_full: str | None, actor: str | None) -> Limit: ...

    def set_max_waiting(self, name: str, value: int | None, per_key: bool, actor: str | None) -> Limit: ...

    def set_weight(self, name: str, key: str, weight: int | None, actor: str | None) -> Limit: ...

    def set_min(self, name: str, key: str, minimum: object, actor: str | None) -> Limit: ...

    def set_box(
        self,
        base: int | None,
        base_given: bool,
        burst: float | None,
        burst_given: bool,
        actor: str | None,
        field: str,
    ) -> Limit: ...

    def sync_workspace(self, workspace: Workspace, actor: str) -> SyncReport: ...

    def sync_workflow_bounds(self, bounds: dict[str, BoundValues], actor: str, only: bool) -> SyncReport: ...


_BY_VENDOR: dict[str, Engine] = {"postgresql": PostgresEngine()}
_PYTHON: Engine = PythonEngine()


def engine() -> Engine:
    """The engine of the database `django.db.connection` uses (one dict lookup)."""
    return _BY_VENDOR.get(connection.vendor, _PYTHON)
