"""Checks in the database's time, for workers whose clock is off (the clock-skew finding).

A worker 10 minutes behind stamped its grants and its run leases in the past: the next sweep took
the slots back while their steps ran, and recovery ran steps again while they still ran. A worker
10 minutes ahead stamped them in the future: slots outlived their max hold, waits their timeout,
grants came after the timeout, and the limit's `last_event_at` (which never steps back) carried
its future to every other host's writes. The rows cannot show any of it: they carry the skewed
stamps. So the checks here judge by the database's own clock, read by the database itself:

- the probe (`install_probe`): a trigger on the slot and queue-entry tables writes, for every
  insert and every change of state, the row, its new state and `clock_timestamp()`; another on
  the sweep's state row writes the end of every sweep pass and how long it took (a sweep message
  that found a pass under 5 s old does nothing, and writes nothing). It is the tests' instrument,
  never the box's: the pytest test installs it for its run, the chaos run on its own database;
- the side files (tests/chaos/records.py): when each guarded step really ran, in the machine's
  real time (the database's too: PostgreSQL runs on the same machine), even in a skewed worker.

The checks (each a pure function of rows, probe lives and side files; tests/chaos/test_checks.py
breaks each on purpose):

- `stamp_problems`: a slot's granted_at and freed_at, a queue entry's enqueued_at and
  finished_at, are the database's time of that change (1 s of slack): no host's clock stamps them;
- `slot_problems`: no slot alive past its max hold + 15 s while a sweep pass began after its
  expiry and left it (a sweep every 15 s: "within one sweep"; a slot reserved for a woken run is
  held to its reservation until the run confirms it, then to its max hold); none taken back by
  max hold, and no reservation lapsed, before its time;
- `wait_problems`: no wait outlived its timeout + 15 s the same way; none granted after its
  timeout, none timed out before it;
- `step_overlap_problems`: no two executions of one step of one run at once;
- `discard_problems`: no worker discarded a message as expired before the expiry it carried (a
  worker ahead judged beat's `expires` by its own clock and dropped every sweep and recovery).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

PROBE_TABLE = "chaos_clock_probe"
PROBED = ("limits_slot", "limits_queueentry")
SWEEP_STATE = "limits_sweepstate"
LIVE_SLOT: tuple[str, ...] = ("reserved", "busy")
WAITING: tuple[str, ...] = ("waiting",)
SLACK = 15.0  # seconds: one sweep period (beat sends one every 15 s)
MARGIN = 1.0  # seconds: a reading of the clock a statement or two apart

_PROBE_SQL = f"""
CREATE TABLE IF NOT EXISTS {PROBE_TABLE} (
    id bigserial PRIMARY KEY,
    tbl text NOT NULL,
    row_id text NOT NULL,
    state text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    request text
);
CREATE OR REPLACE FUNCTION {PROBE_TABLE}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state OR OLD.request IS DISTINCT FROM NEW.request THEN
        -- on PostgreSQL the tables are partitioned (limits/0034): a partition's name stands for
        -- its table, and a row that changes state between partitions fires the INSERT here; a
        -- row of another request is another wait (SPEC 14.3: a replacement takes a row's place)
        INSERT INTO {PROBE_TABLE} (tbl, row_id, state, request)
        VALUES (regexp_replace(TG_TABLE_NAME, '_(live|history)$', ''), NEW.id::text, NEW.state, NEW.request);
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION {PROBE_TABLE}_pass() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.last_run_at IS DISTINCT FROM NEW.last_run_at THEN
        INSERT INTO {PROBE_TABLE} (tbl, row_id, state)
        VALUES (TG_TABLE_NAME, NEW.id::text, coalesce(NEW.last_duration_ms, 0)::text);
    END IF;
    RETURN NULL;
END
$$;
""" + "".join(
    f"DROP TRIGGER IF EXISTS {PROBE_TABLE} ON {table};"
    f"CREATE TRIGGER {PROBE_TABLE} AFTER INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}();"
    for table, function in [*((table, PROBE_TABLE) for table in PROBED), (SWEEP_STATE, f"{PROBE_TABLE}_pass")]
)

_DROP_SQL = "".join(f"DROP TRIGGER IF EXISTS {PROBE_TABLE} ON {table};" for table in (*PROBED, SWEEP_STATE)) + (
    f"DROP FUNCTION IF EXISTS {PROBE_TABLE}(); DROP FUNCTION IF EXISTS {PROBE_TABLE}_pass();"
    f"DROP TABLE IF EXISTS {PROBE_TABLE};"
)


def install_probe(cursor: Any) -> None:
    """Start writing every slot's and queue entry's changes of state with the database's time."""
    cursor.execute(_PROBE_SQL)


def drop_probe(cursor: Any) -> None:
    cursor.execute(_DROP_SQL)


@dataclass
class Life:
    """One row's states in the database's time, from the probe: (state, at) in order, the first
    the state it was inserted with (or took when the row became another request's: SPEC 14.3's
    replacement turns the oldest replaced wait's row into the new one's, and the new one's row,
    if it had joined already, into the history of the replaced wait: each starts a new life)."""

    states: list[tuple[str, float]]
    request: str | None = None

    @property
    def born(self) -> float:
        return self.states[0][1]

    def left(self, live: tuple[str, ...]) -> tuple[str, float] | None:
        """The first state outside `live`, and when: how the row stopped being live."""
        return next(((state, at) for state, at in self.states if state not in live), None)


@dataclass
class Probed:
    """What the probe saw, in the database's time."""

    slots: dict[str, Life]
    entries: dict[str, Life]
    passes: list[tuple[float, float]]  # (began, ended) of every sweep pass
    now: float


def read_probe(cursor: Any) -> Probed:
    """The probe's lives of slots and of queue entries, the sweep passes, the database's time now."""
    cursor.execute(f"SELECT tbl, row_id, state, extract(epoch FROM at), request FROM {PROBE_TABLE} ORDER BY at, id")
    lives: dict[str, dict[str, Life]] = {table: {} for table in PROBED}
    passes = []
    for table, row_id, state, at, request in cursor.fetchall():
        if table == SWEEP_STATE:
            passes.append((float(at) - float(state) / 1000, float(at)))
            continue
        life = lives[table].get(row_id)
        if life is None or (request is not None and life.request is not None and request != life.request):
            life = lives[table][row_id] = Life([], request)  # a new row, or the row of another wait
        life.request = request if request is not None else life.request
        life.states.append((state, float(at)))
    cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
    (now,) = cursor.fetchone()
    return Probed(lives["limits_slot"], lives["limits_queueentry"], passes, float(now))


def slot_rows() -> list[dict[str, Any]]:
    from limits.models import Slot

    fields = ("id", "limit__name", "limit__kind", "run_id", "state", "granted_at", "expires_at", "reserved_until")
    return list(Slot.objects.values(*fields, "freed_at"))


def entry_rows() -> list[dict[str, Any]]:
    from limits.models import QueueEntry

    fields = ("id", "limit__name", "run_id", "request", "state", "timeout_ms", "enqueued_at", "finished_at")
    return [{**row, "id": str(row["id"])} for row in QueueEntry.objects.values(*fields)]


def _epoch(value: dt.datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _swept_after(sweeps: list[tuple[float, float]], due: float, until: float) -> bool:
    """A sweep pass began after `due` (+ margin) and ended before `until` (- margin)."""
    return any(began >= due + MARGIN and ended + MARGIN <= until for began, ended in sweeps)


def _fmt(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def stamp_problems(
    slots: list[dict[str, Any]],
    slot_lives: dict[str, Life],
    entries: list[dict[str, Any]],
    entry_lives: dict[str, Life],
) -> tuple[float, list[str]]:
    """The largest gap between a row's own stamp and the database's time of that change, and the
    stamps more than MARGIN off: granted_at / enqueued_at against the insert, freed_at /
    finished_at against the change that ended the row's live (waiting) state."""
    worst, problems = 0.0, []
    checks = [(row, slot_lives, "granted_at", "freed_at", LIVE_SLOT, "slot") for row in slots]
    checks += [(row, entry_lives, "enqueued_at", "finished_at", WAITING, "wait") for row in entries]
    for row, lives, born_field, end_field, live, what in checks:
        life = lives.get(str(row["id"]))
        if life is None:
            continue
        pairs = [(born_field, _epoch(row[born_field]), life.born)]
        if what == "wait" and life.states[0][0] == "replaced":
            pairs = []  # SPEC 14.3: the history of a replaced wait, whose life was another row's
        left = life.left(live)
        if left is not None and row[end_field] is not None:
            pairs.append((end_field, _epoch(row[end_field]), left[1]))
        for name, stamp, database in pairs:
            assert stamp is not None
            off = stamp - database
            worst = max(worst, abs(off))
            if abs(off) > MARGIN:
                problems.append(
                    f"{what} {row['id']} of {row['limit__name']} (run {row['run_id']}): {name} is {off:+.1f} s off "
                    f"the database's time of that change ({_fmt(database)}): stamped by a host's clock"
                )
    return round(worst, 3), problems


def slot_problems(
    slots: list[dict[str, Any]], lives: dict[str, Life], sweeps: list[tuple[float, float]], now: float
) -> tuple[float, list[str]]:
    """Max hold in the database's time: the most seconds a slot stayed live past its due time
    (figure), and the problems: a slot live past its due time + SLACK although a sweep pass began
    after that and ended before it was freed; a slot taken back by max hold (expired) or a
    reservation lapsed more than MARGIN before its time.

    Its due time: born + max hold for a slot granted busy; a slot reserved for a woken run is the
    sweep's only at born + its reservation (it lapses) until the run confirms it, and once busy at
    max(born + max hold, confirmed) (the sweep takes back busy slots past expiry). A workflow's
    own bound has no max hold (SPEC 11.4). The max hold and the reservation are the ones in force
    at the grant: expires_at and reserved_until - granted_at, stamped by one statement whatever
    its clock."""
    worst, problems = 0.0, []
    for row in slots:
        life = lives.get(str(row["id"]))
        if life is None:
            continue
        where = f"slot {row['id']} of {row['limit__name']} (run {row['run_id']})"
        max_hold = (row["expires_at"] - row["granted_at"]).total_seconds()
        reservation = (row["reserved_until"] - row["granted_at"]).total_seconds() if row["reserved_until"] else None
        busy_at = next((at for state, at in life.states if state == "busy"), None)
        if busy_at is not None:
            due, bound = max(life.born + max_hold, busy_at), f"max hold {max_hold:g} s"
            if busy_at > life.born:
                bound += f", confirmed after {busy_at - life.born:.1f} s"
        elif reservation is not None:
            due, bound = life.born + reservation, f"reservation {reservation:g} s, never confirmed"
        else:
            due, bound = life.born + max_hold, f"max hold {max_hold:g} s"
        left = life.left(LIVE_SLOT)
        until = left[1] if left else now
        if row.get("limit__kind") != "workflow":
            worst = max(worst, until - due)
            if until > due + SLACK and _swept_after(sweeps, due, until):
                problems.append(
                    f"{where} live {until - life.born:.1f} s from {_fmt(life.born)}"
                    f"{'' if left else ' (still)'}: {bound}, and a sweep pass after it was due left it"
                )
            if left and left[0] == "expired" and left[1] < life.born + max_hold - MARGIN:
                problems.append(
                    f"{where} taken back by max hold after {left[1] - life.born:.1f} s: its max hold is {max_hold:g} s"
                )
        if left and left[0] == "lapsed" and reservation is not None and left[1] < life.born + reservation - MARGIN:
            problems.append(
                f"{where}: reservation lapsed after {left[1] - life.born:.1f} s: it was for {reservation:g} s"
            )
    return round(worst, 2), problems


def wait_problems(
    entries: list[dict[str, Any]], lives: dict[str, Life], sweeps: list[tuple[float, float]], now: float
) -> tuple[float, list[str]]:
    """Wait timeouts in the database's time. A wait's deadline is its first entry's insert +
    its timeout (a lapsed reservation puts the run back in the queue with its original deadline).
    The figure: the most seconds a wait lasted past its deadline; the problems: a wait live past
    max(entered, deadline) + SLACK although a sweep pass began after that and ended before it
    left; a grant more than MARGIN after the deadline; a time-out more than MARGIN before it."""
    first: dict[str, float] = {}
    for row in entries:
        life = lives.get(row["id"])
        if life is not None:
            first[row["request"]] = min(first.get(row["request"], life.born), life.born)
    worst, problems = 0.0, []
    for row in entries:
        life = lives.get(row["id"])
        if life is None:
            continue
        where = f"wait of run {row['run_id']} on {row['limit__name']}"
        timeout = row["timeout_ms"] / 1000
        deadline = first[row["request"]] + timeout
        due = max(life.born, deadline)
        left = life.left(WAITING)
        until = left[1] if left else now
        worst = max(worst, until - due)
        if until > due + SLACK and _swept_after(sweeps, due, until):
            problems.append(
                f"{where} lasted {until - life.born:.1f} s{'' if left else ' (still waiting)'}: "
                f"timeout {timeout:g} s, and a sweep pass after its deadline left it"
            )
        if left and left[0] == "granted" and left[1] > deadline + MARGIN:
            problems.append(f"{where} granted {left[1] - deadline:.1f} s after its timeout ({timeout:g} s)")
        if left and left[0] == "timed_out" and left[1] < deadline - MARGIN:
            problems.append(f"{where} timed out after {left[1] - first[row['request']]:.1f} s: timeout {timeout:g} s")
    return round(worst, 2), problems


def step_overlap_problems(executions: list[dict[str, Any]], tolerance: float) -> list[str]:
    """No two executions of one step of one run (run id, call number) at once. Each execution is
    {"run_id", "seq", "t", "end", ...} (end: its real end, or its last possible moment)."""
    by_step: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for e in executions:
        by_step.setdefault((e["run_id"], e.get("seq")), []).append(e)
    problems = []
    for (run_id, seq), runs in sorted(by_step.items(), key=lambda item: str(item[0])):
        runs.sort(key=lambda e: e["t"])
        for i, earlier in enumerate(runs):
            for later in runs[i + 1 :]:
                overlap = min(earlier["end"], later["end"]) - later["t"]
                if overlap > tolerance:
                    problems.append(
                        f"two executions of step #{seq} of {run_id} at once for {overlap:.1f} s from {_fmt(later['t'])}"
                        f" (pids {earlier.get('pid')} and {later.get('pid')}, clocks {earlier.get('skew', 0):+g} s"
                        f" and {later.get('skew', 0):+g} s)"
                    )
    return problems


def discard_problems(records: Any) -> list[str]:
    """Messages discarded as expired before the expiry they carried, by the real clock: a worker
    judged them by a clock that is ahead (Celery's `expires`). One line per worker process and
    task, with how many and the earliest."""
    early: dict[tuple[int, str, float], list[float]] = {}
    for event in records.revoked:
        if not event.get("expired") or not event.get("expires"):
            continue
        expires = dt.datetime.fromisoformat(event["expires"]).timestamp()
        if event["t"] < expires - MARGIN:
            early.setdefault((event["pid"], event["task"], event.get("skew", 0)), []).append(expires - event["t"])
    return [
        f"{len(ahead)} {task} message(s) discarded as expired up to {max(ahead):.0f} s before their expiry"
        f" (worker pid {pid}, clock {skew:+g} s)"
        for (pid, task, skew), ahead in sorted(early.items())
    ]


def clock_figures(records: Any, executions: list[dict[str, Any]], tolerance: float) -> tuple[dict[str, Any], list[str]]:
    """Every check of this module over the database of the current connection (with the probe
    installed before the first slot) and the side files: the figures and the problems."""
    from django.db import connection

    with connection.cursor() as cursor:
        probed = read_probe(cursor)
    slots, entries = slot_rows(), entry_rows()
    offset, stamps = stamp_problems(slots, probed.slots, entries, probed.entries)
    past_hold, holds = slot_problems(slots, probed.slots, probed.passes, probed.now)
    past_timeout, waits = wait_problems(entries, probed.entries, probed.passes, probed.now)
    overlaps = step_overlap_problems(executions, tolerance)
    discards = discard_problems(records)
    figures = {
        "clock_probed": f"{len(probed.slots)} slots, {len(probed.entries)} waits, {len(probed.passes)} sweep passes",
        "clock_largest_stamp_offset_s": offset,
        "clock_longest_past_max_hold_s": past_hold,
        "clock_longest_past_timeout_s": past_timeout,
        "clock_steps_run_twice_at_once": len(overlaps),
        "clock_messages_discarded_early": sum(int(line.split()[0]) for line in discards),
    }
    return figures, overlaps + holds + waits + discards + stamps  # the stamps' consequences first


@contextmanager
def first_advance_on(queue: str) -> Iterator[list[Any]]:
    """Runs started inside this block have their first advance sent to `queue` (a queue only
    one worker consumes), so the test chooses which worker grants their slot and runs their step;
    later advances (wakes, recovery) go where the box sends them. Yields the advances sent."""
    from celery import current_app

    task = current_app.tasks["studio.tasks.advance_run"]
    original = task.apply_async
    sent: list[Any] = []

    def apply_async(args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        sent.append(args)
        return original(args, kwargs, **{**options, "queue": queue})

    task.apply_async = apply_async  # type: ignore[method-assign,assignment]  # this process's dispatch only
    try:
        yield sent
    finally:
        del task.apply_async
