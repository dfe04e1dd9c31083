"""The box's one clock: the database's.

Several hosts write the same rows: workers, the web servers, beat's sweep. If each stamped its
rows with its own clock, a host whose clock is off (broken NTP, a resumed VM, a laptop container)
would hand out slots and leases already expired (behind), or suspend max hold, reservations and
wait time-outs (ahead). So every time the engine and the run layer write or compare comes from one
authority that every writer already shares and serialises on: the database.

- On PostgreSQL the time is read by the statement that uses it: the engine's functions read
  `clock_timestamp()` after they take the limit's lock (limits/sql/engine.sql, `limits_clock`),
  the run layer's statements `statement_timestamp()` (`sql()`, `expression()`), and the Python
  rules that lock limits read it once per locked section (`now()`).
- On SQLite the database runs inside the one host, so its clock is the host's: `timezone.now()`.

Tests move the clock with time_machine. A test setting, `STACKBONE_CLOCK = "process"`, makes the
box take its time from the process (timezone.now(), which time_machine moves) on PostgreSQL too;
the default, and the only production value, is "database" (limits.checks warns about the other).
Worker processes started by tests run with the default.

Skew is watched, not trusted: `measure_skew()` compares this host's clock with the database's;
workers and beat do it at start and every SKEW_INTERVAL (stackbone.runs.tasks), log a warning above
SKEW_WARNING and an error above SKEW_ERROR, and keep the largest skew of each host in
ClockSkew (/healthz, /metrics, Studio's banner). With every rule on the database's clock, a skewed
host still keeps every slot, lease and wait right; what it still gets wrong is its own: Celery's
retry countdowns and its log lines (docs/operations.md, "Clocks").
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.cache import cache
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connection
from django.db.models import DateTimeField, Expression, F, Func, QuerySet, Value
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

if TYPE_CHECKING:
    from stackbone.plumbing.models import ClockSkew

logger = logging.getLogger(__name__)

DATABASE, PROCESS = "database", "process"
SKEW_WARNING = 2.0  # seconds: a host this far off is logged as a warning
# Seconds: above this an error. The run lease (30 s) less its heartbeat (10 s): the margin a host
# clock had before the box moved every rule to the database's clock, kept as the line where a
# host is badly wrong (its Celery countdowns, its logs) although no rule depends on it any more.
SKEW_ERROR = 20.0
SKEW_INTERVAL = 300.0  # seconds between two measurements by a worker or beat
BANNER_CACHE_KEY = "stackbone:clock-skew-banner"
SKEW_RECENT = timedelta(minutes=15)  # three missed measurements: the host is gone or silent
SKEW_FORGET = timedelta(days=1)


def mode() -> str:
    """Where the time comes from: "database" (PostgreSQL's clock, in production) or "process"
    (timezone.now(): SQLite, whose clock is the one host's, and tests on PostgreSQL that set
    STACKBONE_CLOCK = "process")."""
    if connection.vendor != "postgresql":
        return PROCESS
    return PROCESS if getattr(settings, "STACKBONE_CLOCK", DATABASE) == PROCESS else DATABASE


def from_database() -> bool:
    return mode() == DATABASE


def now() -> datetime:
    """The box's time, as a value: for a rule that compares or writes it in Python. On PostgreSQL
    one round trip (`SELECT clock_timestamp()`); use `sql()` or `expression()` where the
    statement itself can read it."""
    if not from_database():
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        value: datetime = cursor.fetchone()[0]
    return value


def param() -> datetime | None:
    """The `p_now` argument of the engine's functions (limits/sql/engine.sql): None, so the
    function reads the database's clock after it takes its lock; the process's time in process mode."""
    return None if from_database() else timezone.now()


def sql() -> str:
    """The box's time inside a raw statement: `statement_timestamp()` on the database's clock
    (STABLE, so an index can use a comparison with it), else a placeholder for `value()`."""
    return "statement_timestamp()" if from_database() else "%s"


def params(*values: Any) -> list[Any]:
    """The parameters a `sql()` placeholder takes: none on the database's clock, else `values`."""
    return [] if from_database() else list(values)


def expression(plus: timedelta | None = None) -> Any:
    """The box's time (+ `plus`) as an ORM expression, for update() and filter():
    Now() (statement_timestamp() on PostgreSQL) on the database's clock, else the process's time
    as a value."""
    if not from_database():
        value = timezone.now()
        return Value(value + plus if plus else value, output_field=DateTimeField())
    moment: Expression = Now()
    if plus:
        return moment + Value(plus)
    return moment


def measure_skew() -> float:
    """This host's clock minus the database's, in seconds (positive: the host is ahead), from one
    round trip, the database's reading taken as the midpoint of the host's before and after.
    0.0 where the database's clock is the host's (SQLite)."""
    if connection.vendor != "postgresql":
        return 0.0
    before = time.time()
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())")
        database = float(cursor.fetchone()[0])
    after = time.time()
    return round((before + after) / 2 - database, 3)


def host_name() -> str:
    return socket.gethostname()[:200]


def check_skew(role: str) -> float:
    """Measure this host's skew, log it when it is off, and record it (ClockSkew). Returns it."""
    from stackbone.plumbing.models import ClockSkew

    skew = measure_skew()
    size = abs(skew)
    if size > SKEW_ERROR:
        logger.error(
            "this host's clock is %+.1f s off the database's (%s on %s): above %.0f s. Every limit "
            "and lease keeps the database's time, but fix the host's clock (NTP)",
            skew,
            role,
            host_name(),
            SKEW_ERROR,
        )
    elif size > SKEW_WARNING:
        logger.warning("this host's clock is %+.1f s off the database's (%s on %s)", skew, role, host_name())
    at = now()
    ClockSkew.objects.update_or_create(host=host_name(), role=role, defaults={"skew_seconds": skew, "measured_at": at})
    ClockSkew.objects.filter(measured_at__lt=at - SKEW_FORGET).delete()
    return skew


def recent_skews() -> QuerySet[ClockSkew]:
    """The hosts' skews measured within SKEW_RECENT of the database's time, largest first."""
    from stackbone.plumbing.models import ClockSkew  # noqa: F811 - the model, at run time

    rows = ClockSkew.objects.filter(measured_at__gte=now() - SKEW_RECENT)
    return rows.order_by(Func(F("skew_seconds"), function="ABS").desc(), "host")


@register()
def check_clock_setting(app_configs: object = None, **kwargs: object) -> list[CheckMessage]:
    """STACKBONE_CLOCK is "database" in production; anything else is refused, "process" warned."""
    value = getattr(settings, "STACKBONE_CLOCK", DATABASE)
    if value not in (DATABASE, PROCESS):
        return [Error(f"STACKBONE_CLOCK must be {DATABASE!r} or {PROCESS!r}; got {value!r}", id="studio.E201")]
    if value == PROCESS and connection.vendor == "postgresql":
        hint = "Leave it unset outside tests: every host must keep the database's time."
        message = "STACKBONE_CLOCK = 'process' takes each host's own clock: for tests only"
        return [Warning(message, hint=hint, id="studio.W201")]
    return []


def watch(role: str, interval: float = SKEW_INTERVAL) -> threading.Thread:
    """Measure this host's skew now and every `interval` seconds, from a daemon thread with its
    own database connection (closed after each measurement): workers and beat call it at start
    (studio/celery.py). A measurement that cannot reach the database is skipped."""

    def loop() -> None:
        from django import setup
        from django.apps import apps
        from django.db import DatabaseError, connections

        if not apps.ready:
            setup()
        while True:
            try:
                check_skew(role)
            except DatabaseError as error:
                logger.warning("could not measure this host's clock against the database's (%s)", error)
            finally:
                connections.close_all()  # this thread's only
            time.sleep(interval)

    thread = threading.Thread(target=loop, name=f"clock-skew-{role}", daemon=True)
    thread.start()
    return thread


def skew_banner(request: HttpRequest) -> dict[str, Any]:
    """Template context (a context processor, settings.TEMPLATES): `clock_skew`, the hosts whose
    clock is more than SKEW_WARNING off the database's, for Studio's banner (base.html), as
    (host, role, skew) rows. Lazy, for signed-in users only, and read at most once a minute per
    web process (Django's cache): a page pays no query for it most of the time, and the skews
    change every 5 minutes at most."""
    if not request.user.is_authenticated:
        return {}

    def hosts() -> list[Any]:
        def read() -> list[dict[str, Any]]:
            rows = recent_skews().values("host", "role", "skew_seconds")[:20]
            return [{**row, "off": abs(row["skew_seconds"])} for row in rows if abs(row["skew_seconds"]) > SKEW_WARNING]

        found = cache.get_or_set(BANNER_CACHE_KEY, read, timeout=60)
        return list(found or [])

    return {"clock_skew": SimpleLazyObject(hosts)}


_display_offset: tuple[float, float] | None = None  # (measured at, monotonic; host minus database)
DISPLAY_OFFSET_AGE = 60.0


def display_now() -> datetime:
    """The box's time for a page's "in 9s" and "3m ago": this process's clock corrected by its
    skew, measured at most once a minute per process (one query then, none on most pages). For
    display only: no rule reads it."""
    global _display_offset
    if not from_database():
        return timezone.now()
    if _display_offset is None or time.monotonic() - _display_offset[0] > DISPLAY_OFFSET_AGE:
        _display_offset = (time.monotonic(), measure_skew())
    return timezone.now() - timedelta(seconds=_display_offset[1])
