"""A manifest static files storage (DEBUG off) without its manifest (collectstatic not run, or run
with DEBUG on) answers 500 on every page: the system check refuses it (check --deploy, migrate),
a worker says so as it starts, and /healthz answers 503 naming it."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.core.checks.registry import registry
from django.core.files.storage import storages

from studio import checks

# one_database (tests/conftest.py): static files; the subprocesses drop DATABASE_URL.
pytestmark = pytest.mark.one_database

MANIFEST_STORAGE = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}


@pytest.fixture
def static_root(settings, tmp_path) -> Path:
    """The production storage over an empty STATIC_ROOT (nothing collected)."""
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = MANIFEST_STORAGE
    return tmp_path


def write_manifest(root: Path) -> None:
    (root / "staticfiles.json").write_text(json.dumps({"paths": {"x.css": "x.0123.css"}, "version": "1.1"}))


def static_errors() -> list[str]:
    assert checks.check_static_files in registry.get_checks()  # run by check, migrate, runserver ...
    return [f"{error.id}: {error.msg} / {error.hint}" for error in checks.check_static_files()]


def test_a_manifest_storage_without_its_manifest_is_a_check_error(static_root) -> None:
    (error,) = static_errors()
    assert "The static files manifest (staticfiles.json) is missing" in error
    assert "collectstatic --no-input` with the production settings (DEBUG off)" in error
    assert f"it writes staticfiles.json into STATIC_ROOT ({static_root})" in error
    write_manifest(static_root)
    assert static_errors() == []


def test_a_manifest_that_cannot_be_read_is_a_check_error(static_root) -> None:
    (static_root / "staticfiles.json").write_text("{not json")
    (error,) = static_errors()
    assert "The static files manifest cannot be read (Couldn't load manifest 'staticfiles.json'" in error


def test_the_development_storage_needs_no_manifest() -> None:
    assert "Manifest" not in settings.STORAGES["staticfiles"]["BACKEND"]
    assert static_errors() == []


@pytest.mark.django_db
def test_healthz_is_503_naming_the_missing_manifest_until_collected_and_restarted(
    client, settings, static_root
) -> None:
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["status"] == "down"
    assert response.json()["static"] == f"error: {checks.NO_MANIFEST.format(name='staticfiles.json')}"
    assert str(static_root) not in response.content.decode()  # no server path on a public page

    write_manifest(static_root)  # collectstatic ran, but this process read no manifest at its start
    response = client.get("/healthz")
    assert (response.status_code, response.json()["static"]) == (503, f"error: {checks.NOT_LOADED}")

    settings.STORAGES = {**MANIFEST_STORAGE}  # a restart: the storage reads the manifest again
    assert "staticfiles" not in storages._storages  # type: ignore[attr-defined]  # Django's cache
    response = client.get("/healthz")
    assert (response.status_code, response.json()["static"]) == (200, "ok")


# --- the production settings in a subprocess ------------------------------------------------------


def manage(*argv: str, var_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL"}}
    env |= {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": "limits.example.com",
        "STACKBONE_VAR_DIR": str(var_dir),  # its own SQLite file and static root
    }
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        env=env,
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        timeout=120,
    )


def test_without_collectstatic_the_deploy_check_and_migrate_refuse_and_collectstatic_runs(tmp_path) -> None:
    for argv in (["check", "--deploy"], ["migrate", "--no-input"]):
        result = manage(*argv, var_dir=tmp_path)
        assert result.returncode != 0, argv
        assert "(studio.E001) The static files manifest (staticfiles.json) is missing" in result.stderr, argv
    with sqlite3.connect(tmp_path / "stackbone.sqlite3") as database:  # migrate refused before migrating
        assert database.execute("SELECT name FROM sqlite_master").fetchall() == []
    # collectstatic itself runs only the static files checks, so it can write the manifest.
    collected = manage("collectstatic", "--no-input", var_dir=tmp_path)
    assert collected.returncode == 0, collected.stderr
    assert manage("check", "--deploy", var_dir=tmp_path).returncode == 0  # and no warning: test_settings.py


def test_a_worker_without_the_manifest_starts_and_says_why_pages_fail(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL"}}
    env |= {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "STACKBONE_VAR_DIR": str(tmp_path),
        "CELERY_BROKER_URL": "memory://",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "studio", "worker", "--pool=solo", "--loglevel=INFO",
         "--without-mingle", "--without-gossip", "--without-heartbeat"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=settings.BASE_DIR,
    )  # fmt: skip
    deadline = threading.Timer(60, worker.kill)  # ends the read below if it never gets ready
    deadline.start()
    lines = []
    try:
        assert worker.stdout is not None
        for line in worker.stdout:
            lines.append(line)
            if "ready." in line:
                break
    finally:
        deadline.cancel()
        worker.terminate()
        worker.wait(timeout=30)
    log = "".join(lines)
    assert "ready." in log, log
    assert "studio.E001: The static files manifest (staticfiles.json) is missing" in log
