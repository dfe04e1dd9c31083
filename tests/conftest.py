from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import time_machine
from django.conf import settings
from django.db import connection

from limits.signals import runs_woken

START = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)


class Clock:
    """The test's clock: services read it through django.utils.timezone.now()."""

    def __init__(self, traveller: time_machine.Traveller) -> None:
        self._traveller = traveller

    def advance(self, **delta: float) -> None:
        self._traveller.shift(dt.timedelta(**delta))

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)


@pytest.fixture
def clock() -> Iterator[Clock]:
    with time_machine.travel(START, tick=False) as traveller:
        yield Clock(traveller)


@pytest.fixture
def woken() -> Iterator[list[str]]:
    """Run ids announced by runs_woken. Announcements go out on commit: call the service inside
    `django_capture_on_commit_callbacks(execute=True)` to see them in a test transaction."""
    seen: list[str] = []

    def receiver(sender: object, run_ids: list[str], **kwargs: object) -> None:
        seen.extend(run_ids)

    runs_woken.connect(receiver, weak=False, dispatch_uid="tests-woken")
    try:
        yield seen
    finally:
        runs_woken.disconnect(dispatch_uid="tests-woken")


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


requires_postgres = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
    reason="needs PostgreSQL (set DATABASE_URL=postgres://...)",
)

# Folders whose every test is `one_database`: a real Chromium renders and clicks what the Django
# test client already proves on both databases (tests/views, tests/security).
ONE_DATABASE_FOLDERS = (Path(__file__).resolve().parent / "browser",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CI runs the suite twice, on SQLite and on PostgreSQL. A test marked `one_database` proves
    nothing that depends on the database (a browser's layout, the scripts, a subprocess that keeps
    its own embedded SQLite whatever DATABASE_URL says, the settings, the layers): it runs on
    SQLite only, and is skipped, saying so, on PostgreSQL (docs/testing.md, "Skips")."""
    for item in items:
        if any(item.path.is_relative_to(folder) for folder in ONE_DATABASE_FOLDERS):
            item.add_marker(pytest.mark.one_database)
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        return
    skip = pytest.mark.skip(reason="one_database: nothing database-specific, run on SQLite (docs/testing.md)")
    for item in items:
        if item.get_closest_marker("one_database"):
            item.add_marker(skip)


def use_broker(url: str, *, eager: bool) -> None:
    """Point this process's Celery app at a broker (its pools are rebuilt on next use)."""
    from kombu import pools

    from studio.celery import app

    # Celery prefers the CELERY_BROKER_URL environment variable over its configuration; the
    # settings have read it already (settings.CELERY_BROKER_URL), so let the configuration rule.
    os.environ.pop("CELERY_BROKER_URL", None)

    transport = getattr(settings, "CELERY_BROKER_TRANSPORT", None) if url == "filesystem://" else None
    for key, value in (("task_always_eager", eager), ("broker_url", url), ("broker_transport", transport)):
        # Celery 5.6 reads the Django-namespaced key (CELERY_...) before the plain one: set both.
        app.conf[key] = value
        app.conf[f"CELERY_{key.upper()}"] = value
    pools.reset()
    app._pool = None  # type: ignore[attr-defined]  # celery's private pool caches, not in the stubs
    app.amqp._producer_pool = None  # type: ignore[attr-defined]  # the same


@pytest.fixture(autouse=True)
def eager_celery() -> Iterator[None]:
    """Tasks run in the test's process as they are sent (after commit) unless a test asks for
    `no_worker` or a real worker."""
    use_broker("memory://", eager=True)
    yield
    use_broker("memory://", eager=True)


@pytest.fixture(autouse=True)
def no_skew_banner_read() -> None:
    """Studio's clock-skew banner reads its rows at most once a minute per process (Django's
    cache): a test whose 60 s ran out between two requests would count one query more on one of
    them. Each test starts with the banner's answer cached as "no host off" for its whole length;
    the tests of the banner itself drop it (tests/insights/test_clock_skew.py)."""
    from django.core.cache import cache

    from stackbone.plumbing.clock import BANNER_CACHE_KEY

    cache.set(BANNER_CACHE_KEY, [], timeout=None)


@pytest.fixture
def no_worker() -> None:
    """Tasks go to an in-process memory broker that nobody consumes: runs move only when the
    test calls stackbone.runs.runtime.advance(run_id), as if every worker were down."""
    use_broker("memory://", eager=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's temporary state folder (studio/settings.py: a test run's VAR_DIR), and on
    Redis the run's keys, once the test databases are gone."""
    var_dir = Path(settings.VAR_DIR)
    if var_dir.name.startswith("stackbone-test-") and var_dir.parent == Path(tempfile.gettempdir()):
        shutil.rmtree(var_dir, ignore_errors=True)
    prefix = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}).get("global_keyprefix")
    if prefix:
        import redis

        with contextlib.suppress(redis.RedisError):  # best effort: a leftover key does no harm
            client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
