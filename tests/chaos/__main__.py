"""python -m tests.chaos [--runs 2000] [--rate 8] [--redis-restarts 1] [--postgres-restarts 1]
                       [--connection-kills 4] [--redis-url redis://127.0.0.1:6379] [--pg-cluster 15/main]
                       [--skew 600] [--long-runs 6]

The whole box under load with real processes, while things crash (issue 8, section 3; issue 11),
with keys and several limits per acquisition (issue 13):

1. Create a database of its own (DATABASE_URL's server, database `stackbone_chaos` by default,
   dropped and created), empty its Redis database, migrate.
2. Start the web app (gunicorn), 3 Celery workers and beat, each in its own process group, and
   two more workers whose clock is `--skew` seconds (10 minutes) ahead and behind the machine's
   (the database's): tests/skew/sitecustomize.py moves their clocks (the clock-skew finding).
3. A load generator starts `--runs` runs of the shipped example workflows over the limits of
   tests/chaos/workspace.py: `place_call` and `open_session` (most released later by a
   `call_ended` run, some left to max hold), `export_report` (with_limit), `sync_partner` (short
   timeouts, so some time out), `partner_call` (with_limits over `partner-api` and
   `voice-calls`), most for one of four accounts (the key; `partner-api` has a pool of one per
   account), and cancels a few waiting runs; and of the chaos run's own workflows
   (tests/chaos/workflows.py): `chaos_with_limit`, `chaos_acquire` (one guarded limit),
   `chaos_with_limits` and `chaos_acquire_slots` (both guarded limits, in either order), most
   with a key, whose guarded step writes to a side file when it really starts and ends;
   `chaos_fair` on the fair limit `guarded-fair` (SPEC 13): a flooding tenant's runs in bursts
   of FLOOD_BURST, and small tenants' runs (a weight of 2, a min of 1, a pool of 1) between
   them, and once (issue 43's fault run, after TURN_AT of the runs) the fair limit paused while
   TURN_FLOOD runs of the flood and TURN_RUNS of each of ten tenants, one of weight 3, join its
   queue, then resumed; and, at the start of the load, `--long-runs` runs of `chaos_with_limit` over
   `guarded-long` whose step lasts longer than a run's lease (31-34 s), the first advance of
   each sent to a worker ahead, behind or on time in turn, while the load sends a duplicate
   advance of each every 3 s (a redelivered message: it must find the lease taken).
4. Meanwhile a chaos driver, at random moments: SIGKILLs a worker's process group and starts a
   new worker; starts a second beat for a while; has an operator change a capacity or a per-key
   pool, or pause `guarded-work` for 4-20 s and resume it; restarts Redis (`shutdown nosave`:
   every queued task is lost); restarts PostgreSQL; and, while a guarded step runs, terminates
   every backend of the chaos database (`pg_terminate_backend`, a cut connection).
5. When the load ends, wait (bounded) until the box is quiet: no run pending or running, nothing
   reserved or queued. Then check: every run completed, timed out or was cancelled (none
   stranded, none failed for another reason); `manage.py limits verify` finds no violation; the
   web app answers; the guarded steps never ran more at once than the capacity in force, nor
   more of one key than its pool, nor outside the granted interval of each of their slots, nor
   without a slot of every limit they asked for, and every grant of a group gave all its slots;
   on the fair limit, the same from the side files, no small tenant timed out while the flood
   was served, no grant out of SPEC 13.2's order (with the keys' turns), no turn that does not
   add up, no tenant served three turns while a competing one got fewer than two, and the
   figures of how the flood and the small tenants were served (fair_figures); in the fault run,
   while all eleven competed, the flood's share of the grants within 1.5 / 11 and the weight-3
   tenant's at least twice a weight-1 tenant's (fault_run_figures);
   while `guarded-work` was paused, its guarded steps under way never outnumbered the slots it
   held when the pause began, and none ran in a slot granted during the pause;
   the box's run concurrency (SPEC 12; tests/chaos/workspace.py declares a base and a burst that
   bind during the load): at no instant did more runs execute steps than floor(base x burst),
   nor more runs of one workflow than the base (every step of every run writes to the side
   files when it really runs), and some runs did wait for a box slot;
   no worker exited on its own, and every worker alive at a Redis restart went on consuming
   tasks after it. In the database's time (tests/chaos/clocks.py: a trigger writes each slot's
   and wait's changes with clock_timestamp()): no slot or wait stamped by a host's clock, no slot
   live past its max hold + 15 s nor a wait past its timeout + 15 s once a sweep passed after
   them, none taken back or timed out early, no grant after a timeout, no two executions of one
   step at once, no message discarded as expired before its expiry. Print the figures; exit 1 if
   any check failed.

WARNING: --redis-restarts and --postgres-restarts restart the Redis and the PostgreSQL cluster
that --redis-url and DATABASE_URL point to (every database and every client on them). Use 0 on
a shared machine, or point them to private instances.
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

from tests.chaos import clocks
from tests.chaos.records import RECORDS_ENV, Records
from tests.skew.sitecustomize import SKEW_ENV

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
FINISHED = ("completed", "failed", "cancelled", "skipped", "replaced")
SINGLE_WORKFLOWS = ("chaos_with_limit", "chaos_acquire")
GUARDED_WORKFLOWS = (*SINGLE_WORKFLOWS, "chaos_with_limits", "chaos_acquire_slots")
PAUSED_LIMIT = "guarded-work"  # the limit the chaos driver pauses and resumes (SPEC 5.6)
GUARDED_LIMITS = ("guarded-work", "guarded-keyed")
BOUNDED_WORKFLOW = "chaos_bounded"  # tests/chaos/workflows.py: guarded work under a whole-run bound
FAIR_LIMIT = "guarded-fair"  # tests/chaos/workspace.py: shared fairly between keys (SPEC 13)
FAIR_WORKFLOW = "chaos_fair"  # tests/chaos/workflows.py: a tenant's guarded work on it
FLOOD = "flood"  # the tenant that floods the fair limit, FLOOD_BURST runs at once
FLOOD_BURST = 8
SMALL_TENANTS = ("small-1", "small-2", "small-3", None)  # None: runs without a key, a key of their own
# Issue 43's fault run inside the load, once: the fair limit paused, TURN_FLOOD runs of the flood
# and then TURN_RUNS runs of each of ten tenants (in rounds, `heavy`, of weight 3, last in each)
# join its queue, and it is resumed: eleven keys on a capacity of 4, so most grants are ties in
# share that the turns decide (fault_run_figures).
TURN_TENANTS = (*(f"light-{i}" for i in range(1, 10)), "heavy")
TURN_HEAVY = "heavy"
TURN_RUNS = 6
TURN_FLOOD = 16
# Sent once this share of the load's runs has started: after the planned Redis and PostgreSQL
# restarts (15-85 % of the expected load), so that the shares it measures, which assume holds of
# about one length, can be judged; worker kills and cut connections go on while its runs join.
TURN_AT = 0.86
TURN_JOIN_S = 20.0  # the longest the fair limit stays paused, once they are all sent, while they join its queue
TURN_SEND_S = 60.0  # the longest their sending may take (start_run: 0.1-0.5 s each on a loaded machine)
TURN_TIMEOUT = "110s"  # below the owed delay (SPEC 10.4: 2 minutes), so 13.2's order holds throughout
TURN_STEP_S = (0.3, 1.0)  # their guarded steps: shorter than the others', so the shape drains sooner
STRETCHED_HOLD_S = 10.0  # a hold this long among them (a worker killed in its step): shares not judged
TURN_MIN_GRANTS = 16  # fewer grants while all eleven competed: too few to judge shares by
RECONNECT_GRACE_S = 60  # a worker back on Redis within this takes a task (worker_figures)
STALL_SECONDS = 120.0  # the load gives up when no run could be started for this long
LONG_LIMIT = "guarded-long"  # tests/chaos/workspace.py: the long steps' limit
LONG_STEP = (31.0, 34.0)  # seconds: longer than a run's lease (30 s, stackbone.runs.runtime.LEASE)
DUPLICATE_EVERY = 3.0  # seconds between two duplicate advances of each long run
SKEW_ROLES = ("behind", "ahead", "on-time")  # whose worker the long runs' first advances go to, in turn


@dataclass(frozen=True)
class Targets:
    """The Redis and the PostgreSQL cluster the run uses, and restarts."""

    redis_host: str
    redis_port: int
    pg_host: str
    pg_port: int
    pg_cluster: tuple[str, str]  # (version, name) for pg_ctlcluster


def resolve_targets(args: argparse.Namespace, database_url: str) -> Targets:
    from urllib.parse import urlsplit

    redis_url = args.redis_url or os.environ.get("CELERY_BROKER_URL", "")
    if not redis_url.startswith("redis://"):
        redis_url = "redis://127.0.0.1:6379"
    redis = urlsplit(redis_url)
    database = urlsplit(database_url)
    pg_port = database.port or 5432
    if args.pg_cluster:
        version, _, name = args.pg_cluster.partition("/")
        cluster = (version, name or "main")
    else:
        cluster = _cluster_on_port(pg_port)
    return Targets(
        redis.hostname or "127.0.0.1", redis.port or 6379, database.hostname or "127.0.0.1", pg_port, cluster
    )


def _cluster_on_port(port: int) -> tuple[str, str]:
    """The local cluster pg_lsclusters lists on `port` (Debian's postgresql-common)."""
    with contextlib.suppress(OSError):
        listed = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            version, name, cluster_port, *_ = line.split()
            if int(cluster_port) == port:
                return version, name
    return sorted(os.listdir("/etc/postgresql"))[-1], "main"


def clock_role(skew: float) -> str:
    return "on-time" if not skew else ("ahead" if skew > 0 else "behind")


def clock_queue(skew: float) -> str:
    """The queue only the workers of one clock (on time, ahead, behind) consume, besides the box's."""
    from django.conf import settings

    return f"{getattr(settings, 'CELERY_TASK_DEFAULT_QUEUE', 'celery')}-clock-{clock_role(skew)}"


def log(message: str) -> None:
    print(f"chaos {time.strftime('%H:%M:%S')} | {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description="The box under load while it crashes.")
    parser.add_argument("--runs", type=int, default=2000, help="runs to start, follow-up call_ended runs aside")
    parser.add_argument("--rate", type=float, default=8.0, help="runs started per second (default 8)")
    parser.add_argument("--workers", type=int, default=3, help="Celery workers (default 3)")
    parser.add_argument("--redis-restarts", type=int, default=1, help="restarts of the real Redis (default 1)")
    parser.add_argument("--postgres-restarts", type=int, default=1, help="restarts of the real PostgreSQL (default 1)")
    parser.add_argument(
        "--connection-kills",
        type=int,
        default=4,
        help="times every backend of the chaos database is terminated during a guarded step (default 4)",
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="the Redis to use and restart (default: CELERY_BROKER_URL if redis://, else redis://127.0.0.1:6379)",
    )
    parser.add_argument(
        "--pg-cluster",
        default=None,
        help="the cluster to restart, as VERSION/NAME (default: the one pg_lsclusters lists on DATABASE_URL's port)",
    )
    parser.add_argument(
        "--clock-tolerance",
        type=float,
        default=0.05,
        help="seconds of slack when comparing step times with slot times (default 0.05)",
    )
    parser.add_argument(
        "--skew",
        type=float,
        default=600.0,
        help="one more worker this many seconds ahead of the database's clock and one behind (default 600; 0: none)",
    )
    parser.add_argument(
        "--long-runs",
        type=int,
        default=6,
        help="with_limit runs whose step outlasts a run's lease (31-34 s), spread over the clocks (default 6)",
    )
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
        self.skews: dict[str, float] = {}  # worker name -> its clock's skew (s)
        self.counter = Counter[str]()
        self.lock = threading.Lock()

    def spawn(self, kind: str, argv: list[str], env: dict[str, str] | None = None) -> str:
        with self.lock:
            self.counter[kind] += 1
            name = f"{kind}-{self.counter[kind]}"
            handle = (self.logs / f"{name}.log").open("wb")
            self.processes[name] = subprocess.Popen(
                argv, cwd=ROOT, env=env or self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
            handle.close()
            return name

    def start_web(self) -> str:
        return self.spawn(
            "web",
            [PYTHON, "-m", "gunicorn", "studio.wsgi", "--bind", f"127.0.0.1:{self.port}", "--workers", "2"],
        )

    def start_worker(self, skew: float = 0.0) -> str:
        """A worker (2 processes; 3 for a skewed one) consuming the box's queues and the queue of
        its clock (`clock_queue`); with a skew, its clock is that many seconds off the machine's
        (tests/skew/sitecustomize.py, on its PYTHONPATH only)."""
        from django.conf import settings

        index = self.counter["worker"] + 1
        queues = [q.name for q in getattr(settings, "CELERY_TASK_QUEUES", None) or []]
        queues = (queues or [getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")]) + [clock_queue(skew)]
        env = dict(self.env)
        if skew:
            env[SKEW_ENV] = f"{skew:g}"
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "skew"), env["PYTHONPATH"]])
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
                f"--concurrency={3 if skew else 2}",
                f"--hostname=chaos-{index}{f'-{clock_role(skew)}' if skew else ''}@%h",
                "--without-gossip",
                "--without-mingle",
                "--include=tests.chaos.records",  # each pool process records the tasks it runs
                f"--queues={','.join(queues)}",
            ],
            env=env,
        )
        self.workers.append(name)
        self.skews[name] = skew
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
    per_key_changes: int = 0
    pauses: int = 0
    worker_exits: list[str] = field(default_factory=list)  # exited on their own (a failure); restarted
    outages: list[tuple[str, float, float]] = field(default_factory=list)  # (what, start, end) monotonic
    # Redis restarts: (began, back, {worker name: pid} alive when it began), wall-clock times
    redis_windows: list[tuple[float, float, dict[str, int]]] = field(default_factory=list)
    killed_at: dict[str, float] = field(default_factory=dict)  # worker name -> when the driver SIGKILLed it


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
        self.resume_at: float | None = None  # while PAUSED_LIMIT is paused: when to resume it
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
            self.resume(until=time.monotonic() + 90)

    def supervise(self) -> None:
        """A worker that exited on its own is a failure (issue 11: a worker must ride out a
        Redis or PostgreSQL restart); it is counted, and started again so the load goes on."""
        for name in list(self.box.workers):
            if self.box.processes[name].poll() is not None:
                self.box.workers.remove(name)
                self.figures.worker_exits.append(name)
                log(f"{name} exited on its own (code {self.box.processes[name].returncode}); starting another")
                self.box.start_worker(self.box.skews.get(name, 0.0))

    def tick(self) -> None:
        self.supervise()
        elapsed = time.monotonic() - self.started
        if self.second_beat is not None and time.monotonic() >= self.second_beat[1]:
            self.end_second_beat()
        if self.resume_at is not None and time.monotonic() >= self.resume_at:
            self.resume()
        if self.plan and elapsed >= self.plan[-1][0]:
            _, what = self.plan.pop()
            self.restart_redis() if what == "redis" else self.restart_postgres()
        elif self.resume_at is None and (not self.figures.pauses or self.rng.random() < 0.15):
            self.pause()  # the first tick pauses, so every run has at least one pause
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
        self.figures.killed_at[victim] = time.time()
        self.box.kill(victim)
        replacement = self.box.start_worker(self.box.skews.get(victim, 0.0))  # a clock as wrong
        self.figures.worker_kills += 1
        log(f"SIGKILLed {victim}, started {replacement}")

    def change_capacity(self) -> None:
        """An operator lowers or raises a capacity, or resets it (lowering takes no slot back);
        or, one time in three, the per-key pool of `partner-api`, or one account's pool (9.4)."""
        from django.db import connections

        from limits import services

        try:
            if self.rng.random() < 1 / 3:
                key = self.rng.choice([None, "acct-1"])
                pool = self.rng.choice([None, 1, 2])
                services.set_per_key("partner-api", pool, key=key, actor="chaos")
                self.figures.per_key_changes += 1
                log(f"per-key pool of partner-api{f' key {key}' if key else ''}: {pool or 'reset'}")
                return
            name = self.rng.choice(["voice-calls", "partner-api"])
            value = self.rng.choice([None, 1, 2, 3, 6])
            services.set_capacity(name, value, actor="chaos")
        except Exception as error:  # the database may be restarting; a pool above the capacity is refused
            log(f"operator change failed: {type(error).__name__}: {error}")
            connections.close_all()
            return
        self.figures.capacity_changes += 1
        log(f"capacity of {name}: {value or 'reset'}")

    def pause(self) -> None:
        """An operator pauses PAUSED_LIMIT for 4-10 s (SPEC 5.6; resumed at the next tick after
        that, so a pause lasts up to ~20 s): its guarded steps under way go on, none may start in
        a slot granted meanwhile (pause_figures)."""
        from django.db import connections

        from limits import services

        try:
            services.pause_limit(PAUSED_LIMIT, actor="chaos")
        except Exception as error:  # the database may be restarting
            log(f"pause failed: {type(error).__name__}: {error}")
            connections.close_all()
            return
        self.resume_at = time.monotonic() + self.rng.uniform(4, 10)
        self.figures.pauses += 1
        log(f"paused {PAUSED_LIMIT}")

    def resume(self, until: float = 0.0) -> None:
        """Resume PAUSED_LIMIT if this driver paused it; a failed call is tried again at the next
        tick (or, when the chaos ends, until `until`): a limit left paused would strand its runs."""
        from django.db import connections

        from limits import services

        while self.resume_at is not None:
            try:
                services.resume_limit(PAUSED_LIMIT, actor="chaos")
            except Exception as error:
                log(f"resume failed: {type(error).__name__}: {error}")
                connections.close_all()
                if time.monotonic() >= until:
                    return
                time.sleep(1)
                continue
            self.resume_at = None
            log(f"resumed {PAUSED_LIMIT}")

    def end_second_beat(self) -> None:
        if self.second_beat is not None:
            self.box.stop(self.second_beat[0])
            log(f"stopped the second beat ({self.second_beat[0]})")
            self.second_beat = None

    def restart_redis(self) -> None:
        """Shut Redis down (every queued task is lost) and start it again on the same port. The
        workers alive now must ride it out: same processes, consuming again afterwards."""
        targets = self.args.targets
        began, wall = time.monotonic(), time.time()
        alive = {name: self.box.processes[name].pid for name in self.box.workers}
        log(f"restarting Redis on port {targets.redis_port} (shutdown nosave: every queued task is lost)")
        cli = ["redis-cli", "-h", targets.redis_host, "-p", str(targets.redis_port)]
        subprocess.run([*cli, "shutdown", "nosave"], capture_output=True)
        time.sleep(self.rng.uniform(1, 4))
        subprocess.run(redis_start(targets, Path(self.args.logs)), check=True, capture_output=True)
        _wait_for(lambda: _run_ok([*cli, "ping"]), 30, "Redis to answer")
        self.figures.redis_restarts += 1
        self.figures.outages.append(("redis", began, time.monotonic()))
        self.figures.redis_windows.append((wall, time.time(), alive))
        log(f"Redis back after {time.monotonic() - began:.1f} s")

    def restart_postgres(self) -> None:
        targets = self.args.targets
        began = time.monotonic()
        version, cluster = targets.pg_cluster
        log(f"restarting PostgreSQL {version}/{cluster}")
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "restart"], check=True, capture_output=True
        )
        ready = ["pg_isready", "-h", targets.pg_host, "-p", str(targets.pg_port), "-q"]
        _wait_for(lambda: _run_ok(ready), 60, "PostgreSQL")
        self.figures.postgres_restarts += 1
        self.figures.outages.append(("postgres", began, time.monotonic()))
        log(f"PostgreSQL back after {time.monotonic() - began:.1f} s")


def redis_start(targets: Targets, logs: Path) -> list[str]:
    return [
        "redis-server",
        "--daemonize",
        "yes",
        "--bind",
        "127.0.0.1",
        "-::1",
        "--port",
        str(targets.redis_port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(logs.parent),
        "--logfile",
        str(logs.parent / f"redis-{targets.redis_port}.log"),
    ]


def _run_ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True).returncode == 0


def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {seconds:.0f} s")
        time.sleep(0.2)


class ConnectionKiller(threading.Thread):
    """At `--connection-kills` random moments spread over the load, wait (at most 15 s) until a
    guarded step is under way, then terminate every backend of the chaos database but its own:
    a cut connection, as a failover, an idle-connection killer or a pooler would cut it. The
    worker running the step finds its connection dead when it records the step (issue 11)."""

    def __init__(self, rng: random.Random, args: argparse.Namespace, expected_seconds: float) -> None:
        super().__init__(daemon=True, name="connection-killer")
        self.args = args
        self.records = Records(Path(os.environ[RECORDS_ENV]))
        self.plan = sorted(expected_seconds * rng.uniform(0.1, 0.9) for _ in range(args.connection_kills))
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.kills = 0
        self.backends = 0
        self.missed = 0  # no guarded step under way within 15 s of the planned moment

    def run(self) -> None:
        for at in self.plan:
            if self.stopping.wait(max(0.0, self.started + at - time.monotonic())):
                return
            deadline = time.monotonic() + 15
            while not self.stopping.is_set():
                running = self.records.read().running(time.time(), min_age=0.2, min_left=0.3)
                if running:
                    self.kill(running)
                    break
                if time.monotonic() > deadline:
                    self.missed += 1
                    log("connection kill: no guarded step under way within 15 s; skipped")
                    break
                time.sleep(0.1)

    def kill(self, running: list[dict[str, Any]]) -> None:
        import psycopg

        from tests.bench.common import psycopg_dsn

        try:
            with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute(
                    "select pg_terminate_backend(pid) from pg_stat_activity"
                    " where datname = current_database() and pid <> pg_backend_pid()"
                ).fetchall()
        except Exception as error:  # PostgreSQL may be restarting
            log(f"connection kill failed: {type(error).__name__}: {error}")
            return
        self.kills += 1
        self.backends += sum(1 for (done,) in rows if done)
        log(f"terminated {len(rows)} backend(s) during {len(running)} guarded step(s)")


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
        self.last_error = ""
        self.stalled = ""  # why the load gave up (no run could be started for STALL_SECONDS)
        # The long runs: (seconds into the load, the skew of the worker their first advance goes to).
        skew = float(getattr(args, "skew", 0.0) or 0.0)
        skews = {"behind": -skew, "ahead": skew, "on-time": 0.0}
        self.long_plan = [(1.0 + i, skews[SKEW_ROLES[i % 3]]) for i in range(getattr(args, "long_runs", 0))]
        self.long_runs: dict[str, float] = {}  # run id -> the skew of the worker its first advance went to
        self.duplicates = 0
        self.last_duplicates = 0.0
        # Issue 43's fault run: its runs in the order they are sent, how many were, and its phase
        # (planned, joining: the fair limit paused while they join its queue, done).
        self.turn_plan = [(FLOOD, i) for i in range(TURN_FLOOD)]
        self.turn_plan += [(tenant, i) for i in range(TURN_RUNS) for tenant in TURN_TENANTS]
        self.turn_runs: list[str] = []
        self.turn_phase = "planned"
        self.turn_paused_at = self.turn_resume_at = 0.0
        self.turn_paused_s = 0.0

    def run(self) -> None:
        began = next_start = last_started = time.monotonic()
        while (done := sum(self.started[w] for w in self.started if w != "call_ended")) < self.args.runs:
            now = time.monotonic()
            if self.long_plan and now - began >= self.long_plan[0][0]:
                self.guard(self.start_long)
            self.guard(self.duplicate_long)
            self.guard(self.fault_run)
            if now >= next_start:
                self.guard(self.start_one)
                next_start += self.rng.expovariate(self.args.rate)
            if sum(self.started[w] for w in self.started if w != "call_ended") > done:
                last_started = now
            elif now - last_started > STALL_SECONDS:  # bounded: a load that cannot start fails the run
                self.stalled = f"no run could be started for {STALL_SECONDS:.0f} s: {self.last_error}"
                log(f"load: {self.stalled}")
                return
            self.guard(self.follow_up)
            time.sleep(max(0.0, min(next_start - time.monotonic(), 0.05)))

    def guard(self, work: Any) -> None:
        """A database or broker outage makes a call fail: count it and go on, as a client would."""
        from django.db import connections

        try:
            work()
        except Exception as error:
            name = type(error).__name__
            self.errors[name] += 1
            self.last_error = f"{name}: {str(error).strip()[:200]}"
            if self.errors[name] in (1, 10, 100):  # say what it is, without a line per failure
                log(f"load: {name} ({self.errors[name]}): {str(error).strip()[:200]}")
            connections.close_all()
            time.sleep(0.5)

    def start_one(self) -> None:
        from studio.workflows import cancel_run, start_run

        rng, n = self.rng, sum(self.started.values()) + 1
        pick = rng.random()
        if pick < 0.27:
            call = {"call_id": f"call-{n}", "timeout": rng.choice(["2s", "10s", "30s"]), "account": self.account()}
            run = start_run("place_call", call)
            self.holding[run.id] = None if rng.random() < 0.15 else rng.uniform(0.2, 3)
        elif pick < 0.4:
            session = {"label": f"session-{n}", "timeout": rng.choice(["2s", "5s", "20s"]), "account": self.account()}
            run = start_run("open_session", session)
            self.holding[run.id] = None if rng.random() < 0.1 else rng.uniform(0.2, 2)
        elif pick < 0.58:
            sync = {"label": f"sync-{n}", "timeout": rng.choice(["1s", "3s", "10s"]), "account": self.account()}
            run = start_run("sync_partner", sync)
        elif pick < 0.64:  # partner-api (the account's pool) and voice-calls at once
            call = {"call_id": f"bridge-{n}", "account": self.account() or "acct-1", "timeout": "10s"}
            run = start_run("partner_call", {**call, "seconds": round(rng.uniform(0, 0.3), 3)})
        elif pick < 0.76:
            report = {"report_id": f"report-{n}", "seconds": round(rng.uniform(0, 0.3), 3), "timeout": "60s"}
            run = start_run("export_report", report)
        elif pick < 0.84:  # the fair limit: a small tenant's run, or a burst of the flood's
            self.start_fair(n)
            return
        elif pick < 0.93:  # guarded steps long enough for a connection kill to land in them
            run = start_run(*self.guarded(n))
        else:  # the same under a whole-run bound: queued before its first step (SPEC 11)
            key = self.rng.choice([None, "tenant-1", "tenant-1", "tenant-2"])
            bounded = {"label": f"bounded-{n}", "seconds": round(rng.uniform(0.5, 1.5), 3), "key": key}
            # SPEC 14.4, one start in four: cancel the key's oldest run holding the bound, whose
            # guarded step must still never overlap this run's (guarded_max_per_key, from the side
            # files); SPEC 14.3, another one in four: the key's runs queued to start end 'replaced'
            roll = rng.random()
            on_full = "cancel_running" if roll < 0.25 else "replace" if roll < 0.5 else None
            run = start_run(BOUNDED_WORKFLOW, bounded, concurrency_key=key, on_full=on_full)
        self.started[run.workflow] += 1
        self.recent = [*self.recent[-200:], run.id]
        if rng.random() < 0.03 and self.recent:
            self.cancel_one(cancel_run)

    def start_fair(self, n: int) -> None:
        """One run of a small tenant on the fair limit, or (one time in eight) FLOOD_BURST runs of
        the flooding tenant at once: the burst fills the limit and queues, and the small runs
        that arrive before it drains wait behind its backlog (fair_figures)."""
        from studio.workflows import start_run

        rng = self.rng
        burst = rng.random() < 1 / 8
        for i in range(FLOOD_BURST if burst else 1):
            key = FLOOD if burst else rng.choice(SMALL_TENANTS)
            fair = {"label": f"fair-{n}-{i}", "seconds": round(rng.uniform(0.5, 1.5), 3), "timeout": "90s", "key": key}
            run = start_run(FAIR_WORKFLOW, fair)
            self.started[run.workflow] += 1
            self.recent = [*self.recent[-200:], run.id]

    def fault_run(self) -> None:
        """Issue 43's fault run, once the load has started TURN_AT of its runs: pause the fair
        limit, send the flood's TURN_FLOOD runs and then the ten tenants' in rounds, and resume
        it once all of them wait in its queue (at most TURN_JOIN_S after the last was sent; with
        the runs sent by then once TURN_SEND_S + TURN_JOIN_S went by since the pause): every key
        has joined when the first slot is granted, as in the issue, and the box's start of ~80
        runs does not spread their arrivals over the grants. A failed call (an outage) is tried
        again at the next step, where it stopped; `end_fault_run` resumes the limit whatever
        happens."""
        from limits import services
        from limits.models import QueueEntry
        from studio.workflows import start_run

        done = sum(self.started[w] for w in self.started if w != "call_ended")
        if self.turn_phase == "planned" and done >= TURN_AT * self.args.runs:
            services.pause_limit(FAIR_LIMIT, actor="chaos-load")
            self.turn_phase, self.turn_paused_at = "joining", time.monotonic()
            self.turn_resume_at = self.turn_paused_at + TURN_JOIN_S + TURN_SEND_S
            log(f"fault run: paused {FAIR_LIMIT}; sending {len(self.turn_plan)} runs of 11 tenants")
        if self.turn_phase != "joining":
            return
        if len(self.turn_runs) < len(self.turn_plan):
            while len(self.turn_runs) < len(self.turn_plan) and time.monotonic() < self.turn_resume_at:
                key, i = self.turn_plan[len(self.turn_runs)]
                seconds = round(self.rng.uniform(*TURN_STEP_S), 3)
                turn = {"label": f"turn-{key}-{i}", "seconds": seconds, "timeout": TURN_TIMEOUT, "key": key}
                run = start_run(FAIR_WORKFLOW, turn)
                self.started[run.workflow] += 1
                self.turn_runs.append(run.id)
            self.turn_resume_at = min(self.turn_resume_at, time.monotonic() + TURN_JOIN_S)
        joined = QueueEntry.objects.filter(limit__name=FAIR_LIMIT, run_id__in=self.turn_runs, state="waiting")
        if joined.values("run_id").distinct().count() >= len(self.turn_runs) or time.monotonic() >= self.turn_resume_at:
            self.end_fault_run()

    def finish_fault_run(self, until: float) -> None:
        """Once the load has sent its runs: let the fault run's runs join (bounded by TURN_JOIN_S
        from its pause), then resume the fair limit (tried until `until`)."""
        while self.turn_phase == "joining" and time.monotonic() < self.turn_resume_at:
            self.guard(self.fault_run)
            time.sleep(0.2)
        self.end_fault_run(until)

    def end_fault_run(self, until: float = 0.0) -> None:
        """Resume the fair limit if the fault run paused it; tried again until `until` (a limit
        left paused would strand its runs)."""
        from django.db import connections

        from limits import services

        while self.turn_phase == "joining":
            try:
                services.resume_limit(FAIR_LIMIT, actor="chaos-load")
            except Exception as error:
                if time.monotonic() >= until:
                    raise
                log(f"fault run: resume failed: {type(error).__name__}: {error}")
                connections.close_all()
                time.sleep(1)
                continue
            self.turn_paused_s = round(time.monotonic() - self.turn_paused_at, 1)
            self.turn_phase = "done"
            log(f"fault run: resumed {FAIR_LIMIT} after {self.turn_paused_s} s ({len(self.turn_runs)} runs sent)")

    def start_long(self) -> None:
        """A with_limit run over `guarded-long` whose step outlasts a run's lease, its first
        advance (its grant and its step) on a worker of the planned clock."""
        from studio.workflows import start_run

        _, skew = self.long_plan[0]
        n = len(self.long_runs) + 1
        seconds = round(self.rng.uniform(*LONG_STEP), 3)
        long = {"label": f"long-{n}-{clock_role(skew)}", "seconds": seconds, "timeout": "90s", "limits": [LONG_LIMIT]}
        with clocks.first_advance_on(clock_queue(skew)):
            run = start_run("chaos_with_limit", long)
        self.long_plan.pop(0)
        self.long_runs[run.id] = skew
        self.started["chaos_with_limit (long)"] += 1

    def duplicate_long(self) -> None:
        """Every DUPLICATE_EVERY s, one more advance of each long run under way (not waiting), as
        a redelivered message: it must find the run's lease taken, whatever the clock of the worker
        that holds it or of the one that takes the duplicate."""
        from celery import current_app

        from stackbone.models import Run

        if not self.long_runs or time.monotonic() - self.last_duplicates < DUPLICATE_EVERY:
            return
        self.last_duplicates = time.monotonic()
        under_way = Run.objects.filter(id__in=list(self.long_runs), status="running", suspended=False)
        for run_id in under_way.values_list("id", flat=True):
            current_app.send_task("studio.tasks.advance_run", [run_id])
            self.duplicates += 1

    def account(self) -> str | None:
        """A key for the example workflows: four accounts, one of them busy, or none."""
        return self.rng.choices([None, "acct-1", "acct-2", "acct-3", "acct-4"], [2, 4, 2, 1, 1])[0]

    def guarded(self, n: int) -> tuple[str, dict[str, Any]]:
        """One of the guarded workflows: a single limit (either guarded limit), or both in either
        order (crossing orders: A+B and B+A wait in the same queues); a key of three, or none."""
        rng = self.rng
        workflow = rng.choice(GUARDED_WORKFLOWS)
        limits = list(GUARDED_LIMITS)
        rng.shuffle(limits)
        if workflow in SINGLE_WORKFLOWS:
            limits = limits[:1]
        key = rng.choice([None, "tenant-1", "tenant-1", "tenant-2", "tenant-3"])
        guarded = {"label": f"guarded-{n}", "seconds": round(rng.uniform(0.5, 2.0), 3), "timeout": "90s"}
        roll = rng.random()
        if workflow in SINGLE_WORKFLOWS and roll < 0.15:
            guarded["on_full"] = "skip"  # SPEC 14.2: answered at once when full, the work not run
        elif workflow in SINGLE_WORKFLOWS and roll < 0.5:
            guarded["on_full"] = "replace"  # SPEC 14.3: the key's runs waiting are replaced, their work not run
        return workflow, {**guarded, "limits": limits, "key": key}

    def cancel_one(self, cancel_run: Any) -> None:
        from stackbone.models import Run

        waiting = list(
            Run.objects.filter(id__in=self.recent, status__in=["running", "queued"], suspended=True).values_list(
                "id", flat=True
            )[:5]
        )
        if waiting and cancel_run(self.rng.choice(waiting)):
            self.cancels += 1

    def follow_up(self) -> None:
        """Calls and sessions that finished with a slot get a `call_ended` run after their hold."""
        from stackbone.models import Run
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
    from stackbone.models import Run

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
        load.guard(load.duplicate_long)
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
    """Each run's outcome, and the problems: runs stranded (not finished), failed for a reason
    other than a slot timeout, or ended skipped or replaced (SPEC 14) after they started."""
    from stackbone.models import Run

    counts: Counter[str] = Counter()
    problems: list[str] = []
    for run_id, workflow, status, output, error, started_at in Run.objects.values_list(
        "id", "workflow", "status", "output", "error", "started_at"
    ):
        output = output if isinstance(output, dict) else {}
        if status == "completed":
            timed_out = output.get("timed_out") or ("slot_id" in output and output["slot_id"] is None)
            counts["timed out" if timed_out else "completed"] += 1
        elif status == "failed" and "SlotTimeoutError" in error:
            counts["timed out"] += 1  # export_report: with_limit re-raises the timeout
        elif status == "cancelled":
            counts["cancelled"] += 1
        elif status in ("skipped", "replaced"):  # SPEC 14: ended before it started, never ran
            counts[status] += 1
            if started_at is not None:
                problems.append(f"{run_id} ({workflow}) ended {status} after it started")
        elif status == "failed":
            counts["failed"] += 1
            problems.append(f"{run_id} ({workflow}) failed: {error.strip().splitlines()[-1] if error else '?'}")
        else:
            counts["stranded"] += 1
            problems.append(f"{run_id} ({workflow}) stranded: {status}")
    return counts, problems


def database_figures() -> tuple[dict[str, int], list[str]]:
    """Deadlocks in the chaos database, from PostgreSQL's own count (pg_stat_database, kept across
    a clean restart): the engine takes the row locks of limits in id order (limits.engine.keys),
    so two acquisitions, even of crossing limits, never deadlock. A deadlock's victim is retried
    (an interruption) and nothing shows in the rows, hence this count."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        (deadlocks,) = cursor.fetchone()
    problems = [f"{deadlocks} deadlock(s) in the chaos database (pg_stat_database)"] if deadlocks else []
    return {"deadlocks": int(deadlocks)}, problems


def sweep_figures(records: Records, began: float, ended: float) -> dict[str, float]:
    """How many sweeps began (from the side files), and the longest time without one: beat sends
    one every 15 s, and one that waits more than 14 s behind other tasks expires unrun."""
    starts = sorted(task["t"] for task in records.tasks if task["task"] == "limits.tasks.sweep")
    moments = [began, *starts, ended]
    return {
        "sweeps": len(starts),
        "longest_without_sweep_s": round(max(b - a for a, b in zip(moments, moments[1:], strict=False)), 1),
    }


def wait_figures() -> dict[str, int]:
    """From the rows: how many acquisitions waited with a key, and for several limits at once
    (SPEC 9, 10), and how many of those waited after being passed over (10.4)."""
    from limits.models import QueueEntry

    entries = QueueEntry.objects.all()
    return {
        "keyed_waits": entries.exclude(key="").values("request").distinct().count(),
        "group_waits": entries.filter(group_size__gt=1).values("request").distinct().count(),
        "passed_over": entries.filter(passed_over_at__isnull=False).values("request").distinct().count(),
    }


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


def executions_of(records: Records, died: dict[int, float] | None = None) -> list[dict[str, Any]]:
    """Every execution of a guarded step from the side files: its start line with `limits`,
    `claimed` ([limit, slot id] per limit), `ended` (its end line's time, or None) and `end`: its
    end, or for one without an end line (SIGKILLed) start + planned seconds, or when its worker
    was SIGKILLed if that came first (`died`: worker pid, the pool's parent, -> when)."""
    executions = []
    for key, start in records.starts.items():
        end = records.ends.get(key)
        limits = start.get("limits") or [start["limit"]]
        claimed = start.get("slots") or [[start["limit"], start.get("slot_id")]]
        last = start["t"] + start["planned"]
        killed = (died or {}).get(start.get("ppid", -1))
        if killed is not None and start["t"] <= killed < last:
            last = killed
        executions.append(
            {**start, "limits": limits, "claimed": claimed, "end": end if end is not None else last, "ended": end}
        )
    return executions


def guarded_figures(
    records: Records, tolerance: float, died: dict[int, float] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """From the side files and the slot rows: the guarded steps never ran more at once than the
    capacity in force, nor more of one key than its pool; each ran inside the granted interval
    [granted_at, freed_at] of EACH of its slots, holding a slot of every limit it asked for; and
    every grant of a group gave all its slots at once.

    1. Each execution is [start, end] from its own process's records; one SIGKILLed before its
       end ran at most its planned seconds, so [start, start + planned], and not past the moment
       its worker was SIGKILLed (`died`, executions_of).
    2. Its slots are the ones its body's handles name (a [limit, slot id] per limit asked for),
       else the one of its run and limit whose interval holds its start. Outside: for any of
       them, no slot at all, a slot of another run, start < granted_at - tolerance, or end >
       freed_at + tolerance. A handle naming a limit its slot is not of is counted apart
       (mislabelled: SPEC 10.1 gives the handles in the order given); the step is then judged on
       the slot's real limit. An execution without a slot of some limit it asked for is partial.
    3. Overlap: a sweep over the executions on each limit (counted on every limit they hold),
       each shrunk by the tolerance at both ends. When one starts, the executions under way must
       be at most the largest capacity in force since the earliest of them started (lowering
       capacity takes no slot back), from the audit rows (`capacity_after`); and, on a limit with
       key pools, those of its key at most the pool's size (no operator changes the guarded
       limits' pools: the size in force now).
    4. Groups, from the rows: every grant of an acquisition of several limits (same request,
       same instant) gave one slot of each of its distinct limits.
    The tolerance covers clock reads in different processes of one machine; steps last >= 0.5 s.
    """
    from limits.models import AuditEvent, Limit, LimitKey, Slot

    executions = executions_of(records, died)
    figures: dict[str, Any] = {
        "guarded_executions": len(executions),
        "guarded_group_executions": sum(1 for e in executions if len(e["limits"]) > 1),
        "guarded_keyed_executions": sum(1 for e in executions if e.get("key")),
        "guarded_unfinished": sum(1 for e in executions if e["ended"] is None),
        "guarded_runs_executed_twice": sum(
            1 for count in Counter(e["run_id"] for e in executions).values() if count > 1
        ),
    }
    problems: list[str] = []
    names = sorted(
        {name for e in executions for name in e["limits"]} | {n for e in executions for n, _ in e["claimed"]}
    )
    fields = ("id", "run_id", "key", "granted_at", "freed_at", "state", "limit__name")
    slots = {row["id"]: row for row in Slot.objects.filter(limit__name__in=names).values(*fields)}
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in slots.values():
        by_run.setdefault((row["run_id"], row["limit__name"]), []).append(row)

    def holds(row: dict[str, Any], t: float) -> bool:
        freed = row["freed_at"]
        return row["granted_at"].timestamp() - tolerance <= t and (freed is None or t <= freed.timestamp() + tolerance)

    outside = mislabelled = partial = 0
    on_limit: dict[str, list[dict[str, Any]]] = {}
    for e in executions:
        when = _hms(e["t"])
        ran = f"{e['end'] - e['t']:.2f} s" + ("" if e["ended"] else " (killed)")
        held: set[str] = set()
        wrong: list[str] = []
        for limit, slot_id in e["claimed"]:
            slot = slots.get(slot_id or "") or next(
                (row for row in by_run.get((e["run_id"], limit), []) if holds(row, e["t"])), None
            )
            if slot is None:
                wrong.append(f"{limit}: no slot")
                continue
            real = slot["limit__name"]
            if real != limit:
                mislabelled += 1
                problems.append(
                    f"guarded step of {e['run_id']}: its handle for {limit} names slot {slot['id']} of {real}"
                )
            held.add(real)
            on_limit.setdefault(real, []).append({**e, "pool": slot["key"]})  # the key it was granted on
            granted = slot["granted_at"].timestamp()
            freed = slot["freed_at"].timestamp() if slot["freed_at"] else None
            if (
                slot["run_id"] != e["run_id"]
                or e["t"] < granted - tolerance
                or (freed is not None and e["end"] > freed + tolerance)
            ):
                whose = "" if slot["run_id"] == e["run_id"] else f" of {slot['run_id']}"
                wrong.append(
                    f"{real}: slot {slot['id']} ({slot['state']}){whose} granted {granted - e['t']:+.2f} s, "
                    f"freed {'never' if freed is None else f'{freed - e["t"]:+.2f} s'} from its start"
                )
        if wrong:
            outside += 1
            problems.append(
                f"guarded step of {e['run_id']} ran outside its slot at {when} for {ran}: {'; '.join(wrong)}"
            )
        missing = sorted(set(e["limits"]) - held)
        if len(e["limits"]) > 1 and missing:
            partial += 1
            problems.append(f"guarded step of {e['run_id']} ran at {when} without a slot of {', '.join(missing)}")

    max_overlap: dict[str, str] = {}
    max_per_key: dict[str, str] = {}
    for limit in sorted(on_limit):
        mine = on_limit[limit]
        timeline = list(
            AuditEvent.objects.filter(limit__name=limit, capacity_after__isnull=False)
            .order_by("at", "id")
            .values_list("at", "capacity_after")
        )
        row = Limit.objects.get(name=limit)
        changes = [(0.0, row.declared_capacity)] + [(at.timestamp(), capacity) for at, capacity in timeline]

        def capacity_since(since: float, now: float, changes: list[tuple[float, int]] = changes) -> int:
            in_force = [c for at, c in changes if at <= since][-1:] + [c for at, c in changes if since < at <= now]
            return max(in_force, default=0)

        peak, peak_bound, over = _sweep(mine, tolerance, capacity_since)
        for at, count, bound in over:
            problems.append(f"{count} guarded steps of {limit} ran at once at {_hms(at)}: capacity {bound}")
        max_overlap[limit] = f"{peak} (capacity {peak_bound}; {len(over)} time(s) over)"

        pools = dict(
            LimitKey.objects.filter(limit=row, pool_override__isnull=False).values_list("key", "pool_override")
        )
        if row.per_key is None and not pools:
            continue
        key_peak, key_over = 0, 0
        for key in sorted({e["pool"] for e in mine}):
            size = pools.get(key, row.per_key) if key else row.per_key
            if size is None:
                continue
            ours = [e for e in mine if e["pool"] == key]
            peak, _, over = _sweep(ours, tolerance, lambda since, now, size=size: size)
            key_peak = max(key_peak, peak)
            key_over += len(over)
            shown = repr(key) if key else "(no key)"
            for at, count, bound in over:
                problems.append(f"{count} guarded steps of {limit} key {shown} ran at once at {_hms(at)}: pool {bound}")
        sizes = (
            f"pool {row.per_key}"
            if row.per_key is not None
            else "pools " + ", ".join(f"{k} {n}" for k, n in pools.items())
        )
        max_per_key[limit] = f"{key_peak} ({sizes}; {key_over} time(s) over)"

    groups = group_grants()
    problems += groups
    figures["guarded_max_overlap"] = max_overlap
    figures["guarded_max_per_key"] = max_per_key
    figures["guarded_outside_slot"] = outside
    figures["guarded_partial"] = partial + len(groups)
    figures["guarded_handles_mislabelled"] = mislabelled
    return figures, problems


def box_of_the_run(
    records: Records, tolerance: float, died: dict[int, float] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """box_figures and box_rows_figures for the box of tests/chaos/workspace.py (its row gives
    the ceiling, its capacity, and the base, its per_key); a failure if the box is missing."""
    from limits.config import BOX_NAME
    from limits.models import Limit
    from stackbone.runs.models import Run

    box = Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).first()
    if box is None or box.per_key is None:
        return {}, ["the box's run concurrency is not declared: the box checks proved nothing"]
    workflow_of = dict(Run.objects.values_list("id", "workflow"))
    figures, problems = box_figures(records, tolerance, box.capacity, box.per_key, workflow_of, died)
    figures.update(box_rows_figures())
    if not figures["box_waits_alone"]:
        problems.append("no run waited for a box slot alone: the box never bound, its checks proved little")
    return figures, problems


def step_executions(records: Records, died: dict[int, float] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Every execution of any step of any run from the side files (`step` / `step_end` lines,
    records.record_steps): {id, run_id, name, t, end}; one without a `step_end` ran until its
    worker was SIGKILLed (`died`, as executions_of); one with neither is left out and counted
    (the second number): its process died some other way, which other checks catch."""
    executions, unfinished = [], 0
    for key, start in records.steps.items():
        end = records.step_ends.get(key)
        if end is None:
            killed = (died or {}).get(start.get("ppid", -1))
            if killed is None or killed < start["t"]:
                unfinished += 1
                continue
            end = killed
        executions.append({**start, "end": end})
    return executions, unfinished


def _runs_at_work(executions: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Each run's time at work: the union of its steps' executions (a run counts once however
    many of its steps overlap, e.g. a step run again by a worker that took over)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in sorted(executions, key=lambda e: e["t"]):
        mine = spans.setdefault(e["run_id"], [])
        if mine and e["t"] <= mine[-1][1]:
            mine[-1] = (mine[-1][0], max(mine[-1][1], e["end"]))
        else:
            mine.append((e["t"], e["end"]))
    return spans


def box_figures(
    records: Records,
    tolerance: float,
    ceiling: int,
    base: int,
    workflow_of: dict[str, str],
    died: dict[int, float] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The box's run concurrency (SPEC 12) on the real work, from the side files: at no instant
    did more runs execute steps than the ceiling floor(base x burst), nor more runs of one
    workflow (`workflow_of`: run id -> workflow) than the base.

    A run is at work while one of its steps runs (records.record_steps: every step of every
    workflow, not only the guarded ones); the replays of its body between steps are not counted,
    so this undercounts a run's executing time, never its overlap with others. The sweep is
    _sweep's: each span shrunk by the tolerance at both ends, so steps shorter than twice the
    tolerance count for nothing. No operator changes the box during the chaos run: the ceiling
    and the base in force are the declared ones."""
    executions, unfinished = step_executions(records, died)
    spans: list[dict[str, Any]] = [
        {"id": f"{run_id}:{index}", "run_id": run_id, "t": start, "end": end}
        for run_id, mine in _runs_at_work(executions).items()
        for index, (start, end) in enumerate(mine)
    ]
    problems: list[str] = []
    peak, _, over = _sweep(spans, tolerance, lambda since, now: ceiling)
    for at, count, bound in over:
        problems.append(f"{count} runs executed steps at once at {_hms(at)}: the box's ceiling is {bound}")
    by_workflow: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_workflow.setdefault(workflow_of.get(span["run_id"], "?"), []).append(span)
    workflow_peak, peak_workflow, workflow_over = 0, "", 0
    for workflow in sorted(by_workflow):
        found, _, over_base = _sweep(by_workflow[workflow], tolerance, lambda since, now: base)
        if found > workflow_peak:
            workflow_peak, peak_workflow = found, workflow
        workflow_over += len(over_base)
        for at, count, bound in over_base:
            problems.append(f"{count} runs of {workflow} executed steps at once at {_hms(at)}: the base is {bound}")
    figures = {
        "box_step_executions": f"{len(executions)} ({unfinished} without an end)",
        "box_peak_executing": f"{peak} (ceiling {ceiling}; {len(over)} time(s) over)",
        "box_peak_per_workflow": f"{workflow_peak} ({peak_workflow or '-'}; base {base}; {workflow_over} time(s) over)",
    }
    return figures, problems


def box_rows_figures() -> dict[str, Any]:
    """From the rows: that the box bound during the load, and the most box slots live at once
    (busy or reserved; limits verify holds them to the ceiling and the base). `box_waits_alone`:
    waits for a box slot alone (group_size 1: a run of a workflow with no bound of its own
    created `queued` because the box, or its workflow's base, was full); `box_waits_with_limits`:
    waits for a box slot together with a limit's or a bound's slot (a run that waits in its body
    for a limit waits for both, SPEC 12.2, so these are not all the box's doing)."""
    from limits.config import BOX_NAME
    from limits.models import QueueEntry, Slot

    entries = QueueEntry.objects.filter(limit__name=BOX_NAME)
    slots = Slot.objects.filter(limit__name=BOX_NAME).values_list("granted_at", "freed_at", "key")
    events = sorted(
        [(granted, 1, key) for granted, _, key in slots]
        + [(freed, -1, key) for _, freed, key in slots if freed is not None],
        key=lambda event: (event[0], event[1]),
    )
    live, per_key, peak, key_peak = 0, Counter[str](), 0, 0
    for _, change, key in events:
        live += change
        per_key[key] += change
        peak, key_peak = max(peak, live), max(key_peak, per_key[key])
    return {
        "box_waits_alone": entries.filter(group_size=1).count(),
        "box_waits_with_limits": entries.filter(group_size__gt=1).count(),
        "box_peak_slots_rows": f"{peak} (one workflow {key_peak})",
    }


def setup_fair() -> None:
    """The fair limit's tenants before the load (SPEC 13.1, set as an operator would): small-1 has
    a min of 1, small-2 a weight of 2, small-3 a pool of 1, and the fault run's `heavy` a weight
    of 3; the flood, the fault run's other tenants and the runs without a key keep weight 1, min
    0 and no pool. Nothing changes them afterwards (the fault run's pause changes no rule)."""
    from limits import services

    services.set_min(FAIR_LIMIT, 1, key="small-1", actor="chaos")
    services.set_weight(FAIR_LIMIT, 2, key="small-2", actor="chaos")
    services.set_per_key(FAIR_LIMIT, 1, key="small-3", actor="chaos")
    services.set_weight(FAIR_LIMIT, 3, key=TURN_HEAVY, actor="chaos")


def fair_figures(
    records: Records, tolerance: float, died: dict[int, float] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The fair limit (SPEC 13) on the real work and in the rows, with a flooding tenant (FLOOD)
    beside small ones:

    - from the side files: the most guarded steps under way on it at once, and per tenant
      (guarded_figures fails the run if either goes above the capacity or a tenant's pool);
    - from the rows: each tenant's slots, and the waits (enqueued to granted) of the flood and of
      the small tenants; of the small tenants' waits that began while flood runs were already
      waiting, how many were granted before the flood got another slot (SPEC 13.2 serves the key
      holding less per weight first, however old the flood's backlog), and the most flood slots
      granted during one of them.

    - `fair_order_jumps`: grants to a tenant while another stood before it in 13.2's order with
      room in its pool (tests/concurrency/checks.py, fair_rule_violations, the order alone): as
      amended by issue 43, ties in share go to the smaller pass (the key whose turn it is), the
      granted key's pass read from its slot (the pass its grant was ranked at), the waiting key's
      replayed from the pass its slots and entries keep. Every wait here is a group with the box
      (SPEC 12.2: a run waits for a limit and a box slot together), all of one workflow, so a
      grant to one shows the box had room for the others. A group is granted in the fair limit's
      order since 2026-12-05 (grant._Grant._left_to_fairness; 25 jumps in 600 runs before); 0
      since, in CI's invocation with Redis and PostgreSQL restarts too (2026-12-06). `limits
      verify` leaves groups out of its fair check: this is where the order of groups on a fair
      limit is checked against the real load;
    - `fair_turn_errors`: turns that do not add up (fair_pass_violations: a grant ranked at
      another pass than its tenant's, a tenant entering at another than the smallest active
      pass, a pass kept that its grants do not add up to), groups included;
    - `fair_interleaving`: a tenant served three turns (3 x its weight grants) while another
      competing tenant got fewer than two (fair_interleaving: competing where the turns promise
      it, holding no more of its share, not ahead in the turns and staying in them).

    Fails the run when a grant jumped 13.2's order, when the turns do not add up, when a tenant
    was served three turns while a competing one got fewer than two, when a small tenant's wait
    timed out while the flood was granted three turns or more than that tenant during it
    (starved by the flood: with turns the flood rightly gets its own while others wait, so a
    wait that timed out in an outage, while every key got its turns, is no starvation), and when
    no small tenant ever waited behind the flood's backlog (the figures proved nothing)."""
    from limits.models import Limit, LimitKey, QueueEntry, Slot
    from tests.concurrency.checks import fair_interleaving, fair_pass_violations, fair_rule_violations

    limit = Limit.objects.filter(name=FAIR_LIMIT).first()
    if limit is None:
        return {}, [f"{FAIR_LIMIT} is not declared: the fair checks proved nothing"]

    def shown(key: str | None) -> str:
        return key or "(no key)"

    executions = [e for e in executions_of(records, died) if FAIR_LIMIT in e["limits"]]
    peak, _, _ = _sweep(executions, tolerance, lambda since, now: limit.capacity)
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for e in executions:
        by_tenant.setdefault(shown(e.get("key")), []).append(e)
    everyone = len(executions)  # no bound: the sweep only measures the peak
    tenant_peaks = {
        tenant: _sweep(mine, tolerance, lambda since, now: everyone)[0] for tenant, mine in sorted(by_tenant.items())
    }
    pools = dict(LimitKey.objects.filter(limit=limit, pool_override__isnull=False).values_list("key", "pool_override"))

    slots = list(Slot.objects.filter(limit=limit).values("key", "granted_at", "queue_entry_id"))
    grants = Counter(shown(slot["key"]) for slot in slots)
    granted_at = {slot["queue_entry_id"]: slot["granted_at"] for slot in slots if slot["queue_entry_id"]}
    flood_grants = sorted(slot["granted_at"] for slot in slots if slot["key"] == FLOOD)
    tenant_grants: dict[str, list[Any]] = {}
    for slot in sorted(slots, key=lambda slot: slot["granted_at"]):
        tenant_grants.setdefault(slot["key"], []).append(slot["granted_at"])
    weights = dict(LimitKey.objects.filter(limit=limit).values_list("key", "weight"))
    entries = list(
        QueueEntry.objects.filter(limit=limit).values("id", "run_id", "key", "enqueued_at", "finished_at", "state")
    )
    flood_waits = [(e["enqueued_at"], e["finished_at"]) for e in entries if e["key"] == FLOOD]
    waits: dict[str, list[float]] = {"flood": [], "small": []}
    behind = ahead = most = 0
    problems: list[str] = []
    for entry in entries:
        began, ended = entry["enqueued_at"], granted_at.get(entry["id"]) or entry["finished_at"]
        if ended is None:
            continue
        if entry["id"] in granted_at:
            waits["flood" if entry["key"] == FLOOD else "small"].append((ended - began).total_seconds())
        if entry["key"] == FLOOD or entry["state"] not in ("granted", "timed_out"):
            continue
        if not any(enqueued < began and (finished is None or began < finished) for enqueued, finished in flood_waits):
            continue
        behind += 1
        jumped = bisect.bisect_left(flood_grants, ended) - bisect.bisect_right(flood_grants, began)
        ahead += jumped == 0
        most = max(most, jumped)
        mine = tenant_grants.get(entry["key"], [])
        served = bisect.bisect_left(mine, ended) - bisect.bisect_right(mine, began)
        if entry["state"] == "timed_out" and jumped - served / weights.get(entry["key"], 1) >= 3:
            problems.append(
                f"{entry['run_id']} of {shown(entry['key'])} timed out on {FAIR_LIMIT} at {_hms(ended.timestamp())} "
                f"while the flood was granted {jumped} slot(s) during its wait and its tenant {served}: three turns "
                "or more ahead of it"
            )
    if not behind:
        problems.append(f"no small tenant waited behind the flood on {FAIR_LIMIT}: the fair figures proved nothing")

    def p50_max(seconds: list[float]) -> list[float]:
        ordered = sorted(seconds)
        return [round(ordered[len(ordered) // 2], 2), round(ordered[-1], 2)] if ordered else []

    jumps = fair_rule_violations(FAIR_LIMIT, idle=False)
    for jump in jumps[:3]:
        log(f"fair order: {jump}")
    if jumps:
        problems.append(f"{len(jumps)} grant(s) on {FAIR_LIMIT} jumped SPEC 13.2's order, the first: {jumps[0]}")
    turn_errors = fair_pass_violations(FAIR_LIMIT)
    if turn_errors:
        problems.append(f"{len(turn_errors)} turn(s) on {FAIR_LIMIT} do not add up, the first: {turn_errors[0]}")
    unmixed = fair_interleaving(FAIR_LIMIT)
    if unmixed:
        problems.append(f"{len(unmixed)} tenant(s) on {FAIR_LIMIT} were not interleaved, the first: {unmixed[0]}")
    figures = {
        "fair_grants": dict(sorted(grants.items())),
        "fair_peak_executing": (
            f"{peak} (capacity {limit.capacity}); by tenant {tenant_peaks} (pools {pools or 'none'})"
        ),
        "fair_waits_p50_max_s": {who: p50_max(mine) for who, mine in waits.items()},
        "fair_small_behind_flood": (
            f"{ahead} of {behind} served before the flood's next slot (at most {most} flood slots during one)"
        ),
        "fair_order_jumps": len(jumps),
        "fair_turn_errors": len(turn_errors),
        "fair_interleaving": len(unmixed),
    }
    return figures, problems


def fault_run_figures(sent: int = 0, paused_s: float = 0.0) -> tuple[dict[str, Any], list[str]]:
    """Issue 43's fault run on the fair limit (`Load.fault_run`: the flood and ten tenants, one of
    weight 3, eleven keys on a capacity of 4), measured from the rows while all eleven competed
    (tests/concurrency/checks.py, fair_contest: from the first instant at which each had a run
    waiting until `heavy` had none left waiting):

    - the flood's share of the grants must stay within 1.5 x 1 / (number of keys): it gets its
      turn like the others and no more (before the amendment it kept one of the 4 slots, 25 %);
    - `heavy` (weight 3) must get at least twice the grants of a weight-1 tenant (the mean of the
      nine), about three times (before: the same as theirs). Capacity 4 among eleven keys: a key
      holding one slot stands behind every key holding none, so weight shows as being served
      again at once after each release (one slot held, about 3.3 times a light tenant's grants
      in the hold model; a check above would fail on noise, not on a rule);
    - the interleaving of the tenants is fair_figures' `fair_interleaving`, over the whole load.

    The two shares assume holds of about one length, as the issue's hold model does: SPEC 13.2
    counts grants, not time held, so a tenant whose slot was held far longer (a worker SIGKILLed
    in its step holds it until the run's lease lapses, ~30 s) catches up its turns afterwards.
    When one of the eleven held a slot live in the window longer than STRETCHED_HOLD_S, or the
    window has fewer than TURN_MIN_GRANTS grants, the shares are reported and not judged (the
    order, the turns and the interleaving are judged whatever the holds). Fails the run when a
    judged share is out of bounds, and when the shape never formed (the figures proved nothing)."""
    from tests.concurrency.checks import fair_contest

    keys = [FLOOD, *TURN_TENANTS]
    contest = fair_contest(FAIR_LIMIT, keys, until=TURN_HEAVY)
    if not contest:
        return {"fault_run": f"{sent} runs sent; the eleven tenants never all waited"}, [
            f"issue 43's fault run never formed on {FAIR_LIMIT} (the flood and ten tenants waiting at once): "
            "its figures proved nothing"
        ]
    grants, total = contest["grants"], contest["total"]
    lights = [grants[tenant] for tenant in TURN_TENANTS if tenant != TURN_HEAVY]
    light = sum(lights) / len(lights)
    share, bound = grants[FLOOD] / total if total else 0.0, 1.5 / len(keys)
    ratio = grants[TURN_HEAVY] / light if light else float("inf")
    longest, holder = contest["longest_hold"]
    seconds = (contest["end"] - contest["start"]).total_seconds()
    figures = {
        "fault_run": (
            f"{sent} runs sent, paused {paused_s} s while they joined; all eleven competed {seconds:.1f} s: "
            f"{total} grants ({dict(sorted(grants.items()))}), the longest hold {longest} s ({holder})"
        ),
        "fault_run_flood_share": f"{share:.3f} (bound {bound:.3f} = 1.5 / {len(keys)} keys)",
        "fault_run_heavy_against_light": f"{ratio:.2f} ({grants[TURN_HEAVY]} against {light:.2f}; at least 2)",
    }
    problems: list[str] = []
    if longest > STRETCHED_HOLD_S or total < TURN_MIN_GRANTS:
        why = f"a hold of {longest} s ({holder})" if longest > STRETCHED_HOLD_S else f"{total} grants"
        figures["fault_run_judged"] = f"no: {why} (the shares assume the hold model)"
        return figures, problems
    figures["fault_run_judged"] = "yes"
    if share > bound:
        problems.append(
            f"the flood got {grants[FLOOD]} of {total} grants ({share:.3f}) while all eleven tenants competed on "
            f"{FAIR_LIMIT}: more than 1.5 / {len(keys)} = {bound:.3f} (issue 43: its turn and no more)"
        )
    if ratio < 2:
        problems.append(
            f"{TURN_HEAVY} (weight 3) got {grants[TURN_HEAVY]} grants against {light:.2f} for a weight-1 tenant while "
            f"all eleven competed on {FAIR_LIMIT}: {ratio:.2f} times, not about three (issue 43)"
        )
    return figures, problems


def pause_figures(
    records: Records, tolerance: float, died: dict[int, float] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """SPEC 5.6 on the real work: a paused limit grants nothing. For each pause of PAUSED_LIMIT
    (the audit rows' [pause, resume), on the database's clock), from the side files: the guarded
    steps under way on it never outnumbered the slots it held (busy or reserved) when the pause
    began, and none ran in a slot granted inside the pause (from the rows). The tolerance as in
    guarded_figures."""
    from django.db.models import Q

    from limits.models import AuditEvent, Slot

    executions = [e for e in executions_of(records, died) if PAUSED_LIMIT in e["limits"]]
    spans: list[tuple[float, float]] = []
    began: float | None = None
    for at, action in (
        AuditEvent.objects.filter(limit__name=PAUSED_LIMIT, action__in=["pause", "resume"])
        .order_by("at", "id")
        .values_list("at", "action")
    ):
        if action == "pause" and began is None:
            began = at.timestamp()
        elif action == "resume" and began is not None:
            spans.append((began, at.timestamp()))
            began = None
    if began is not None:
        spans.append((began, time.time()))
    slots = Slot.objects.filter(limit__name=PAUSED_LIMIT)
    problems: list[str] = []
    started_inside = peak_inside = 0
    for start, end in spans:
        moment = dt.datetime.fromtimestamp(start, dt.UTC)
        held = slots.filter(granted_at__lte=moment).filter(Q(freed_at__isnull=True) | Q(freed_at__gt=moment)).count()
        inside = [e for e in executions if e["t"] < end - tolerance and e["end"] > start + tolerance]
        instants = [start + tolerance] + [e["t"] for e in inside if e["t"] > start + tolerance]
        peak = max((sum(1 for e in inside if e["t"] <= x < e["end"]) for x in instants), default=0)
        peak_inside = max(peak_inside, peak)
        started_inside += sum(1 for e in inside if e["t"] > start + tolerance)
        if peak > held:
            problems.append(
                f"{peak} guarded steps of {PAUSED_LIMIT} ran at once during its pause at {_hms(start)}, "
                f"which began with {held} slot(s) held"
            )
        granted = slots.filter(
            granted_at__gt=moment, granted_at__lt=dt.datetime.fromtimestamp(end, dt.UTC)
        ).values_list("id", flat=True)
        problems += [f"{slot_id} of {PAUSED_LIMIT} granted during its pause at {_hms(start)}" for slot_id in granted]
    figures = {
        "paused_seconds": round(sum(end - start for start, end in spans), 1),
        "guarded_started_while_paused": started_inside,  # in slots held from before the pause
        "guarded_peak_while_paused": peak_inside,
    }
    return figures, problems


def _hms(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _sweep(
    executions: list[dict[str, Any]], tolerance: float, bound_of: Any
) -> tuple[int, int, list[tuple[float, int, int]]]:
    """The most executions under way at once (each shrunk by the tolerance at both ends), the
    bound then, and every moment one started above `bound_of(earliest start under way, now)`."""
    events = []
    for e in executions:
        if e["end"] - e["t"] > 2 * tolerance:
            events += [(e["t"] + tolerance, 1, e), (e["end"] - tolerance, -1, e)]
    events.sort(key=lambda item: (item[0], item[1]))
    under_way: dict[str, float] = {}
    peak, peak_bound, over = 0, 0, []
    for at, change, e in events:
        if change < 0:
            under_way.pop(e["id"], None)
            continue
        under_way[e["id"]] = at
        bound = bound_of(min(under_way.values()), at)
        if len(under_way) > peak:
            peak, peak_bound = len(under_way), bound
        if len(under_way) > bound:
            over.append((at, len(under_way), bound))
    return peak, peak_bound, over


def group_grants() -> list[str]:
    """Every grant of an acquisition of several limits (same request, same instant) gave one slot
    of each of its `group_size` distinct limits (SPEC 10.2): no run ever held part of a group."""
    from limits.models import Slot

    grants: dict[tuple[str, dt.datetime], list[tuple[str, int]]] = {}
    rows = Slot.objects.filter(group_size__gt=1).values_list("request", "granted_at", "limit__name", "group_size")
    for request, granted_at, limit, size in rows:
        grants.setdefault((request, granted_at), []).append((limit, size))
    problems = []
    for (request, granted_at), got in sorted(grants.items(), key=lambda item: item[0][1]):
        size = got[0][1]
        if len(got) != size or len({limit for limit, _ in got}) != size:
            limits = ", ".join(sorted(limit for limit, _ in got))
            problems.append(
                f"group {request} was granted {len(got)} of its {size} slots at {_hms(granted_at.timestamp())}: "
                + limits
            )
    return problems


def worker_figures(chaos: ChaosDriver, records: Records, ended: float) -> tuple[dict[str, Any], list[str]]:
    """Workers ride out a Redis restart (issue 11, section 2): no worker exited on its own, and
    every worker process alive when Redis went down began a task after it came back (unless the
    driver SIGKILLed it within RECONNECT_GRACE_S of that: Celery reconnects with a growing
    back-off, and a worker SIGKILLed 26 s after Redis was back had taken none yet). Beat too: a
    periodic task ran after each restart followed by at least 40 s of run."""
    problems = [f"{name} exited on its own" for name in chaos.figures.worker_exits]
    consumed_after = 0
    for began, back, alive in chaos.figures.redis_windows:
        for name, pid in alive.items():
            if any(task["ppid"] == pid and task["t"] > back for task in records.tasks):
                consumed_after += 1
                continue
            killed = chaos.figures.killed_at.get(name)
            if name in chaos.figures.worker_exits:
                problems.append(f"{name} (pid {pid}) exited after the Redis restart at {time.ctime(began)}")
            elif killed is None or killed > back + RECONNECT_GRACE_S:
                problems.append(f"{name} (pid {pid}) took no task after the Redis restart at {time.ctime(began)}")
        if ended - back >= 40 and not any(
            task["task"] == "limits.tasks.sweep" and task["t"] > back for task in records.tasks
        ):
            problems.append(f"no sweep ran after the Redis restart at {time.ctime(began)}: is beat still sending?")
    figures = {
        "worker_exits": len(chaos.figures.worker_exits),
        "workers_consuming_after_redis_restarts": consumed_after,
    }
    return figures, problems


def skew_figures(records: Records, load: Load, skew: float) -> tuple[dict[str, Any], list[str]]:
    """The clocks of the worker processes (from their side-file lines: the injector must have
    moved the skewed workers' pool processes, tests/skew/sitecustomize.py), the long steps each
    clock ran, and the duplicate advances sent."""
    clocks_seen = Counter(f"{round(p['skew']):+d} s" for p in records.processes)
    long_steps = Counter(
        f"{round(e.get('skew', 0)):+d} s" for e in records.starts.values() if e.get("limits") == [LONG_LIMIT]
    )
    problems = []
    for wanted in (skew, -skew) if skew else ():
        if not any(abs(p["skew"] - wanted) < 2 for p in records.processes):
            problems.append(f"no worker process ran with a clock {wanted:+g} s off: the skew injector did not apply")
    figures = {
        "worker_processes_by_clock": dict(clocks_seen),
        "long_steps_by_clock": dict(long_steps),
        "long_runs": len(load.long_runs),
        "duplicate_advances": load.duplicates,
    }
    return figures, problems


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
    args.targets = targets = resolve_targets(args, database_url)
    var = Path(args.logs).parent / "var"
    var.mkdir(parents=True, exist_ok=True)
    records = Path(args.logs).parent / "records"
    records.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": f"redis://{targets.redis_host}:{targets.redis_port}/{args.redis_db}",
        "DJANGO_SETTINGS_MODULE": "studio.settings",
        "STACKBONE_WORKSPACE": "tests.chaos.workspace",
        "STACKBONE_WORKFLOWS": "studio.workflows,tests.chaos.workflows",
        RECORDS_ENV: str(records),
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
    for old in [*logs.glob("*.log"), *Path(env[RECORDS_ENV]).glob("*.jsonl")]:
        old.unlink()
    targets: Targets = args.targets

    from tests.bench.common import create_database

    log(
        f"seed {seed}; database {args.database} on port {targets.pg_port} (cluster {'/'.join(targets.pg_cluster)}),"
        f" Redis db {args.redis_db} on port {targets.redis_port}, logs in {logs}"
    )
    create_database(env["DATABASE_URL"])
    subprocess.run(
        ["redis-cli", "-h", targets.redis_host, "-p", str(targets.redis_port), "-n", str(args.redis_db), "flushdb"],
        check=True,
        capture_output=True,
    )
    subprocess.run([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()
    from django.db import connection

    with connection.cursor() as cursor:  # before any slot: every change in the database's time
        clocks.install_probe(cursor)
    setup_fair()
    connection.close()

    port = free_port()
    box = Box(env, logs, port)
    began, began_wall = time.monotonic(), time.time()
    figures: dict[str, Any] = {"seed": seed}
    problems: list[str] = []
    load: Load | None = None
    try:
        box.start_web()
        for _ in range(args.workers):
            box.start_worker()
        if args.skew:
            box.start_worker(args.skew)
            box.start_worker(-args.skew)
        box.start_beat()
        probe = WebProbe(port)
        _wait_for(lambda: probe.probe() == "200", 60, "the web app")
        probe.start()
        load = Load(rng, args)
        chaos = ChaosDriver(box, rng, args, expected_seconds=args.runs / args.rate)
        chaos.start()
        killer = ConnectionKiller(rng, args, expected_seconds=args.runs / args.rate)
        killer.start()
        skewed = f" + 2 with clocks {args.skew:+g} s and {-args.skew:+g} s" if args.skew else ""
        log(f"load: {args.runs} runs at ~{args.rate}/s, {args.workers} workers{skewed}, web on port {port}")
        load.run()
        load.finish_fault_run(until=time.monotonic() + TURN_JOIN_S + 90)
        load_seconds = time.monotonic() - began
        chaos.stopping.set()
        killer.stopping.set()
        chaos.join(timeout=120)
        killer.join(timeout=30)
        chaos.supervise()
        log(f"load done in {load_seconds:.0f} s ({dict(load.started)}); waiting for quiet")
        calm, quiet_seconds = wait_for_quiet(load, args.quiet_timeout, chaos.supervise)
        probe.stopping.set()
        probe.join(timeout=10)

        counts, run_problems = outcomes()
        problems += run_problems
        if load.stalled:
            problems.append(f"the load stopped: {load.stalled}")
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
        records = Records(Path(env[RECORDS_ENV])).read()
        died = {box.processes[name].pid: at for name, at in chaos.figures.killed_at.items()}
        guarded, guarded_problems = guarded_figures(records, args.clock_tolerance, died)
        problems += guarded_problems
        paused, pause_problems = pause_figures(records, args.clock_tolerance, died)
        problems += pause_problems
        boxed, box_problems = box_of_the_run(records, args.clock_tolerance, died)
        problems += box_problems
        fair, fair_problems = fair_figures(records, args.clock_tolerance, died)
        problems += fair_problems
        fault, fault_problems = fault_run_figures(len(load.turn_runs), load.turn_paused_s)
        problems += fault_problems
        if not chaos.figures.pauses:
            problems.append(f"the chaos never paused {PAUSED_LIMIT}: the pause checks proved nothing")
        clock, clock_problems = clocks.clock_figures(records, executions_of(records, died), args.clock_tolerance)
        problems += clock_problems
        skews, skew_problems = skew_figures(records, load, args.skew)
        problems += skew_problems
        workers, worker_problems = worker_figures(chaos, records, time.time())
        problems += worker_problems
        database, database_problems = database_figures()
        problems += database_problems
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
                "per_key_changes": chaos.figures.per_key_changes,
                "pauses": chaos.figures.pauses,
                **paused,
                "connection_kills": f"{killer.kills} ({killer.backends} backends terminated, {killer.missed} skipped)",
                **workers,
                **guarded,
                **boxed,
                **fair,
                **fault,
                **skews,
                **clock,
                "clock_tolerance_s": args.clock_tolerance,
                "load_errors": dict(load.errors),
                "web_probe": dict(probe.statuses),
                "load_seconds": round(load_seconds),
                "quiet_after_s": round(quiet_seconds),
                **hand_off_figures(),
                **sweep_figures(records, began_wall, time.time()),
                **wait_figures(),
                **database,
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
        if load is not None:
            with contextlib.suppress(Exception):
                load.end_fault_run(until=time.monotonic() + 30)
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
