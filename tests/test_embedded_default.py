"""Issue 45, item 2: the embedded default (one machine, no database server, no broker server) is a
documented settings block a project copies: two helpers give it (docs/embedding.md, "No server"),
and the box's own settings use the same ones. tests/test_embedding.py runs a fresh project on it
with a real worker and beat.

Must never happen: the box and a project on the documented block with different SQLite options
or broker folders (one would lock where the other did not), or a connection made with them that
is not in WAL mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db.backends.sqlite3.base import DatabaseWrapper

from stackbone.plumbing.embedded import TRANSPORT, filesystem_broker, sqlite_database, sqlite_options

pytestmark = pytest.mark.one_database  # files of its own, not the suite's database


def test_sqlite_database_gives_the_options_the_box_runs_with(tmp_path: Path, django_db_blocker) -> None:
    entry = sqlite_database(tmp_path / "var" / "db.sqlite3")
    assert (tmp_path / "var").is_dir()
    assert entry == {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(tmp_path / "var" / "db.sqlite3"),
        "CONN_MAX_AGE": 0,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
    if settings.DATABASES["default"]["ENGINE"] == entry["ENGINE"]:
        assert settings.DATABASES["default"]["OPTIONS"] == sqlite_options() == entry["OPTIONS"]

    wrapper = DatabaseWrapper({**entry, "TIME_ZONE": None, "AUTOCOMMIT": True, "CONN_HEALTH_CHECKS": False}, "x")
    try:
        with django_db_blocker.unblock(), wrapper.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == "wal"
    finally:
        wrapper.close()


def test_filesystem_broker_makes_its_folders_and_names_them(tmp_path: Path) -> None:
    options = filesystem_broker(tmp_path / "broker")
    assert sorted(path.name for path in (tmp_path / "broker").iterdir()) == ["control", "out", "processed"]
    assert options == {
        "data_folder_in": str(tmp_path / "broker" / "out"),
        "data_folder_out": str(tmp_path / "broker" / "out"),
        "processed_folder": str(tmp_path / "broker" / "processed"),
        "control_folder": str(tmp_path / "broker" / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
    assert TRANSPORT == "stackbone.plumbing.broker:Transport"
    if settings.CELERY_BROKER_URL == "filesystem://":  # the box, on its embedded default
        assert settings.CELERY_BROKER_TRANSPORT == TRANSPORT
        assert filesystem_broker(Path(settings.VAR_DIR) / "broker") == settings.CELERY_BROKER_TRANSPORT_OPTIONS


def test_the_guide_gives_the_helpers_as_this_test_calls_them() -> None:
    guide = (Path(settings.BASE_DIR) / "docs" / "embedding.md").read_text()
    assert "from stackbone.plumbing.embedded import filesystem_broker, sqlite_database" in guide
    assert 'CELERY_BROKER_TRANSPORT = "stackbone.plumbing.broker:Transport"' in guide
