"""Issue 45, item 1: the `stackbone` command in your own project. Run anywhere in a project (the
folder of its manage.py or below), it loads that project's settings as `python manage.py` does,
and its verbs are manage.py commands too; with no project it says what to set, and loads nothing:
it never wrote its own box's `var/` inside its install again.

A small project in a temporary folder, with an app of its own named `studio` (the box's package
is not installed: ours is only this checkout's), run by the `stackbone` of this environment with
the environment a user's shell has (no DJANGO_SETTINGS_MODULE, no PYTHONPATH).
tests/test_embedding.py does the same with the package pip-installed into a fresh venv.

Must never happen: a verb that acts on another installation than the project it runs in, a
traceback, or a file written outside the project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from limits.cli.errors import CliError
from limits.cli.script import NO_PROJECT, SETTINGS_NOT_FOUND, find_project

pytestmark = pytest.mark.one_database  # the project's own SQLite file, whatever DATABASE_URL says

STACKBONE = str(Path(sys.executable).parent / "stackbone")
ROOT = Path(__file__).resolve().parents[2]

FILES = {
    "manage.py": """\
        import os
        import sys

        if __name__ == "__main__":
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
            from django.core.management import execute_from_command_line

            execute_from_command_line(sys.argv)
        """,
    "mysite/__init__.py": "",
    "mysite/settings.py": """\
        from pathlib import Path

        from stackbone.plumbing.embedded import filesystem_broker, sqlite_database

        BASE_DIR = Path(__file__).resolve().parent.parent
        SECRET_KEY = "test"
        INSTALLED_APPS = [
            "django.contrib.auth", "django.contrib.contenttypes", "django_htmx", "limits", "stackbone",
            "studio.apps.MyStudioConfig",
        ]
        USE_TZ = True
        DATABASES = {"default": sqlite_database(BASE_DIR / "var" / "db.sqlite3")}
        CELERY_BROKER_URL = "filesystem://"
        CELERY_BROKER_TRANSPORT = "stackbone.plumbing.broker:Transport"
        CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker(BASE_DIR / "var" / "broker")
        STACKBONE_WORKSPACE = "mysite.workspace"
        STACKBONE_WORKFLOWS = ["studio.workflows"]
        """,
    "mysite/workspace.py": """\
        from limits.config import define_workspace

        workspace = define_workspace(limits={"their-api": {"capacity": 2, "max_hold": "1m", "per_key": 1}})
        """,
    "mysite/celery.py": """\
        import os

        from celery import Celery

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
        app = Celery("mysite")
        app.config_from_object("django.conf:settings", namespace="CELERY")
        app.autodiscover_tasks()
        """,
    "studio/__init__.py": "",
    "studio/apps.py": """\
        from django.apps import AppConfig


        class MyStudioConfig(AppConfig):
            name = "studio"
            label = "mysite_studio"  # the stackbone app's label is "studio" (docs/embedding.md)
        """,
    "studio/workflows.py": """\
        from limits.runs import workflow


        @workflow
        def hello(input: dict) -> dict:
            return {"hello": input.get("name", "world")}
        """,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("your-project")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def shell_env(**extra: str) -> dict[str, str]:
    """What a user's shell has: none of the test run's settings, state folder or import path."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {**{k: v for k, v in os.environ.items() if k in keep}, **extra}


def stackbone(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [STACKBONE, *argv], cwd=cwd, env=shell_env(**env), capture_output=True, text=True, timeout=120, check=False
    )


def test_stackbone_runs_every_verb_in_the_project_it_is_run_in(project: Path) -> None:
    below = project / "studio"  # anywhere in the project, as git finds its repository
    migrated = stackbone("migrate", "-v", "0", cwd=below)  # any other command: the project's manage.py one
    assert migrated.returncode == 0, migrated.stderr

    listed = stackbone("limits", "list", "--json", cwd=below)
    assert listed.returncode == 0, listed.stderr
    assert [limit["name"] for limit in json.loads(listed.stdout)] == ["their-api"]

    started = stackbone("runs", "start", "hello", "--input", '{"name": "ada"}', cwd=project)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    shown = subprocess.run(
        [sys.executable, "manage.py", "runs", "show", run_id, "--json"],
        cwd=project, env=shell_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert (json.loads(shown.stdout)["workflow"], json.loads(shown.stdout)["status"]) == ("hello", "pending")

    # No worker runs here: `workers` says so (exit 1) and counts the run waiting for one.
    for argv in ([STACKBONE, "workers", "--json"], [sys.executable, "manage.py", "workers", "--json"]):
        answer = subprocess.run(argv, cwd=project, env=shell_env(), capture_output=True, text=True, timeout=120)
        assert answer.returncode == 1, answer.stderr
        assert json.loads(answer.stdout)["pending"]["runs"] == 1

    written = {path.relative_to(project).parts[0] for path in project.rglob("*") if "__pycache__" not in path.parts}
    assert written == {"manage.py", "mysite", "studio", "var"}, written


def test_with_no_project_it_says_what_to_set_and_writes_nothing(tmp_path: Path) -> None:
    before = sorted(path.name for path in (ROOT / "limits").iterdir()) + sorted(ROOT.joinpath("stackbone").iterdir())
    result = stackbone("limits", "list", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {NO_PROJECT}\n"
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []
    assert (
        sorted(path.name for path in (ROOT / "limits").iterdir()) + sorted(ROOT.joinpath("stackbone").iterdir())
        == before
    )

    unknown = stackbone("runs", "list", cwd=tmp_path, DJANGO_SETTINGS_MODULE="mysite.settings")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert unknown.stderr.startswith(
        "error: cannot import the settings module 'mysite.settings' (DJANGO_SETTINGS_MODULE)"
    )
    assert "add that folder to PYTHONPATH" in unknown.stderr
    assert stackbone("workers", "--help", cwd=tmp_path).returncode == 0  # help needs no project


def test_the_project_is_the_nearest_manage_py_unless_django_settings_module_says(tmp_path: Path) -> None:
    (tmp_path / "manage.py").write_text('os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")\n')
    (tmp_path / "shop" / "orders").mkdir(parents=True)
    found = find_project(tmp_path / "shop" / "orders", environ={})
    assert (found.settings, found.folder) == ("shop.settings", tmp_path)
    assert find_project(tmp_path, environ={"DJANGO_SETTINGS_MODULE": "other.settings"}).settings == "other.settings"
    (tmp_path / "manage.py").write_text("print('no settings here')\n")
    with pytest.raises(CliError, match="names no settings module"):
        find_project(tmp_path, environ={})
    with pytest.raises(CliError) as none:
        find_project(Path("/"), environ={})
    assert none.value.message == NO_PROJECT and SETTINGS_NOT_FOUND.startswith("cannot import")
