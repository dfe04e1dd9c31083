"""Test helpers for a project's own workflows: a pytest plugin that ships with the package.

pytest loads it wherever stackbone-limits is installed (the `pytest11` entry point in
pyproject.toml); nothing happens until a test asks for one of its fixtures, and loading it imports
neither Django nor Celery. The fixtures need pytest-django (`pip install
stackbone-limits[testing]`); docs/testing-your-workflows.md shows each in use.

    stackbone_runs       start runs that move in the test's process as they are started and woken
                         (Celery eager), read them back, say why one waits
    stackbone_no_worker  runs move only when the test calls stackbone_runs.advance(run), as if no
                         worker were up
    stackbone_slots      hold slots across a test's steps, as other work would, and release them
    stackbone_clock      the box's clock, moved by the test, with the sweep pass beat would run

A start, a release and a sweep each run inside pytest-django's
`django_capture_on_commit_callbacks(execute=True)`: what they send after commit (a run's dispatch,
the wake of the runs a freed slot went to) happens before they return, in a `db` test that never
commits as in a `transactional_db` one.

The box's own tests use them too (tests/test_testing_plugin.py holds each example of the doc).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from limits.engine.results import Reason, SweepReport
    from stackbone.runs.models import Run

HOLDER_PREFIX = "test-holder-"  # the run id of a slot a test holds (stackbone_slots.hold)
NO_ROOM = "{limit}{key} has no room for another slot now ({reason}): stackbone_slots.hold never waits"
NOT_WAITING = "run {run_id} ({status}) does not wait for {limit}: it waits for {waits}"
OTHER_REASON = "run {run_id} waits for {limit} because {actual!r} ({text}), not {expected!r}"
NEEDS_TIME_MACHINE = "stackbone_clock needs time-machine: pip install stackbone-limits[testing]"

type Capture = Callable[..., AbstractContextManager[Any]]


# --- Celery: eager, or nobody ------------------------------------------------------------------


@contextmanager
def use_celery(*, eager: bool, app: Any = None) -> Iterator[None]:
    """Within the block, the project's Celery app (`app`, or the current one) runs each task in
    the caller as it is sent (`eager`), or sends it to an in-process memory broker that no worker
    reads (not `eager`: runs move only when the test advances them). Restored after, environment
    included."""
    from celery import current_app

    app = app or current_app
    keys = ("task_always_eager", "task_eager_propagates", "broker_url", "broker_transport")
    # Celery prefers CELERY_BROKER_URL from the environment over its configuration, and reads the
    # Django-namespaced key (CELERY_...) of a setting before the plain one: set and restore both.
    saved = {name: app.conf.get(name) for key in keys for name in (key, f"CELERY_{key.upper()}")}
    saved_env = os.environ.pop("CELERY_BROKER_URL", None)
    try:
        _configure(app, {"task_always_eager": eager, "task_eager_propagates": True, "broker_url": "memory://"})
        _configure(app, {"broker_transport": None})
        yield
    finally:
        for name, value in saved.items():
            app.conf[name] = value
        if saved_env is not None:
            os.environ["CELERY_BROKER_URL"] = saved_env
        _reset_pools(app)


def _configure(app: Any, values: dict[str, object]) -> None:
    for key, value in values.items():
        app.conf[key] = value
        app.conf[f"CELERY_{key.upper()}"] = value
    _reset_pools(app)


def _reset_pools(app: Any) -> None:
    from kombu import pools

    pools.reset()
    app._pool = None  # Celery's private pool caches: the broker changed
    app.amqp._producer_pool = None


# --- runs --------------------------------------------------------------------------------------


def _run_id(run: Run | str) -> str:
    return run if isinstance(run, str) else run.id


class Runs:
    """Start runs and read them back (stackbone_runs)."""

    def __init__(self, capture: Capture) -> None:
        self._capture = capture

    def start(
        self, workflow: Any, input: Any = None, *, key: str | None = None, limits: list[str] | None = None
    ) -> Run:
        """Start a run (limits.runs.start_run) and let it move as far as it can now: with
        stackbone_runs alone it runs until it completes, fails, or waits (for a slot, its bounds);
        with stackbone_no_worker it stays pending. Returns the run as it is then."""
        from limits.runs import start_run

        with self._capture(execute=True):
            run = start_run(workflow, input, concurrency_key=key, limits=limits)
        return self.get(run)

    def get(self, run: Run | str) -> Run:
        """The run as the database has it now (a fresh object: no refresh_from_db to remember)."""
        from stackbone.runs.models import Run

        return Run.objects.get(id=_run_id(run))

    def status(self, run: Run | str) -> str:
        return str(self.get(run).status)

    def advance(self, run: Run | str) -> Run:
        """Move a run as one worker's task would (stackbone.runs.runtime.advance): replay its body
        until it completes, fails or waits. For stackbone_no_worker; with eager runs it has moved
        already."""
        from stackbone.runs import runtime

        with self._capture(execute=True):
            runtime.advance(_run_id(run))
        return self.get(run)

    def cancel(self, run: Run | str) -> Run:
        from limits.runs import cancel_run

        with self._capture(execute=True):
            cancel_run(_run_id(run))
        return self.get(run)

    def output(self, run: Run | str) -> Any:
        return self.get(run).output

    def why_waiting(self, run: Run | str) -> dict[str, Reason]:
        """{limit name: why the run is not granted its slot now} for every queue it waits in
        (SPEC 6.5: the Reason's `code` is one of limits.engine.results.REASONS, `text` the
        sentence Studio shows, `key` the key whose pool is full)."""
        from limits.models import QueueEntry
        from limits.services import why_waiting

        entries = list(
            QueueEntry.objects.filter(run_id=_run_id(run), state=QueueEntry.State.WAITING)
            .select_related("limit")
            .order_by("enqueued_at", "id")
        )
        reasons = why_waiting(entries)
        return {entry.limit.name: reasons[entry.id] for entry in entries if entry.id in reasons}

    def assert_waiting(self, run: Run | str, limit: str, because: str | None = None) -> Reason:
        """Assert that the run waits in `limit`'s queue, and (`because`, a reason code such as
        "key_pool_full", "limit_full", "limit_paused", "fair_turn") why; returns the reason."""
        found = self.why_waiting(run)
        if limit not in found:
            waits = ", ".join(found) or "nothing"
            raise AssertionError(
                NOT_WAITING.format(run_id=_run_id(run), status=self.status(run), limit=limit, waits=waits)
            )
        reason = found[limit]
        if because is not None and reason.code != because:
            raise AssertionError(
                OTHER_REASON.format(
                    run_id=_run_id(run), limit=limit, actual=reason.code, text=reason.text, expected=because
                )
            )
        return reason


@pytest.fixture
def stackbone_runs(db: None, django_capture_on_commit_callbacks: Capture) -> Iterator[Runs]:
    """Runs move in the test's process as they are started and woken: Celery runs each task in
    the caller (eager) for the test, and each start, release and sweep through these fixtures
    executes what it sends after commit."""
    with use_celery(eager=True):
        yield Runs(django_capture_on_commit_callbacks)


@pytest.fixture
def stackbone_no_worker(stackbone_runs: Runs) -> Iterator[Runs]:
    """As if no worker were up: tasks go to an in-process memory broker nobody reads, so a run
    moves only when the test calls `advance(run)` (the same Runs as stackbone_runs)."""
    with use_celery(eager=False):
        yield stackbone_runs


# --- slots ---------------------------------------------------------------------------------------


class Slots:
    """Slots held across a test's steps (stackbone_slots)."""

    def __init__(self, capture: Capture) -> None:
        self._capture = capture
        self._holders = itertools.count(1)

    def hold(self, limit: str, *, key: str | None = None, label: str | None = None) -> str:
        """Take a slot of `limit` (of `key`'s pool) now, as other work would hold it, until
        `release(slot_id)`; returns the slot id. It never waits: a limit, or a key's pool, with no
        room is an AssertionError saying why. Fill a pool with it, then start the run under test."""
        from limits import services

        holder = f"{HOLDER_PREFIX}{next(self._holders)}"
        with self._capture(execute=True):
            outcome = services.acquire_group([limit], run_id=holder, label=label, key=key, timeout=1)
            if outcome.state != "busy":
                reason = self._reason(holder)
                services.end_run(holder)  # leave the queue it joined: a held slot never waits
                where = f" (key {key!r})" if key else ""
                raise AssertionError(NO_ROOM.format(limit=limit, key=where, reason=reason))
        return str(outcome.slots[0][1] if outcome.slots else outcome.slot_id)

    def _reason(self, holder: str) -> str:
        from limits.models import QueueEntry
        from limits.services import why_waiting

        entries = list(QueueEntry.objects.filter(run_id=holder, state=QueueEntry.State.WAITING))
        reasons = why_waiting(entries)
        return "; ".join(reason.text for reason in reasons.values()) or "it would wait"

    def release(self, slot_id: str) -> bool:
        """Give the slot back (limits.services.release); the runs it goes to move on at once with
        stackbone_runs. True when it freed a busy or reserved slot."""
        from limits import services

        with self._capture(execute=True):
            return services.release(slot_id)

    def in_use(self, limit: str, *, key: str | None = None) -> int:
        """Busy and reserved slots of `limit` (of `key`'s pool when given)."""
        from limits.models import LIVE_SLOT_STATES, Slot

        slots = Slot.objects.filter(limit__name=limit, state__in=LIVE_SLOT_STATES)
        return slots.filter(key=key).count() if key is not None else slots.count()

    def waiting(self, limit: str) -> list[str]:
        """The run ids waiting in `limit`'s queue, first come first."""
        from limits.models import QueueEntry

        entries = QueueEntry.objects.filter(limit__name=limit, state=QueueEntry.State.WAITING)
        return list(entries.order_by("position").values_list("run_id", flat=True))


@pytest.fixture
def stackbone_slots(db: None, django_capture_on_commit_callbacks: Capture) -> Slots:
    """Hold and release slots across a test's steps (a per-key pool of 2: hold two of "acme",
    start a run of "acme", it waits; release one, it moves)."""
    return Slots(django_capture_on_commit_callbacks)


# --- the clock -----------------------------------------------------------------------------------


class Clock:
    """The box's clock, moved by the test (stackbone_clock)."""

    def __init__(self, traveller: Any, capture: Capture) -> None:
        self._traveller = traveller
        self._capture = capture

    def now(self) -> dt.datetime:
        from django.utils import timezone

        return timezone.now()

    def advance(self, *, sweep: bool = True, **delta: float) -> SweepReport | None:
        """Move the clock forward (`minutes=5`, `seconds=90`, any timedelta argument), then, as
        beat would have by then, run one pass of the sweep (max holds past, reservations lapsed,
        waits timed out, and the grants they free) and the run recovery, and let woken runs move.
        Returns the sweep's report (None with `sweep=False`)."""
        self._traveller.shift(dt.timedelta(**delta))
        return self.sweep() if sweep else None

    def sweep(self) -> SweepReport:
        """One pass of the sweep and the run recovery, now (what beat runs every 15 s)."""
        from limits import services
        from stackbone.runs import runtime

        with self._capture(execute=True):
            report = services.sweep()
            runtime.recover()
        return report


@pytest.fixture
def stackbone_clock(db: None, settings: Any, django_capture_on_commit_callbacks: Capture) -> Iterator[Clock]:
    """The box's clock stands still at the test's start and moves only by `advance(...)`: max
    holds, reservations, wait time-outs and run leases all read it (STACKBONE_CLOCK = "process"
    for the test, on PostgreSQL too)."""
    try:
        import time_machine
    except ImportError:  # pragma: no cover - the testing extra brings it
        pytest.fail(NEEDS_TIME_MACHINE)
    from django.utils import timezone

    settings.STACKBONE_CLOCK = "process"
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        yield Clock(traveller, django_capture_on_commit_callbacks)
