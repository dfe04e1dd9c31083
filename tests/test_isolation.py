"""A test run shares no state with a box on the same machine (issue 15, item 1): the README's two
commands side by side, `./scripts/dev` in one terminal and `./scripts/test` in another, must not
see each other's database, broker messages, beat schedule or any file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import use_broker

ROOT = Path(settings.BASE_DIR)
TEST_RUN_VARIABLES = {"STACKBONE_VAR_DIR", "STACKBONE_TEST_RUN", "PYTEST_VERSION", "PYTEST_CURRENT_TEST"}

STATE = """
import json, django
django.setup()
from django.conf import settings as s
from django.db import connection
from studio.celery import app
options = dict(getattr(s, "CELERY_BROKER_TRANSPORT_OPTIONS", {}))
print(json.dumps({
    "var_dir": str(s.VAR_DIR),
    "database": str(connection.settings_dict["NAME"]),
    "broker_url": s.CELERY_BROKER_URL,
    "broker_folders": sorted(str(v) for k, v in options.items() if k.endswith("folder") or k.endswith("_in")
                             or k.endswith("_out")),
    "key_prefix": options.get("global_keyprefix", ""),
    "queue": app.conf.task_default_queue,
    "maintenance_queue": s.STACKBONE_MAINTENANCE_QUEUE,
    "beat_schedule": s.CELERY_BEAT_SCHEDULE_FILENAME,
    "static_root": str(s.STATIC_ROOT),
}))
"""


def box_environment() -> dict[str, str]:
    """The environment a box started from the same shell sees: the user's variables (their
    DATABASE_URL and CELERY_BROKER_URL included), none of this test run's."""
    return {k: v for k, v in os.environ.items() if k not in TEST_RUN_VARIABLES}


def state_of(env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", STATE], env={**env, "DJANGO_SETTINGS_MODULE": "studio.settings"},
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def this_run() -> dict[str, Any]:
    from studio.celery import app

    options = dict(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}))
    folders = [str(v) for k, v in options.items() if k.endswith(("folder", "_in", "_out"))]
    return {
        "var_dir": str(settings.VAR_DIR),
        "database": str(connection.settings_dict["NAME"]),
        "test_database": str(connection.creation._get_test_db_name()),  # type: ignore[attr-defined]  # private, not in the stubs
        "broker_folders": sorted(folders),
        "key_prefix": options.get("global_keyprefix", ""),
        "queue": app.conf.task_default_queue,
        "maintenance_queue": settings.STACKBONE_MAINTENANCE_QUEUE,
        "beat_schedule": settings.CELERY_BEAT_SCHEDULE_FILENAME,
        "static_root": str(settings.STATIC_ROOT),
    }


def inside(path: str, folder: str) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def test_a_test_run_keeps_every_file_in_a_temporary_folder_of_its_own() -> None:
    mine = this_run()
    var_dir = Path(mine["var_dir"])
    assert var_dir.parent == Path(tempfile.gettempdir()) and var_dir.name.startswith("stackbone-test-")
    assert not inside(mine["var_dir"], str(ROOT))  # not the project's var/, nor anywhere in the tree
    assert os.environ["STACKBONE_VAR_DIR"] == mine["var_dir"]  # the processes tests start inherit it
    for path in [mine["beat_schedule"], mine["static_root"], *mine["broker_folders"]]:
        assert inside(path, mine["var_dir"]), path
    if connection.vendor == "sqlite":
        assert inside(mine["test_database"], mine["var_dir"])
    assert mine["queue"] == f"stackbone-test-{settings.STACKBONE_TEST_RUN}"
    assert mine["maintenance_queue"] == f"stackbone-test-{settings.STACKBONE_TEST_RUN}-maintenance"


def test_a_box_started_from_the_same_shell_shares_nothing_with_the_test_run() -> None:
    """The box as `./scripts/dev` starts it (default var/), and as a user who exported
    STACKBONE_VAR_DIR for both commands would start it: either way, not one path, database, queue
    or key prefix in common with this run."""
    mine = this_run()
    default_box = state_of({k: v for k, v in box_environment().items() if k != "STACKBONE_VAR_DIR"})
    assert default_box["var_dir"] == str(ROOT / "var")
    shared_shell = state_of({**box_environment(), "STACKBONE_VAR_DIR": str(ROOT / "var")})
    for box in (default_box, shared_shell):
        assert not inside(mine["var_dir"], box["var_dir"]) and not inside(box["var_dir"], mine["var_dir"])
        assert box["database"] not in {mine["database"], mine["test_database"]}
        assert not set(box["broker_folders"]) & set(mine["broker_folders"])
        assert box["beat_schedule"] != mine["beat_schedule"]
        assert box["static_root"] != mine["static_root"]
        if box["broker_url"] != "filesystem://":  # a broker server: the same URL, apart by queue and prefix
            assert box["queue"] != mine["queue"] and box["key_prefix"] != mine["key_prefix"]
            assert box["maintenance_queue"] != mine["maintenance_queue"]


def test_a_worker_started_by_a_test_shares_the_test_runs_state() -> None:
    child = state_of({**os.environ, "CELERY_BROKER_URL": settings.CELERY_BROKER_URL})  # as tests/runs start one
    mine = this_run()
    assert child["var_dir"] == mine["var_dir"]
    assert child["broker_folders"] == mine["broker_folders"]
    assert (child["queue"], child["maintenance_queue"], child["key_prefix"]) == (
        mine["queue"],
        mine["maintenance_queue"],
        mine["key_prefix"],
    )


@pytest.fixture
def real_broker():
    use_broker(settings.CELERY_BROKER_URL, eager=False)
    yield
    use_broker("memory://", eager=True)


def test_a_test_runs_messages_go_to_its_own_broker_never_the_boxs(real_broker) -> None:
    """A message a test sends is found where this run's workers read, and not where a box on the
    project's var/ (or on the same broker server) reads. Read-only: a box's messages are never
    consumed here. The sweep goes to the maintenance queue (studio/settings.py)."""
    from studio.celery import app

    task_id = f"isolation-{uuid.uuid4().hex}"
    app.send_task("limits.tasks.sweep", task_id=task_id)
    box = state_of({k: v for k, v in box_environment().items() if k != "STACKBONE_VAR_DIR"})
    try:
        if settings.CELERY_BROKER_URL == "filesystem://":
            out = Path(str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"]))
            assert any(task_id in path.read_text() for path in out.glob("*.msg"))
            for folder in box["broker_folders"]:
                for path in Path(folder).glob("*.msg"):
                    assert task_id not in path.read_text(errors="replace")
        else:
            import redis

            client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
            mine = this_run()
            mine_key = f"{mine['key_prefix']}{mine['maintenance_queue']}"
            assert any(task_id in m.decode() for m in client.lrange(mine_key, 0, -1))  # type: ignore[union-attr]  # bytes: no decode_responses
            theirs = client.lrange(f"{box['key_prefix']}{box['maintenance_queue']}", 0, -1)
            assert not any(task_id in m.decode(errors="replace") for m in theirs)  # type: ignore[union-attr]  # bytes
    finally:
        app.control.purge()
