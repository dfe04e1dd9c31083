"""The bench database, the environment every bench process shares, and small statistics."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

REFUSE_DATABASE = (
    "the benchmarks need PostgreSQL: set DATABASE_URL=postgres://user@host:5432/name "
    "(a database named <name>_bench is created and dropped)"
)
REFUSE_BROKER = "the benchmarks need Redis: set CELERY_BROKER_URL=redis://host:6379/<n>"


def bench_database_url(url: str) -> str:
    """The URL of the database the bench creates and drops: the configured name + '_bench' (kept
    as is when it already ends in 'bench'), so the bench never drops a database in use."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "stackbone"
    if not name.endswith("bench"):
        name = f"{name}_bench"
    return urlunsplit(parts._replace(path=f"/{name}"))


def configure_environment(database_url: str, var_dir: str | None = None) -> None:
    """What every bench process (this one, its children, the Celery worker) runs with."""
    os.environ["DATABASE_URL"] = database_url
    if var_dir is not None:
        os.environ["STACKBONE_VAR_DIR"] = var_dir  # collected static files (DEBUG is off)
    os.environ["DJANGO_SETTINGS_MODULE"] = "studio.settings"
    os.environ["STACKBONE_WORKSPACE"] = "tests.bench.workspace"
    os.environ["STACKBONE_WORKFLOWS"] = "studio.workflows,tests.bench.workflows"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # As in production: DEBUG off (no query log kept in memory), so a key is needed.
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    root = str(Path(__file__).resolve().parents[2])
    paths = os.environ.get("PYTHONPATH", "")
    if root not in paths.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, paths) if p)


def _maintenance_dsn(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/postgres")), parts.path.lstrip("/")


def create_database(url: str) -> None:
    dsn, name = _maintenance_dsn(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    dsn, name = _maintenance_dsn(url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def psycopg_dsn(url: str) -> str:
    """dj-database-url accepts postgres:// and postgresql://; libpq wants postgresql:// or either."""
    return url.replace("postgres+psycopg://", "postgresql://", 1)


def machine(url: str) -> dict[str, str]:
    with psycopg.connect(psycopg_dsn(url)) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        sync = conn.execute("SHOW synchronous_commit").fetchone()[0]
        fsync = conn.execute("SHOW fsync").fetchone()[0]
    return {
        "cores": str(os.cpu_count()),
        "postgres": str(version).split()[0],
        "synchronous_commit": str(sync),
        "fsync": str(fsync),
        "python": sys.version.split()[0],
        "load": "/".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the table."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(int(round(q / 100 * (len(ordered) - 1))), len(ordered) - 1)
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def peak_rss_mb(pid: int | str = "self") -> float:
    """VmHWM (the peak resident set) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy so far (every process: user, nice, system,
    irq, softirq, steal; not idle or iowait), from the first line of /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process so far, from /proc/<pid>/stat (0.0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_seconds_of(command: str) -> float:
    """cpu_seconds of every live process whose name (/proc/<pid>/comm) is `command`, e.g.
    "postgres" (the server and its backends) or "redis-server"."""
    total = 0.0
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            named = comm.read_text().strip() == command
        except OSError:
            continue  # gone meanwhile
        if named:
            total += cpu_seconds(comm.parent.name)
    return total


def cpu_split() -> dict[str, float]:
    """The machine's busy CPU seconds so far, and PostgreSQL's and Redis's part of it."""
    return {
        "machine": machine_cpu_seconds(),
        "postgres": cpu_seconds_of("postgres"),
        "redis": cpu_seconds_of("redis-server"),
    }


def cpu_split_text(before: dict[str, float], after: dict[str, float], n: int, what: str) -> tuple[float, str]:
    """ms of CPU per `what` (a run, a workflow) between two cpu_split() readings: the machine's,
    and a text with PostgreSQL's and Redis's part (a backend that ended meanwhile is not
    counted in its part; the machine's figure counts everything)."""
    ms = {key: 1000 * (after[key] - before[key]) / n for key in before}
    rest = ms["machine"] - ms["postgres"] - ms["redis"]
    return ms["machine"], (
        f"{ms['machine']:.1f} ms of the machine's CPU a {what} (PostgreSQL {ms['postgres']:.1f}, "
        f"Redis {ms['redis']:.1f}, the Python processes {rest:.1f})"
    )
