"""Checks e, h and k of `limits verify` (limits/verify/__init__.py): the runs. A slot tied to
its run is freed when the run ends (e), a whole run takes no step before its slots are confirmed
(h), and under the box no run executes outside a box slot and no limit holds more whole runs than
the box's base (k)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.db.models import Min

from limits.config import BOX_NAME, CANCEL_RUNNING
from limits.engine.results import WHOLE_RUN_SUFFIX
from limits.models import AuditEvent, Limit
from limits.verify.history import FOREVER, LIVE, HistoryRows, _iso


class RunChecks(HistoryRows):
    __slots__ = ()

    # --- e. slots tied to their run ----------------------------------------------------------

    def tied_slots_of_ended_runs(self) -> list[str]:
        """A with_limit slot is freed in the transaction that ends its run (services.end_run):
        one still live while its run has ended was left behind."""
        from stackbone.runs.models import Run

        tied = [slot for slot in self.slots if slot["ends_with_run"] and slot["state"] in LIVE]
        if not tied:
            return []
        ended = dict(
            Run.objects.filter(id__in={slot["run_id"] for slot in tied}, finished_at__isnull=False).values_list(
                "id", "status"
            )
        )
        return [
            f"{self.limit.name}: {slot['id']} is still {slot['state']} for with_limit "
            f"although its run {slot['run_id']} is {ended[slot['run_id']]}"
            for slot in tied
            if slot["run_id"] in ended
        ]

    # --- h. whole runs -----------------------------------------------------------------------

    def steps_before_start(self) -> list[str]:
        """No step of a run before the slot it holds for the whole run was confirmed."""
        from limits.runs.bounds import START_REQUEST_SUFFIX
        from stackbone.runs.models import Step

        confirmed = {
            slot["run_id"]: slot["confirmed_at"]
            for slot in self.slots
            if slot["request"].endswith(START_REQUEST_SUFFIX) and slot["confirmed_at"] is not None
        }
        if not confirmed:
            return []
        first_steps = Step.objects.filter(run_id__in=confirmed).values("run_id").annotate(first=Min("started_at"))
        return [
            f"{self.limit.name}: run {row['run_id']} took a step at {_iso(row['first'])}, before its slot was "
            f"confirmed at {_iso(confirmed[row['run_id']])}"
            for row in first_steps
            if row["first"] < confirmed[row["run_id"]]
        ]

    # --- k. the box ---------------------------------------------------------------------------

    def steps_outside_the_box(self) -> list[str]:
        """Every step of a run that held slots of the box began while one of them was busy for
        it (confirmed, not yet freed): a run executes only in a box slot (SPEC 12.2). Steps of
        kind 'step' (the work); a hook step is recorded as the run begins to wait."""
        from stackbone.runs.models import Step

        if not self.limit.is_box:
            return []
        held: dict[str, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
        for slot in self.slots:
            if slot["confirmed_at"] is not None:
                held[slot["run_id"]].append((slot["confirmed_at"], slot["freed_at"] or FOREVER))
        steps = Step.objects.filter(run_id__in=list(held), kind=Step.Kind.STEP, started_at__isnull=False)
        return [
            f"{self.limit.name}: run {run_id} began step {name!r} at {_iso(started)} without a box slot"
            for run_id, name, started in steps.values_list("run_id", "name", "started_at").iterator()
            if not any(start <= started <= end for start, end in held[run_id])
        ]

    def whole_runs_over_the_base(self) -> list[str]:
        """SPEC 12.3: no grant brought the limit's live whole-run slots (requests '<run>:start')
        above the box's base (the base in force now; skipped once the box's base changed, by an
        operator or a deploy, or for the box itself, whose pools hold its runs)."""
        if self.limit.is_box:
            return []
        base = _steady_box_base()
        if base is None:
            return []
        level, violations = 0, []
        moments = []
        for slot in self.slots:
            if slot["request"].endswith(WHOLE_RUN_SUFFIX):
                moments.append((slot["granted_at"], 1))
                if slot["freed_at"] is not None:
                    moments.append((slot["freed_at"], -1))
        for at, change in sorted(moments):  # frees first at one instant
            level += change
            if level > base:
                violations.append(
                    f"{self.limit.name}: {level} whole runs held slots at {_iso(at)}, the box's base {base}"
                )
                break
        return violations


def _steady_box_base() -> int | None:
    """The box's base in force, if it never changed since the box was declared (an operator's
    base or a deploy's audited), else None: the checks of 12.3 need the base of every instant."""
    box = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).first()
    if (
        box is None
        or AuditEvent.objects.filter(limit=box, action__in=[AuditEvent.Action.BOX, AuditEvent.Action.SYNC]).exists()
    ):
        return None
    return box.per_key


# --- n. the causes of runs ended by SPEC 14 ----------------------------------------------------------

ENDING_CHECK_LIMIT = 100  # violations reported at most: one query, whatever the number of runs


def unrecorded_endings() -> list[str]:
    """SPEC 14.6: every run ended `skipped` or `replaced` names why (a reason code of
    limits.engine.results.REASONS) and the limit that stopped it; a replaced run names the run
    that replaced it, and a run cancelled by cancel_running (end_reason 'cancel_running', 14.4)
    the run that cancelled it. One query (run_by_status): the runs of those statuses whose cause
    is missing or not a known code, at most ENDING_CHECK_LIMIT of them. Then cancellers_ahead."""
    from django.db.models import Q

    from limits.engine.results import REASONS
    from stackbone.runs.models import Run

    ended = Run.objects.filter(
        Q(status__in=[Run.Status.SKIPPED, Run.Status.REPLACED])
        | Q(status=Run.Status.CANCELLED, end_reason=CANCEL_RUNNING)
    )

    def empty(field: str) -> Q:  # NULL (no cause), or an empty text
        return Q(**{f"{field}__isnull": True}) | Q(**{field: ""})

    missing = ended.filter(
        empty("end_reason")
        | empty("end_limit")
        | (Q(status__in=[Run.Status.REPLACED, Run.Status.CANCELLED]) & empty("caused_by"))
        | ~Q(end_reason__in=REASONS)
    )
    violations = []
    for run_id, status, reason, limit, caused_by in missing.values_list(
        "id", "status", "end_reason", "end_limit", "caused_by"
    )[:ENDING_CHECK_LIMIT]:
        lacks = [
            what
            for what, wanting in (
                ("its reason", not reason),
                (f"a known reason (not {reason!r})", bool(reason) and reason not in REASONS),
                ("the limit that stopped it", not limit),
                ("the run that replaced it", status == Run.Status.REPLACED and not caused_by),
                ("the run that cancelled it", status == Run.Status.CANCELLED and not caused_by),
            )
            if wanting
        ]
        violations.append(f"run {run_id} ended {status} without {' and '.join(lacks)} recorded")
    return violations + cancellers_ahead()


CANCELLERS_PER_QUERY = 1_000


def cancellers_ahead() -> list[str]:
    """SPEC 14.4 (check n): a run that cancelled another by cancel_running waited ahead of every
    other waiting run of its key: its entry in the bound's queue (its start, '<run>:start') is in
    the front band (a position below 0: limits_cancel_running moves it there as it cancels; a
    lapsed reservation joins again at a ticket, so its lowest entry counts), so no
    run of its key that joined at its ticket was granted the freed place before it. Runs whose
    entries were purged are not judged; at most ENDING_CHECK_LIMIT violations."""
    from limits.models import QueueEntry
    from limits.runs.bounds import START_REQUEST_SUFFIX
    from stackbone.runs.models import Run

    causes = (
        Run.objects.filter(status=Run.Status.CANCELLED, end_reason=CANCEL_RUNNING, caused_by__isnull=False)
        .values_list("caused_by", "end_limit")
        .order_by()
    )
    violations: list[str] = []
    batch: dict[str, str] = {}

    def judge() -> None:
        entries = QueueEntry.objects.filter(
            request__in=[f"{run_id}{START_REQUEST_SUFFIX}" for run_id in batch], limit__name__in=set(batch.values())
        ).values_list("run_id", "limit__name", "position")
        lowest: dict[str, int] = {}
        for run_id, limit, position in entries:
            if batch.get(run_id) == limit:  # a lapsed reservation joins again at a ticket: the lowest counts
                lowest[run_id] = min(position, lowest.get(run_id, position))
        violations.extend(
            f"{batch[run_id]}: run {run_id} cancelled a run by cancel_running but waited at its ticket "
            f"(position {position}), not ahead of its key's waiting runs"
            for run_id, position in lowest.items()
            if position >= 0
        )
        batch.clear()

    for caused_by, limit in causes.iterator(chunk_size=CANCELLERS_PER_QUERY):
        if caused_by:
            batch[caused_by] = limit or ""
        if len(batch) >= CANCELLERS_PER_QUERY:
            judge()
    if batch:
        judge()
    return violations[:ENDING_CHECK_LIMIT]
