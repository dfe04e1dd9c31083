"""The embedded default: a project on one machine with no database server and no broker server,
as the box runs by default (docs/embedding.md, "No server: SQLite and the embedded broker").

    from stackbone.plumbing.embedded import filesystem_broker, sqlite_database

    DATABASES = {"default": sqlite_database(BASE_DIR / "var" / "db.sqlite3")}
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "stackbone.plumbing.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker(BASE_DIR / "var" / "broker")

Settings-time helpers: they import nothing of Django, so a settings module can call them first.
Both make the folders they name. The box's settings (studio/settings.py) use them too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRANSPORT = "stackbone.plumbing.broker:Transport"  # kombu's filesystem transport, multi-process safe
BROKER_URL = "filesystem://"
SQLITE_TIMEOUT_SECONDS = 30


def sqlite_database(path: str | Path) -> dict[str, Any]:
    """A DATABASES entry for an SQLite file shared by the web server, the workers and beat:

    - `transaction_mode` IMMEDIATE: every transaction takes the write lock at BEGIN, so writers
      queue for it instead of failing to upgrade a read lock ("database is locked");
    - WAL (`journal_mode=WAL`, `synchronous=NORMAL`): readers run beside the one writer;
    - `timeout` 30 s: how long a writer waits for the lock;
    - CONN_MAX_AGE 0: a connection per request or task, so no process keeps a lock between them.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path), "CONN_MAX_AGE": 0, "OPTIONS": sqlite_options()}


def sqlite_options() -> dict[str, Any]:
    """The OPTIONS of sqlite_database(), for an SQLite entry made otherwise (dj_database_url)."""
    return {
        "transaction_mode": "IMMEDIATE",
        "timeout": SQLITE_TIMEOUT_SECONDS,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }


def filesystem_broker(folder: str | Path) -> dict[str, Any]:
    """CELERY_BROKER_TRANSPORT_OPTIONS for the embedded broker (CELERY_BROKER_URL "filesystem://",
    CELERY_BROKER_TRANSPORT TRANSPORT) under `folder`: the messages in `out/` (one file each, moved
    to `processed/` as a worker claims it, and deleted), the workers' remote control in `control/`.
    Every process of the project (web, workers, beat, `stackbone`) must name the same folder."""
    folder = Path(folder)
    for sub in ("out", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder / "out"),
        "data_folder_out": str(folder / "out"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
