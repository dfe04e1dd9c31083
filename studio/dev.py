"""`stackbone dev`, the box's management command `dev` (studio/management/commands/dev.py; ./scripts/dev
runs it): the whole box on one machine.

1. Migrate (which syncs the declared limits) and make sure a local sign-in exists.
2. Start the web server, one Celery worker and Celery beat (and, with --demo, a stream of
   example runs), each in its own process group, with their logs interleaved under a prefix.
3. On Ctrl-C (or SIGTERM) stop them all: SIGTERM to each group, SIGKILL to what is left after
   a grace period, so no process outlives the command.

Quiet by default: warnings and errors, the web server's failed requests, and the banner; the
sign-in is repeated once the box answers, and a password generated at first start is also kept
in var/dev-sign-in.txt (readable only by you). --verbose shows every INFO line and request.
--reset-demo first clears what the live demo left (studio/demo/reset.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV_USERNAME = "admin"
GRACE_SECONDS = 10
DEFAULT_CONCURRENCY = 2  # the worker's processes: how many runs move at once, whatever the limits allow
DEMO_WORKSPACE = "studio.demo.workspace"
SIGN_IN_FILE = "dev-sign-in.txt"
# A request the web server handled well (2xx, 3xx): not shown unless --verbose.
QUIET_REQUEST = re.compile(r'"(GET|HEAD|POST|OPTIONS) [^"]*" [23]\d\d ')

_print_lock = threading.Lock()


def say(prefix: str, line: str) -> None:
    with _print_lock:
        sys.stdout.write(f"{prefix:>7} | {line.rstrip()}\n")
        sys.stdout.flush()


class Child:
    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], hide: Callable[[str], object] | None = None
    ) -> None:
        self.name = name
        self.hide = hide
        self.process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # its own process group: Ctrl-C reaches us, and we stop it
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if self.hide is None or not self.hide(line):
                say(self.name, line)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument(
        "--demo", action="store_true", help="declare the demo limits and keep example runs going against them"
    )
    parser.add_argument(
        "--reset-demo",
        action="store_true",
        help="first clear what the demo left: its runs, their slots (released) and queue entries",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="show every log line (INFO) and every request; default: quiet"
    )
    parser.add_argument(
        "--concurrency",
        metavar="N",
        type=_concurrency,
        default=DEFAULT_CONCURRENCY,
        help=f"the worker's processes: how many runs move at once (default {DEFAULT_CONCURRENCY}); "
        "a limit of higher capacity is bound by them",
    )


def _concurrency(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,4}", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency must be a whole number of at least 1, not {text!r}")
    return int(text)


def worker_argv(python: str, level: str, concurrency: int) -> list[str]:
    """The Celery worker of the box, with `concurrency` processes (prefork)."""
    return [python, "-m", "celery", "-A", "studio", "worker", f"--loglevel={level}", f"--concurrency={concurrency}"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stackbone dev", description="Run the whole box: web, worker and beat.")
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "studio.settings", "PYTHONUNBUFFERED": "1"}
    if args.demo:
        env["STACKBONE_WORKSPACE"] = DEMO_WORKSPACE
    python = sys.executable
    manage = [python, str(ROOT / "manage.py")]

    migrate = subprocess.run([*manage, "migrate", "--no-input"], cwd=ROOT, env=env, capture_output=True, text=True)
    if migrate.returncode != 0:
        sys.stderr.write(migrate.stdout + migrate.stderr)
        sys.stderr.write("stackbone dev: migrate failed (see above)\n")
        return 1
    if args.reset_demo:
        reset = subprocess.run(
            [python, "-m", "studio.demo.reset"], cwd=ROOT, env=env, capture_output=True, text=True
        )  # fmt: skip
        if reset.returncode != 0:
            sys.stderr.write(reset.stdout + reset.stderr)
            sys.stderr.write("stackbone dev: --reset-demo failed (see above)\n")
            return 1
        say("dev", reset.stdout.strip())
    sign_in = ensure_dev_user(env)
    # From here on Ctrl-C stops the box in order: a signal that lands while the children are
    # still starting must not leave the ones already started behind (they have their own groups).
    stopping = stop_on_signals()
    banner(args, env, sign_in)

    level = "INFO" if args.verbose else "WARNING"
    if not args.verbose:
        env = {**env, "LOG_LEVEL": env.get("LOG_LEVEL", "WARNING")}  # limits.* and studio.* loggers
    hide_requests = None if args.verbose else QUIET_REQUEST.search
    children = [
        Child("web", [*manage, "runserver", "--noreload", f"{args.host}:{args.port}"], env, hide_requests),
        Child("worker", worker_argv(python, level, args.concurrency), env),
        Child("beat", [python, "-m", "celery", "-A", "studio", "beat", f"--loglevel={level}"], env),
    ]
    if args.demo:
        children.append(Child("demo", [python, "-m", "studio.demo"], env))
    url = f"http://{args.host}:{args.port}"
    announcer = threading.Thread(target=announce_ready, args=(url, sign_in, children, stopping), daemon=True)
    announcer.start()
    exit_code = supervise(children, stopping)
    # Joined, not left to die with the interpreter: a daemon thread still inside urllib while
    # Python finalizes crashed the command (SIGSEGV) after a quick Ctrl-C.
    announcer.join(timeout=5)
    return exit_code


def stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, installed before any child starts."""
    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stopping


def announce_ready(
    url: str, sign_in: str, children: list[Child], stopping: threading.Event, timeout: float = 120
) -> None:
    """Once the web server answers, repeat where to go and how to sign in (the banner has
    scrolled away by then under the first log lines)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stopping.is_set():
        if any(child.process.poll() is not None for child in children):
            return
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                json.load(response)
        except urllib.error.HTTPError:
            pass  # it answers (503: the broker or the sweep is not there yet, which is fine)
        except (OSError, ValueError):
            stopping.wait(0.5)
            continue
        say("dev", f"ready: {url}/studio/limits/  sign in: {sign_in}")
        return


def supervise(children: list[Child], stopping: threading.Event) -> int:
    exit_code = 0
    while not stopping.is_set():
        for child in children:
            code = child.process.poll()
            if code is not None:
                say("dev", f"{child.name} exited with code {code}; stopping the box")
                exit_code = 1
                stopping.set()
        stopping.wait(0.5)
    say("dev", "stopping web, worker and beat ...")
    for child in children:
        # The main process only: a Celery worker then stops its own pool (a warm shutdown).
        with contextlib.suppress(ProcessLookupError):
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for child in children:
        try:
            child.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            say("dev", f"{child.name} did not stop in {GRACE_SECONDS} s: killing it")
        child.signal_group(signal.SIGKILL)  # whatever is left of its group (pool processes)
        child.process.wait()
    say("dev", "stopped")
    return exit_code


def ensure_dev_user(env: dict[str, str]) -> str:
    """Create the local superuser on first start. Its password comes from
    STACKBONE_DEV_PASSWORD or is generated and printed this once."""
    code = (
        "import django, os, sys; django.setup()\n"
        "from django.contrib.auth import get_user_model\n"
        "User = get_user_model()\n"
        f"name = {DEV_USERNAME!r}\n"
        "if User.objects.filter(username=name).exists():\n"
        "    print('exists')\n"
        "else:\n"
        "    User.objects.create_superuser(name, '', os.environ['STACKBONE_DEV_NEW_PASSWORD'])\n"
        "    print('created')\n"
    )
    password = os.environ.get("STACKBONE_DEV_PASSWORD") or secrets.token_urlsafe(12)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "STACKBONE_DEV_NEW_PASSWORD": password},
        capture_output=True,
        text=True,
        check=True,
    )
    if os.environ.get("STACKBONE_DEV_PASSWORD"):
        return f"user {DEV_USERNAME!r} with the password in STACKBONE_DEV_PASSWORD"
    sign_in_file = var_dir(env) / SIGN_IN_FILE
    if result.stdout.strip() == "created":
        write_private(
            sign_in_file,
            f"Stackbone dev box sign-in, created at first start\nuser: {DEV_USERNAME}\npassword: {password}\n"
            f"Change it with: python manage.py changepassword {DEV_USERNAME} (this file is not updated)\n",
        )
        return (
            f"user {DEV_USERNAME!r}, password {password!r} (also in {sign_in_file}, readable only by you; "
            "change it with manage.py changepassword)"
        )
    if sign_in_file.exists():
        return f"user {DEV_USERNAME!r}, password in {sign_in_file} (as created at first start)"
    return (
        f"user {DEV_USERNAME!r} (password shown at first start; reset: python manage.py changepassword {DEV_USERNAME})"
    )


def var_dir(env: dict[str, str]) -> Path:
    return Path(env.get("STACKBONE_VAR_DIR") or ROOT / "var")


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600, whatever the umask; also when it existed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def banner(args: argparse.Namespace, env: dict[str, str], sign_in: str) -> None:
    var = env.get("STACKBONE_VAR_DIR") or "var"
    database = env.get("DATABASE_URL") or f"SQLite (embedded, {var}/stackbone.sqlite3)"
    broker = env.get("CELERY_BROKER_URL") or f"filesystem (embedded, {var}/broker)"
    url = f"http://{args.host}:{args.port}"
    lines = [
        "",
        "Stackbone box" + (" with the live demo" if args.demo else ""),
        f"  Studio    {url}/studio/limits/",
        f"  Sign in   {sign_in}",
        f"  Health    {url}/healthz",
        f"  Database  {_hide_password(database)}",
        f"  Broker    {_hide_password(broker)}",
        f"  Worker    {args.concurrency} process{'es' if args.concurrency != 1 else ''} (--concurrency N)",
        "  Ctrl-C stops web, worker and beat.",
        "",
    ]
    for line in lines:
        say("dev", line)


def _hide_password(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}@{host}"
    return url


if __name__ == "__main__":
    raise SystemExit(main())
