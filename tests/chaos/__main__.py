"""python -m tests.chaos [--runs 2000] [--rate 8] [--redis-restarts 1] [--postgres-restarts 1]

The whole box under load with real processes, while things crash (issue 8, section 3):

1. Create a database of its own (DATABASE_URL's server, database `stackbone_chaos` by default,
   dropped and created), empty its Redis database, migrate.
2. Start the web app (gunicorn), 3 Celery workers and beat, each in its own process group.
3. A load generator starts `--runs` runs of the shipped example workflows over the limits of
   tests/chaos/workspace.py: `place_call` and `open_session` (most released later by a
   `call_ended` run, some left to max hold), `export_report` (with_limit), `sync_partner` (short
   timeouts, so some time out), and cancels a few waiting runs.
4. Meanwhile a chaos driver, at random moments: SIGKILLs a worker's process group and starts a
   new worker; starts a second beat for a while; restarts Redis (`shutdown nosave`: every queued
   task is lost); restarts PostgreSQL.
5. When the load ends, wait (bounded) until the box is quiet: no run pending or running, nothing
   reserved or queued. Then check: every run completed, timed out or was cancelled (none
   stranded, none failed for another reason); `manage.py limits verify` finds no violation; the
   web app answers. Print the figures; exit 1 if any check failed.

WARNING: --redis-restarts and --postgres-restarts restart the machine's real Redis and
PostgreSQL (every database and every client on it). Use 0 on a shared machine.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
REDIS_START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "-::1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    "/var/lib/redis",
    "--logfile",
    "/var/log/redis/ci.log",
]
FINISHED = ("completed", "failed", "cancelled")


def log(message: str) -> None:
    print(f"chaos {time.strftime('%H:%M:%S')} | {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description="The box under load while it crashes.")
    parser.add_argument("--runs", type=int, default=2000, help="runs to start, follow-up call_ended runs aside")
    parser.add_argument("--rate", type=float, default=8.0, help="runs started per second (default 8)")
    parser.add_argument("--workers", type=int, default=3, help="Celery workers (default 3)")
    parser.add_argument("--redis-restarts", type=int, default=1, help="restarts of the real Redis (default 1)")
    parser.add_argument("--postgres-restarts", type=int, default=1, help="restarts of the real PostgreSQL (default 1)")
    parser.add_argument("--quiet-timeout", type=float, default=420.0, help="how long to wait for quiet (s)")
    parser.add_argument(
        "--database", default="stackbone_chaos", help="the database to create (default stackbone_chaos)"
    )
    parser.add_argument("--redis-db", type=int, default=10, help="the Redis database number (default 10)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--logs", default="/tmp/stackbone-chaos/logs", help="where the processes' logs go")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the figures to this file")
    return parser.parse_args(argv)


# --- the processes ---------------------------------------------------------------------------------


class Box:
    """The box's processes, each in its own process group so a kill takes its pool with it."""

    def __init__(self, env: dict[str, str], logs: Path, port: int) -> None:
        self.env = env
        self.logs = logs
        self.port = port
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.workers: list[str] = []
        self.counter = Counter[str]()
        self.lock = threading.Lock()

    def spawn(self, kind: str, argv: list[str]) -> str:
        with self.lock:
            self.counter[kind] += 1
            name = f"{kind}-{self.counter[kind]}"
            handle = (self.logs / f"{name}.log").open("wb")
            self.processes[name] = subprocess.Popen(
                argv, cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
            handle.close()
            return name

    def start_web(self) -> str:
        return self.spawn(
            "web",
            [PYTHON, "-m", "gunicorn", "studio.wsgi", "--bind", f"127.0.0.1:{self.port}", "--workers", "2"],
        )

    def start_worker(self) -> str:
        index = self.counter["worker"] + 1
        name = self.spawn(
            "worker",
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "studio",
                "worker",
                "--loglevel=WARNING",
                "--concurrency=2",
                f"--hostname=chaos-{index}@%h",
                "--without-gossip",
                "--without-mingle",
            ],
        )
        self.workers.append(name)
        return name

    def start_beat(self) -> str:
        index = self.counter["beat"] + 1
        var = Path(self.env["STACKBONE_VAR_DIR"])
        return self.spawn(
            "beat",
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "studio",
                "beat",
                "--loglevel=WARNING",
                f"--schedule={var / f'beat-{index}-schedule'}",
                f"--pidfile={var / f'beat-{index}.pid'}",
            ],
        )

    def kill(self, name: str) -> None:
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if name in self.workers:
            self.workers.remove(name)

    def stop(self, name: str, grace: float = 10.0) -> None:
        process = self.processes[name]
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # what is left of its group
        process.wait()
        if name in self.workers:
            self.workers.remove(name)

    def dead(self) -> list[str]:
        """Processes that should be running but exited."""
        return [name for name, process in self.processes.items() if process.poll() is not None]

    def stop_all(self) -> None:
        for name, process in list(self.processes.items()):
            if process.poll() is None:
                self.stop(name)


# --- the chaos driver -----------------------------------------------------------------------------


@dataclass
class ChaosFigures:
    worker_kills: int = 0
    redis_restarts: int = 0
    postgres_restarts: int = 0
    second_beats: int = 0
    capacity_changes: int = 0
    worker_exits: list[str] = field(default_factory=list)  # exited on their own; restarted
    outages: list[tuple[str, float, float]] = field(default_factory=list)  # (what, start, end) monotonic


class ChaosDriver(threading.Thread):
    """At random moments (every 3-10 s): kill a worker and start another, or start a second beat
    for 15-40 s; the service restarts happen at random points spread over the expected load."""

    def __init__(self, box: Box, rng: random.Random, args: argparse.Namespace, expected_seconds: float) -> None:
        super().__init__(daemon=True, name="chaos")
        self.box, self.rng, self.args = box, rng, args
        self.figures = ChaosFigures()
        self.stopping = threading.Event()
        self.started = time.monotonic()
        plan = [("redis", rng.uniform(0.15, 0.85)) for _ in range(args.redis_restarts)]
        plan += [("postgres", rng.uniform(0.15, 0.85)) for _ in range(args.postgres_restarts)]
        self.plan = sorted(((expected_seconds * at, what) for what, at in plan), reverse=True)
        self.second_beat: tuple[str, float] | None = None
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.rng.uniform(3, 10)):
                self.tick()
        except Exception as error:  # a failed restart ends the chaos, and the run fails
            self.errors.append(f"chaos driver: {type(error).__name__}: {error}")
            log(self.errors[-1])
        finally:
            self.end_second_beat()

    def supervise(self) -> None:
        """As a process supervisor would (systemd Restart=always): a worker that exited on its
        own is started again, and counted (kombu's Redis transport can crash a worker's
        consumer when Redis goes away: "Unrecoverable error: AttributeError ... 'hostname'")."""
        for name in list(self.box.workers):
            if self.box.processes[name].poll() is not None:
                self.box.workers.remove(name)
                self.figures.worker_exits.append(name)
                log(f"{name} exited on its own (code {self.box.processes[name].returncode}); starting another")
                self.box.start_worker()

    def tick(self) -> None:
        self.supervise()
        elapsed = time.monotonic() - self.started
        if self.second_beat is not None and time.monotonic() >= self.second_beat[1]:
            self.end_second_beat()
        if self.plan and elapsed >= self.plan[-1][0]:
            _, what = self.plan.pop()
            self.restart_redis() if what == "redis" else self.restart_postgres()
        elif self.rng.random() < 0.15:
            self.change_capacity()
        elif self.second_beat is None and self.rng.random() < 0.25:
            name = self.box.start_beat()
            self.second_beat = (name, time.monotonic() + self.rng.uniform(15, 40))
            self.figures.second_beats += 1
            log(f"started a second beat ({name})")
        else:
            self.kill_a_worker()

    def kill_a_worker(self) -> None:
        if not self.box.workers:
            return
        victim = self.rng.choice(self.box.workers)
        self.box.kill(victim)
        replacement = self.box.start_worker()
        self.figures.worker_kills += 1
        log(f"SIGKILLed {victim}, started {replacement}")

    def change_capacity(self) -> None:
        """An operator lowers or raises a capacity, or resets it (lowering takes no slot back)."""
        from django.db import connections

        from limits import services

        name = self.rng.choice(["voice-calls", "partner-api"])
        value = self.rng.choice([None, 1, 2, 3, 6])
        try:
            services.set_capacity(name, value, actor="chaos")
        except Exception as error:  # the database may be restarting
            log(f"capacity change failed: {type(error).__name__}")
            connections.close_all()
            return
        self.figures.capacity_changes += 1
        log(f"capacity of {name}: {value or 'reset'}")

    def end_second_beat(self) -> None:
        if self.second_beat is not None:
            self.box.stop(self.second_beat[0])
            log(f"stopped the second beat ({self.second_beat[0]})")
            self.second_beat = None

    def restart_redis(self) -> None:
        began = time.monotonic()
        log("restarting Redis (shutdown nosave: every queued task is lost)")
        subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"], capture_output=True)
        time.sleep(self.rng.uniform(1, 4))
        subprocess.run(REDIS_START, check=True, capture_output=True)
        _wait_for(lambda: _run_ok(["redis-cli", "-h", "127.0.0.1", "ping"]), 30, "Redis to answer")
        self.figures.redis_restarts += 1
        self.figures.outages.append(("redis", began, time.monotonic()))
        log(f"Redis back after {time.monotonic() - began:.1f} s")

    def restart_postgres(self) -> None:
        began = time.monotonic()
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        log(f"restarting PostgreSQL {version}")
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True, capture_output=True
        )
        _wait_for(lambda: _run_ok(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"]), 60, "PostgreSQL")
        self.figures.postgres_restarts += 1
        self.figures.outages.append(("postgres", began, time.monotonic()))
        log(f"PostgreSQL back after {time.monotonic() - began:.1f} s")


def _run_ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0


def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {seconds:.0f} s")
        time.sleep(0.2)


class WebProbe(threading.Thread):
    """GET /healthz every second: the web app must keep answering (503 while a service is down
    is an answer; a refused connection or a 500 is not)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True, name="probe")
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.stopping = threading.Event()
        self.statuses = Counter[str]()
        self.last: str = ""

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            self.last = self.probe()
            self.statuses[self.last] += 1

    def probe(self) -> str:
        try:
            with urllib.request.urlopen(self.url, timeout=5) as response:  # noqa: S310 (our own box)
                return str(response.status)
        except urllib.error.HTTPError as error:
            return str(error.code)
        except OSError as error:
            return type(error).__name__


# --- the load ---------------------------------------------------------------------------------------


class Load:
    """Starts runs at `rate` per second; starts a `call_ended` run for most finished calls and
    sessions after a short hold; cancels a few waiting runs."""

    def __init__(self, rng: random.Random, args: argparse.Namespace) -> None:
        self.rng, self.args = rng, args
        self.started = Counter[str]()
        self.cancels = 0
        self.errors = Counter[str]()
        self.holding: dict[str, float | None] = {}  # run id -> hold before release (None: never)
        self.releases: list[tuple[float, str]] = []  # (when, slot id)
        self.recent: list[str] = []

    def run(self) -> None:
        next_start = time.monotonic()
        while sum(self.started[w] for w in self.started if w != "call_ended") < self.args.runs:
            now = time.monotonic()
            if now >= next_start:
                self.guard(self.start_one)
                next_start += self.rng.expovariate(self.args.rate)
            self.guard(self.follow_up)
            time.sleep(max(0.0, min(next_start - time.monotonic(), 0.05)))

    def guard(self, work: Any) -> None:
        """A database or broker outage makes a call fail: count it and go on, as a client would."""
        from django.db import connections

        try:
            work()
        except Exception as error:
            self.errors[type(error).__name__] += 1
            connections.close_all()
            time.sleep(0.5)

    def start_one(self) -> None:
        from studio.workflows import cancel_run, start_run

        rng, n = self.rng, sum(self.started.values()) + 1
        pick = rng.random()
        if pick < 0.35:
            run = start_run("place_call", {"call_id": f"call-{n}", "timeout": rng.choice(["2s", "10s", "30s"])})
            self.holding[run.id] = None if rng.random() < 0.15 else rng.uniform(0.2, 3)
        elif pick < 0.5:
            run = start_run("open_session", {"label": f"session-{n}", "timeout": rng.choice(["2s", "5s", "20s"])})
            self.holding[run.id] = None if rng.random() < 0.1 else rng.uniform(0.2, 2)
        elif pick < 0.75:
            run = start_run("sync_partner", {"label": f"sync-{n}", "timeout": rng.choice(["1s", "3s", "10s"])})
        else:
            report = {"report_id": f"report-{n}", "seconds": round(rng.uniform(0, 0.3), 3), "timeout": "60s"}
            run = start_run("export_report", report)
        self.started[run.workflow] += 1
        self.recent = [*self.recent[-200:], run.id]
        if rng.random() < 0.03 and self.recent:
            self.cancel_one(cancel_run)

    def cancel_one(self, cancel_run: Any) -> None:
        from studio.models import Run

        waiting = list(
            Run.objects.filter(id__in=self.recent, status="running", suspended=True).values_list("id", flat=True)[:5]
        )
        if waiting and cancel_run(self.rng.choice(waiting)):
            self.cancels += 1

    def follow_up(self) -> None:
        """Calls and sessions that finished with a slot get a `call_ended` run after their hold."""
        from studio.models import Run
        from studio.workflows import start_run

        now = time.monotonic()
        if self.holding:
            done = Run.objects.filter(id__in=list(self.holding), status__in=FINISHED).values_list("id", "output")
            for run_id, output in done:
                hold = self.holding.pop(run_id)
                slot_id = (output or {}).get("slot_id")
                if slot_id and hold is not None:
                    self.releases.append((now + hold, slot_id))
        for due, slot_id in sorted(r for r in self.releases if r[0] <= now):
            start_run("call_ended", {"slot_id": slot_id})
            self.releases.remove((due, slot_id))
            self.started["call_ended"] += 1

    def busy(self) -> bool:
        return bool(self.holding or self.releases)


# --- the checks -------------------------------------------------------------------------------------


def quiet(load: Load) -> dict[str, int]:
    """What still moves: runs pending or running, slots reserved, runs queued, releases to start."""
    from django.db.models import Sum

    from limits.models import Limit
    from studio.models import Run

    counts = Counter(Run.objects.exclude(status__in=FINISHED).values_list("status", flat=True))
    totals = Limit.objects.aggregate(reserved=Sum("reserved_count"), waiting=Sum("waiting_count"))
    return {
        "pending": counts["pending"],
        "running": counts["running"],
        "reserved": totals["reserved"] or 0,
        "queued": totals["waiting"] or 0,
        "releases": len(load.releases) + len(load.holding),
    }


def wait_for_quiet(load: Load, timeout: float, supervise: Any) -> tuple[bool, float]:
    began = time.monotonic()
    last_report = 0.0
    while True:
        supervise()
        load.guard(load.follow_up)
        try:
            state = quiet(load)
        except Exception as error:
            state = {"error": 1}
            log(f"quiet check failed: {type(error).__name__}: {error}")
        if not any(state.values()):
            return True, time.monotonic() - began
        if time.monotonic() - began > timeout:
            log(f"not quiet after {timeout:.0f} s: {state}")
            return False, time.monotonic() - began
        if time.monotonic() - last_report > 10:
            log(f"waiting for quiet: {state}")
            last_report = time.monotonic()
        time.sleep(1)


def outcomes() -> tuple[Counter[str], list[str]]:
    """Each run's outcome, and the problems: runs stranded (not finished) or failed for a reason
    other than a slot timeout."""
    from studio.models import Run

    counts: Counter[str] = Counter()
    problems: list[str] = []
    for run_id, workflow, status, output, error in Run.objects.values_list(
        "id", "workflow", "status", "output", "error"
    ):
        output = output if isinstance(output, dict) else {}
        if status == "completed":
            timed_out = output.get("timed_out") or ("slot_id" in output and output["slot_id"] is None)
            counts["timed out" if timed_out else "completed"] += 1
        elif status == "failed" and "SlotTimeoutError" in error:
            counts["timed out"] += 1  # export_report: with_limit re-raises the timeout
        elif status == "cancelled":
            counts["cancelled"] += 1
        elif status == "failed":
            counts["failed"] += 1
            problems.append(f"{run_id} ({workflow}) failed: {error.strip().splitlines()[-1] if error else '?'}")
        else:
            counts["stranded"] += 1
            problems.append(f"{run_id} ({workflow}) stranded: {status}")
    return counts, problems


def hand_off_figures() -> dict[str, float]:
    """From the rows: the longest a freed slot took to reach the queue, and the longest a
    reserved slot took to be confirmed by its woken run.

    A release, a run's end or a capacity raise hands the slot over in its own transaction (0 s);
    a slot past its max hold and an unconfirmed reservation are freed in principle at their
    expiry, and handed on by the next sweep. Counted only when a run was waiting then."""
    from limits.models import Limit, QueueEntry, Slot

    longest_free, confirms = 0.0, []
    for limit in Limit.objects.all():
        entries = list(QueueEntry.objects.filter(limit=limit).values_list("enqueued_at", "finished_at"))
        enqueued = sorted(e for e, f in entries if f != e)
        finished = sorted(f for e, f in entries if f is not None and f != e)
        slots = Slot.objects.filter(limit=limit).values_list(
            "state", "granted_at", "confirmed_at", "reserved_until", "expires_at", "freed_at", "queue_entry_id"
        )
        for state, granted, confirmed, reserved_until, expires, freed, entry in slots:
            if entry is not None and confirmed is not None:
                confirms.append((confirmed - granted).total_seconds())
            due = {"expired": expires, "lapsed": reserved_until}.get(state)
            if due is None or freed is None:
                continue
            waiting = bisect.bisect_right(enqueued, due) - bisect.bisect_right(finished, due)
            if waiting > 0:
                longest_free = max(longest_free, (freed - due).total_seconds())
    confirms.sort()
    return {
        "longest_free_to_queue_s": round(longest_free, 2),
        "confirm_p50_s": round(confirms[len(confirms) // 2], 3) if confirms else 0.0,
        "longest_confirm_s": round(confirms[-1], 2) if confirms else 0.0,
    }


def run_verify(env: dict[str, str]) -> tuple[int, list[str]]:
    done = subprocess.run(
        [PYTHON, "manage.py", "limits", "verify"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    lines = done.stdout.strip().splitlines()
    violations = lines[:-1] if done.returncode else []
    return done.returncode, violations + ([lines[-1]] if lines else []) + done.stderr.strip().splitlines()[-3:]


def log_errors(logs: Path) -> Counter[str]:
    """Error lines in the workers' and beats' logs, by their last words (for the report)."""
    found: Counter[str] = Counter()
    for path in sorted(logs.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if "ERROR/" in line or "CRITICAL/" in line or line.startswith(("Traceback", "django.db.utils")):
                found[f"{path.stem.split('-')[0]}: {line.strip()[-140:]}"] += 1
    return found


# --- main ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environment(args: argparse.Namespace) -> dict[str, str]:
    from urllib.parse import urlsplit, urlunsplit

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not base.startswith(("postgres://", "postgresql://")):
        raise SystemExit("the chaos run needs PostgreSQL: set DATABASE_URL=postgres://user@host:5432/<any>")
    database_url = urlunsplit(urlsplit(base)._replace(path=f"/{args.database}"))
    var = Path(args.logs).parent / "var"
    var.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
        "DJANGO_SETTINGS_MODULE": "studio.settings",
        "STACKBONE_WORKSPACE": "tests.chaos.workspace",
        "STACKBONE_VAR_DIR": str(var),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    env = environment(args)
    os.environ.update(env)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    for old in logs.glob("*.log"):
        old.unlink()

    from tests.bench.common import create_database

    log(f"seed {seed}; database {args.database}, Redis db {args.redis_db}, logs in {logs}")
    create_database(env["DATABASE_URL"])
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-n", str(args.redis_db), "flushdb"], check=True, capture_output=True
    )
    subprocess.run([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()

    port = free_port()
    box = Box(env, logs, port)
    began = time.monotonic()
    figures: dict[str, Any] = {"seed": seed}
    problems: list[str] = []
    try:
        box.start_web()
        for _ in range(args.workers):
            box.start_worker()
        box.start_beat()
        probe = WebProbe(port)
        _wait_for(lambda: probe.probe() == "200", 60, "the web app")
        probe.start()
        load = Load(rng, args)
        chaos = ChaosDriver(box, rng, args, expected_seconds=args.runs / args.rate)
        chaos.start()
        log(f"load: {args.runs} runs at ~{args.rate}/s, {args.workers} workers, web on port {port}")
        load.run()
        load_seconds = time.monotonic() - began
        chaos.stopping.set()
        chaos.join(timeout=120)
        chaos.supervise()
        log(f"load done in {load_seconds:.0f} s ({dict(load.started)}); waiting for quiet")
        calm, quiet_seconds = wait_for_quiet(load, args.quiet_timeout, chaos.supervise)
        probe.stopping.set()
        probe.join(timeout=10)

        counts, run_problems = outcomes()
        problems += run_problems
        if not calm:
            problems.append(f"not quiet after {args.quiet_timeout:.0f} s: {quiet(load)}")
        if quiet(load)["reserved"] or quiet(load)["queued"]:
            problems.append(f"left reserved or queued: {quiet(load)}")
        code, verify_lines = run_verify(env)
        violations = len(verify_lines) - 1 if code else 0
        if code:
            problems.append(f"limits verify exited {code}")
            problems += verify_lines[:20]
        if probe.probe() != "200":
            problems.append(f"the web app does not answer 200 at the end: {probe.probe()}")
        dead = [name for name in box.dead() if name in box.workers or name in ("web-1", "beat-1")]
        if dead:
            problems.append(f"processes that died on their own: {dead}")
        problems += chaos.errors
        figures.update(
            {
                "runs": sum(load.started.values()),
                "runs_by_workflow": dict(load.started),
                "outcomes": dict(counts),
                "cancelled_by_load": load.cancels,
                "worker_kills": chaos.figures.worker_kills,
                "redis_restarts": chaos.figures.redis_restarts,
                "postgres_restarts": chaos.figures.postgres_restarts,
                "second_beats": chaos.figures.second_beats,
                "capacity_changes": chaos.figures.capacity_changes,
                "worker_exits_restarted": len(chaos.figures.worker_exits),
                "load_errors": dict(load.errors),
                "web_probe": dict(probe.statuses),
                "load_seconds": round(load_seconds),
                "quiet_after_s": round(quiet_seconds),
                **hand_off_figures(),
                "violations": violations,
                "stranded": counts["stranded"],
                "verify": verify_lines[-1] if verify_lines else "",
            }
        )
        errors = log_errors(logs)
        figures["log_errors"] = sum(errors.values())
        for line, count in errors.most_common(8):
            log(f"{count:5d} x {line}")
    finally:
        box.stop_all()
    figures["seconds"] = round(time.monotonic() - began)
    report(figures, problems)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({**figures, "problems": problems}, indent=2, default=str))
    return 1 if problems else 0


def report(figures: dict[str, Any], problems: list[str]) -> None:
    width = max(len(key) for key in figures)
    print(f"chaos run, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    for key, value in figures.items():
        print(f"  {key.ljust(width)}  {value}")
    if problems:
        print(f"FAILED: {len(problems)} problem(s)")
        for problem in problems[:50]:
            print(f"  {problem}")
    else:
        print("OK: no violation, no run stranded, nothing left reserved or queued")


if __name__ == "__main__":
    sys.exit(main())
