"""The README's two commands, `./scripts/dev` and `./scripts/test`, as real subprocesses, with and
without arguments (issue 15, item 2: `./scripts/dev --port 8000` passed `--port` to pip).

Most tests run the scripts in a copy of scripts/ beside a fake .venv whose `python` and
`stackbone` only write down how they were called, so the install step runs for real (bash, the
stamp files, the pip command line) without touching the network or the project's .venv. The
last ones run the real `stackbone` from the project's .venv."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings

# one_database (tests/conftest.py): the scripts, and a box that keeps its own embedded SQLite.
pytestmark = pytest.mark.one_database

ROOT = Path(settings.BASE_DIR)
RECORDER = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../../calls.log"
"""
PIP_UPGRADE = "python -m pip install --quiet --upgrade pip"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the scripts and pyproject.toml with a fake, recording .venv."""
    root = tmp_path / "project"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / ".venv" / "bin").mkdir(parents=True)
    for name in ("python", "stackbone"):
        tool = root / ".venv" / "bin" / name
        tool.write_text(RECORDER)
        tool.chmod(0o755)
    return root


def run_script(project: Path, script: str, *args: str) -> list[str]:
    """Run scripts/<script> from another folder (as `../project/scripts/dev` would be) and return
    the calls it made to the fake python and stackbone."""
    log = project / "calls.log"
    log.unlink(missing_ok=True)
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    result = subprocess.run(
        [str(project / "scripts" / script), *args], cwd=elsewhere, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return log.read_text().splitlines() if log.exists() else []


def age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def test_dev_with_arguments_installs_the_project_and_passes_them_to_stackbone_dev(project: Path) -> None:
    assert run_script(project, "dev", "--port", "8000") == [
        PIP_UPGRADE,
        "python -m pip install --quiet -e .",  # not .[--port]
        "stackbone dev --port 8000",
    ]


def test_dev_without_arguments_runs_the_demo_and_installs_only_once(project: Path) -> None:
    assert run_script(project, "dev")[-1] == "stackbone dev --demo"
    age(project / "pyproject.toml", 60)
    assert run_script(project, "dev") == ["stackbone dev --demo"]
    assert run_script(project, "dev", "--help") == ["stackbone dev --help"]
    assert run_script(project, "dev", "--port", "9000", "--demo") == ["stackbone dev --port 9000 --demo"]


def test_test_passes_its_arguments_to_pytest_and_installs_the_test_extras(project: Path) -> None:
    assert run_script(project, "test", "-x", "-k", "a b", "tests/test_dev.py") == [
        PIP_UPGRADE,
        "python -m pip install --quiet -e .[test]",
        "python -m pytest -x -k a b tests/test_dev.py",
    ]
    age(project / "pyproject.toml", 60)
    assert run_script(project, "test") == ["python -m pytest"]
    # The test extras include the box: after ./scripts/test, ./scripts/dev does not install again.
    assert run_script(project, "dev", "--port", "8001") == ["stackbone dev --port 8001"]


def test_a_changed_pyproject_installs_again(project: Path) -> None:
    run_script(project, "dev")
    age(project / ".venv" / ".installed", 60)
    (project / "pyproject.toml").touch()
    assert run_script(project, "dev", "--port", "8000")[:2] == [PIP_UPGRADE, "python -m pip install --quiet -e ."]


def real_copy(tmp_path: Path) -> Path:
    """The scripts beside a .venv made of links to the project's: the real python and stackbone,
    with an install stamp of its own (current), so nothing is installed; and the box itself."""
    root = tmp_path / "real"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / ".venv").mkdir()
    for entry in (ROOT / ".venv").iterdir():
        if not entry.name.startswith(".installed"):
            (root / ".venv" / entry.name).symlink_to(entry)
    for name in ("manage.py", "studio"):  # the box beside its scripts, as in a checkout (never installed)
        (root / name).symlink_to(ROOT / name)
    age(root / "pyproject.toml", 60)
    (root / ".venv" / ".installed-test").touch()
    return root


def test_the_real_dev_script_answers_help(tmp_path: Path) -> None:
    root = real_copy(tmp_path)
    result = subprocess.run(
        [str(root / "scripts" / "dev"), "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--port" in result.stdout and "--demo" in result.stdout
    assert "Traceback" not in result.stderr and "pip" not in result.stderr


def test_the_real_dev_script_starts_the_box_on_the_port_given_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    root = real_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "VIRTUAL_ENV"}}
    env.update(STACKBONE_VAR_DIR=str(tmp_path / "var"), STACKBONE_DEV_PASSWORD="scripts-test-password")
    log = tmp_path / "dev.log"
    box = subprocess.Popen(
        [str(root / "scripts" / "dev"), "--port", "18734"], cwd=tmp_path, env=env,
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "http://127.0.0.1:18734/studio/limits/" not in log.read_text():
            assert box.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        box.send_signal(signal.SIGINT)
        try:
            box.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(box.pid, signal.SIGKILL)
            raise
    output = log.read_text()
    assert box.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "live demo" not in output


def test_ctrl_c_as_the_banner_appears_stops_the_box_and_leaves_no_process_behind(tmp_path: Path) -> None:
    """The signal lands while the children are still starting (CI saw exit 130 here): the box
    still stops in order, exits 0, and none of its children (each in its own group) survives."""
    root = real_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "VIRTUAL_ENV"}}
    env.update(STACKBONE_VAR_DIR=str(tmp_path / "var"), STACKBONE_DEV_PASSWORD="scripts-test-password")
    log = tmp_path / "dev.log"
    box = subprocess.Popen(
        [str(root / "scripts" / "dev"), "--port", "18735"], cwd=tmp_path, env=env,
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "Stackbone box" not in log.read_text():
            assert box.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
    finally:
        box.send_signal(signal.SIGINT)
        try:
            box.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(box.pid, signal.SIGKILL)
            raise
    output = log.read_text()
    assert box.returncode == 0, output[-3000:]
    assert "Traceback" not in output
    time.sleep(1)
    assert processes_mentioning(str(tmp_path / "var")) == [], output[-3000:]


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes whose environment or arguments mention `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if text.encode() in (proc / "environ").read_bytes() + (proc / "cmdline").read_bytes():
                state = (proc / "stat").read_text().split(") ", 1)[1][0]
                if state != "Z":
                    found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def test_the_real_test_script_passes_pytest_arguments(tmp_path: Path) -> None:
    root = real_copy(tmp_path)
    result = subprocess.run(
        [str(root / "scripts" / "test"), "--collect-only", "-q", str(ROOT / "tests" / "test_health.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_health.py::" in result.stdout
