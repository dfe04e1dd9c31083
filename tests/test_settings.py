"""The settings contract: defaults, strict parsing, no secret defaults in production, SQLite
serializing writers."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

ROOT = settings.BASE_DIR


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"}
    }
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, "DJANGO_SETTINGS_MODULE": "studio.settings", **env},
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


# one_database (tests/conftest.py): these start subprocesses without DATABASE_URL, or that stop
# before any database; the two engine-specific tests below keep their own skips.
@pytest.mark.one_database
def test_the_box_refuses_to_start_with_debug_off_and_no_secret_key() -> None:
    result = run_python("import django; django.setup()", DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


@pytest.mark.one_database
def test_debug_off_with_a_key_starts() -> None:
    result = run_python("import django; django.setup(); print('ok')", DEBUG="false", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr


@pytest.mark.one_database
def test_a_bad_boolean_is_an_error_not_a_guess() -> None:
    result = run_python("import django; django.setup()", DEBUG="maybe")
    assert "DEBUG must be one of" in result.stderr


@pytest.mark.one_database
def test_the_defaults_are_an_embedded_database_and_broker() -> None:
    result = run_python(
        "import django; django.setup(); from django.conf import settings as s;"
        "print(s.DATABASES['default']['ENGINE']); print(s.CELERY_BROKER_URL)"
    )
    assert result.stdout.split() == ["django.db.backends.sqlite3", "filesystem://"]


@pytest.mark.django_db
@pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3", reason="SQLite only")
def test_sqlite_runs_in_wal_mode_with_immediate_transactions() -> None:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
    assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


@pytest.mark.one_database
def test_a_worker_refuses_to_start_with_a_bad_workspace(tmp_path) -> None:
    (tmp_path / "broken_ws.py").write_text(
        "from limits.config import define_workspace\n"
        "workspace = define_workspace(limits={'voice-calls': {'capacity': 0, 'max_hold': '1m'}})\n"
    )
    env = {
        **os.environ,
        "STACKBONE_WORKSPACE": "broken_ws",
        "PYTHONPATH": str(tmp_path),
        "CELERY_BROKER_URL": "memory://",
    }
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=solo", "--without-mingle"],
        env=env, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "limit 'voice-calls': capacity must be" in result.stdout + result.stderr


@pytest.mark.one_database
def test_production_settings_pass_the_deploy_check_with_no_warning(tmp_path) -> None:
    """After the deploy step's collectstatic (without it the check refuses: test_static_manifest.py)."""
    env = {"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(64), "ALLOWED_HOSTS": "limits.example.com"}
    env["STACKBONE_VAR_DIR"] = str(tmp_path)
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL"}}
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input"],
        env={**clean, **env}, capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={**clean, **env}, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only")
def test_postgresql_binds_values_on_the_client_so_long_in_lists_work() -> None:
    """Several engine and `limits verify` statements pass a limit's rows as one IN list (a lapse
    of every unconfirmed reservation, a keyed limit's stale waits, verify's reads), and a limit
    may hold 100,000 slots. With server-side binding (Django's `server_side_binding` option) each
    value is a protocol parameter and PostgreSQL refuses more than 65,535: measured faster, left
    off for this (docs/performance.md). This fails if it is turned on without chunking them."""
    from limits.models import Slot

    assert Slot.objects.filter(id__in=[f"slot_{n:032x}" for n in range(70_000)]).count() == 0
