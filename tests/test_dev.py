"""`stackbone dev` as a newcomer runs it: embedded SQLite and broker, the live demo, a browser
sign-in over HTTP, the sweep running under beat, and Ctrl-C leaving no process behind."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

# one_database (tests/conftest.py): the box drops DATABASE_URL and keeps its own embedded SQLite.
pytestmark = pytest.mark.one_database

PASSWORD = "dev-test-password-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_stackbone_dev_serves_the_demo_runs_the_sweep_and_stops_cleanly(tmp_path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(STACKBONE_VAR_DIR=str(tmp_path / "var"), STACKBONE_DEV_PASSWORD=PASSWORD)
    stackbone = shutil.which("stackbone", path=str(Path(sys.executable).parent)) or "stackbone"
    log = tmp_path / "dev.log"
    box = subprocess.Popen(
        [stackbone, "dev", "--demo", "--port", str(port)],
        cwd=settings.BASE_DIR, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    processes: set[int] = set()
    try:
        health = wait_for_json(f"{base}/healthz", lambda body: body.get("last_sweep_age_s") is not None, box, log)
        assert (health["database"], health["broker"]) == ("ok", "ok")
        assert health["last_sweep_age_s"] < 20
        processes = descendants(box.pid)
        assert len(processes) >= 4  # web, worker (and its pool), beat, demo

        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        login = opener.open(f"{base}/accounts/login/").read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login)[1]
        form = urllib.parse.urlencode({"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": token})
        request = urllib.request.Request(f"{base}/accounts/login/", data=form.encode(), headers={"Referer": base})
        page = opener.open(request).read().decode()
        assert "voice-calls" in page and "partner-api" in page
    finally:
        processes |= descendants(box.pid)
        box.send_signal(signal.SIGINT)
        box.wait(timeout=60)
        output = log.read_text()
    assert box.returncode == 0, output[-3000:]
    assert "Studio" in output and "/healthz" in output
    # Quiet by default (issue 15, item 5): the sign-in again once the box answers, no line per task
    # or per request (the worker's INFO lines were 277 in the first minute).
    assert re.search(r"dev \| ready: http://127\.0\.0\.1:\d+/studio/limits/  sign in: user 'admin'", output), output
    assert "Task " not in output and "succeeded in" not in output and '"GET /healthz' not in output
    assert not [pid for pid in processes if alive(pid)], output[-3000:]


def wait_for_json(url: str, ready, box: subprocess.Popen[str], log: Path, timeout: float = 180) -> dict:
    """The body of `url` once `ready(body)`. The first sweep comes after migrate, the worker's and
    beat's start and beat's first 15 s: 35 s on a quiet machine, over 90 s on a loaded CI one."""
    start = time.monotonic()
    body: dict = {}
    while time.monotonic() - start < timeout:
        if box.poll() is not None:
            raise AssertionError(f"stackbone dev exited early with code {box.returncode}\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
        except OSError:
            body = {}
        if body and ready(body):
            return body
        time.sleep(0.5)
    raise AssertionError(f"{url} never became ready: {body}\n{log.read_text()[-4000:]}")


def test_quiet_logs_hide_good_requests_and_keep_failures() -> None:
    from studio.dev import QUIET_REQUEST

    assert QUIET_REQUEST.search('[30/Nov/2026 09:00:00] "GET /studio/limits/ HTTP/1.1" 200 5120')
    assert QUIET_REQUEST.search('[30/Nov/2026 09:00:00] "POST /accounts/login/ HTTP/1.1" 302 0')
    assert not QUIET_REQUEST.search('[30/Nov/2026 09:00:00] "GET /studio/limits/x/ HTTP/1.1" 404 179')
    assert not QUIET_REQUEST.search('[30/Nov/2026 09:00:00] "GET /healthz HTTP/1.1" 503 80')


def test_dev_takes_verbose_and_reset_demo() -> None:
    from studio.dev import build_parser

    options = build_parser().parse_args(["--port", "9000", "--verbose", "--reset-demo"])
    assert (options.port, options.verbose, options.reset_demo, options.demo) == (9000, True, True, False)
    quiet = build_parser().parse_args([])
    assert (quiet.verbose, quiet.reset_demo) == (False, False)


def test_dev_takes_the_workers_concurrency(capsys) -> None:
    """Issue 30: the worker's processes are the box's second ceiling; `--concurrency N` sets them."""
    from studio import dev
    from studio.dev import build_parser

    options = build_parser().parse_args(["--demo", "--concurrency", "6"])
    assert (options.concurrency, options.demo) == (6, True)
    assert build_parser().parse_args([]).concurrency == dev.DEFAULT_CONCURRENCY == 2
    argv = dev.worker_argv("python", "WARNING", options.concurrency)
    assert argv == ["python", "-m", "celery", "-A", "studio", "worker", "--loglevel=WARNING", "--concurrency=6"]
    for bad in ("0", "-1", "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--concurrency", bad])
    assert "--concurrency must be a whole number of at least 1" in capsys.readouterr().err


def test_a_generated_password_is_kept_in_a_file_only_the_user_can_read(tmp_path, monkeypatch) -> None:
    from studio import dev

    monkeypatch.delenv("STACKBONE_DEV_PASSWORD", raising=False)
    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="created\n", stderr="")
    )
    var = tmp_path / "var"
    sign_in = dev.ensure_dev_user({"STACKBONE_VAR_DIR": str(var)})
    file = var / "dev-sign-in.txt"
    assert file.stat().st_mode & 0o777 == 0o600
    password = re.search(r"password: (\S+)", file.read_text())[1]
    assert f"password {password!r}" in sign_in and str(file) in sign_in
    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="exists\n", stderr="")
    )
    assert (
        dev.ensure_dev_user({"STACKBONE_VAR_DIR": str(var)})
        == f"user 'admin', password in {file} (as created at first start)"
    )
