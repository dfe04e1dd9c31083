"""The report of `limits verify`: each limit (or those named) read in a snapshot of its own,
every check run over its rows (`History`), what was checked and found in one `Verification`."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from limits.models import Limit
from limits.verify.caps import CapChecks
from limits.verify.counts import CountChecks
from limits.verify.fair import FairChecks
from limits.verify.grants import GrantChecks
from limits.verify.history import _snapshot
from limits.verify.runs import RunChecks, unrecorded_endings
from limits.verify.times import TimeChecks
from stackbone.plumbing import clock as box_clock


class History(CountChecks, GrantChecks, TimeChecks, RunChecks, FairChecks, CapChecks):
    """One limit's rows (`HistoryRows.load`) and every check of `limits verify` over them, a to
    m: `violations` runs them all, in this order."""

    __slots__ = ()

    def violations(self, cutoff: dt.datetime) -> list[str]:
        return (
            self.capacity_overruns()
            + self.queue_jumps(cutoff)
            + self.request_histories(cutoff)
            + self.counters_against_rows()
            + self.tied_slots_of_ended_runs()
            + self.pool_overruns()
            + self.partial_groups(cutoff)
            + self.steps_before_start()
            + self.grants_while_paused()
            + self.steps_outside_the_box()
            + self.whole_runs_over_the_base()
            + self.unfair_grants(cutoff)
            + self.queue_over_cap()
            + self.replace_left_two()
        )


@dataclass(slots=True)
class Verification:
    """What `verify` checked and what it found (no violations: every rule held)."""

    limits: int = 0
    slots: int = 0
    entries: int = 0
    capacity_changes: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        checked = (
            f"{self.limits} limit(s), {self.slots} slot(s), {self.entries} queue entr"
            f"{'y' if self.entries == 1 else 'ies'}, {self.capacity_changes} capacity change(s)"
        )
        if self.ok:
            return f"ok: {checked}: capacity, queue order, one grant per request and counters hold"
        return f"{len(self.violations)} violation(s) in {checked}"


def verify(names: list[str] | None = None, *, retention_ms: int | None = None) -> Verification:
    """Check every limit (or those named) from its rows. Unknown names are violations."""
    from limits.engine.sweeper import history_retention_ms

    result = Verification()
    cutoff = box_clock.now() - dt.timedelta(
        milliseconds=history_retention_ms() if retention_ms is None else retention_ms
    )
    ids = Limit.objects.order_by("name").values_list("id", "name")
    if names is not None:
        found = {name for _, name in ids.filter(name__in=names)}
        result.violations.extend(f"unknown limit {name!r}" for name in names if name not in found)
        ids = ids.filter(name__in=names)
    for limit_id, _name in list(ids):
        with _snapshot():
            limit = Limit.objects.get(id=limit_id)
            history = History.load(limit)
            now = box_clock.now()  # after the snapshot began: every row it sees was written before
            result.limits += 1
            result.slots += len(history.slots)
            result.entries += len(history.entries)
            result.capacity_changes += len(history.capacity_events)
            result.violations.extend(history.violations(cutoff) + history.times_off_the_clock(now))
    if names is None:  # n: the runs, once for the box (not per limit)
        result.violations.extend(unrecorded_endings())
    return result


def all_violations(limit: Limit, *, retention_ms: int | None = None) -> list[str]:
    """Every violation of one limit (the stress tests' one call)."""
    return verify([limit.name], retention_ms=retention_ms).violations


def capacity_overruns(limit: Limit) -> list[str]:
    return History.load(limit).capacity_overruns()


def queue_jumps(limit: Limit) -> list[str]:
    return History.load(limit).queue_jumps(cutoff=dt.datetime.min.replace(tzinfo=dt.UTC))
