"""Scenario 10: the engine's hot path against the hand-written durable FIFO semaphore and the bare
semaphore (the physical ceiling), in one run: cycles/s at 1, 2, 4, 8, 16 and 32 processes on one
limit of capacity 4 (the three loads interleaved at each count, so the machine's load drifts over
all three alike); CPU per cycle from /proc (the load processes and their PostgreSQL backends); the
wall time of each operation as the processes saw it; PostgreSQL's own time in each function
(track_functions, set on the bench database only); and cProfile of one engine process. Also the
chart of cycles/s against processes.
"""

from __future__ import annotations

import argparse
import os
import pstats
import tempfile
from typing import Any

from tests.bench import load
from tests.bench.common import log, psycopg_dsn
from tests.bench.workspace import HOT

KINDS = ("engine", "fifo", "reference")
LABELS = {
    "engine": "this engine (scenario 1's load)",
    "fifo": "durable FIFO (tests/bench/fifo.sql)",
    "reference": "bare semaphore (the ceiling)",
}
CONNECTIONS = {"engine": 2, "fifo": 1, "reference": 1, "engine_raw": 2, "fifo_mx": 1, "fifo_sx": 1, "fifo_rc": 1}
# The experiments, at these process counts only: the engine's functions without Django (load.py's
# engine_raw), two lock patterns on the FIFO (the engine's before migration 0015 and now) and the
# FIFO with the SPEC's reservation (fifo.sql's variants).
VARIANTS = ("engine_raw", "fifo_mx", "fifo_sx", "fifo_rc")
VARIANT_COUNTS = (8, 32)


def sweep(args: argparse.Namespace, allowed: int) -> dict[str, dict[int, dict[str, Any]]]:
    """{kind: {processes: load.repeat figures}}; args.runs runs at 8 and 32, one elsewhere."""
    load.create_semaphore()
    load.install_fifo()
    _track_functions()
    result: dict[str, dict[int, dict[str, Any]]] = {kind: {} for kind in KINDS + VARIANTS}
    for procs in args.sweep:
        runs = args.runs if procs in (8, 32) else 1
        kinds = KINDS + (VARIANTS if procs in VARIANT_COUNTS else ())
        for kind in kinds:
            needed = CONNECTIONS[kind] * procs + 10
            if needed > allowed:
                log(f"scenario 10: {kind} at {procs} processes skipped: needs ~{needed} connections, max {allowed}")
                continue
            log(f"scenario 10: {kind}, {procs} processes, {runs} x {args.seconds:g} s")
            if kind == "engine" and procs == 8:
                _reset_function_stats()
            figures = load.repeat(load.Load(kind, (HOT,), procs, args.seconds, hold_ms=args.hold), runs)
            if kind == "engine" and procs == 8:
                figures["functions"] = function_times()
            result[kind][procs] = figures
    return result


def profile_engine(args: argparse.Namespace, procs: int = 8) -> dict[str, Any]:
    """One more engine run at `procs` processes, process 0 under cProfile with a CPU clock (time
    waiting for the server or a notification does not count; not counted anywhere else): its CPU
    by where the code lives, and the functions with the most own CPU."""
    path = os.path.join(tempfile.gettempdir(), f"bench-engine-{os.getpid()}.prof")
    log(f"scenario 10: cProfile of one engine process of {procs}, {args.seconds:g} s")
    figures = load.repeat(load.Load("engine", (HOT,), procs, args.seconds, hold_ms=args.hold, profile=path), 1)
    stats = pstats.Stats(path)
    os.unlink(path)
    groups: dict[str, float] = {}
    rows = []
    for (filename, line, name), (_, calls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        group = _group(filename, name)
        groups[group] = groups.get(group, 0.0) + tottime
        rows.append((tottime, calls, f"{_short(filename)}:{line}({name})"))
    total = sum(groups.values()) or 1.0
    rows.sort(reverse=True)
    for tottime, calls, where in rows[:15]:
        log(f"  {tottime * 1000:8.0f} ms own time, {calls:7d} calls  {where}")
    cycles = figures["cycles"] / max(figures["processes"], 1)  # about this process's share
    return {
        "groups": {k: v / total for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
        "total_s": total,
        "cycles": cycles,
        "top": rows[:8],
    }


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def _group(filename: str, name: str) -> str:
    if filename == "~" and "psycopg" in name:
        return "psycopg"
    for needle, group in (
        ("/django/", "Django"),
        ("/psycopg/", "psycopg"),
        ("/psycopg_binary/", "psycopg"),
        ("/limits/", "limits (the engine)"),
        ("/studio/", "studio"),
        ("/tests/bench/", "the bench loop"),
    ):
        if needle in filename:
            return group
    if filename == "~":
        return "C built-ins (sockets, poll, str, dict...)"
    return "other Python (stdlib)"


def _track_functions() -> None:
    """PostgreSQL times each PL/pgSQL function call in this database (pg_stat_user_functions);
    a per-database setting, no restart (pg_stat_statements would need shared_preload_libraries)."""
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[-1]
    with psycopg.connect(psycopg_dsn(url), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'pl'")


def _reset_function_stats() -> None:
    import psycopg

    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_reset()")  # this database's counters only


def function_times() -> dict[str, tuple[int, float, float]]:
    """{function: (calls, total ms per call, own ms per call)} since the last reset."""
    import time

    import psycopg

    time.sleep(0.6)  # backends report their counters at most every 500 ms, and on exit
    with psycopg.connect(psycopg_dsn(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions WHERE calls > 0 "
            "ORDER BY total_time DESC"
        ).fetchall()
    return {name: (int(calls), total / calls, own / calls) for name, calls, total, own in rows}


def chart(result: dict[str, dict[int, dict[str, Any]]], dbos: dict[str, Any] | None, path: str, title: str) -> bool:
    """cycles/s against processes (log-2 x axis), one line per load, DBOS's queue at its fastest
    polling as a level line (its rate does not depend on our processes); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib: no chart (pip install -e '.[bench]')")
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for kind, style in zip(KINDS, ("o-", "s-", "^--"), strict=True):
        points = sorted(result.get(kind, {}).items())
        if points:
            ax.plot([p for p, _ in points], [f["median"] for _, f in points], style, label=LABELS[kind])
    if dbos:
        ax.axhline(
            dbos["per_s"],
            color="grey",
            linestyle=":",
            label=f"DBOS queue, concurrency 4, {dbos['polling'] * 1000:g} ms polling (workflows/s)",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({p for kind in result.values() for p in kind}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("processes on one limit of capacity 4")
    ax.set_ylabel("cycles/s (acquire → release)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    log(f"chart written to {path}")
    return True


def uncontended(cycles: int = 100) -> dict[str, Any]:
    """One process, nobody else: `cycles` queued cycles on the engine (4 holders fill the limit, a
    fifth joins the queue, a holder's release hands it the slot, the fifth confirms, all release:
    statements.per_operation) and the same shape on the durable FIFO; PostgreSQL's time per
    function call (track_functions; no lock waits here, so it is the server's work) and the
    client's wall time per operation."""
    import time

    import psycopg
    from django.db import connections

    from limits.apps import _wake_runs
    from limits.signals import runs_woken
    from tests.bench import fifo, statements

    _reset_function_stats()
    connections.close_all()
    engine_ms: dict[str, list[float]] = {}
    # As in the load processes: no run layer wake (these are not runs; scenario 2 measures it).
    runs_woken.disconnect(_wake_runs, dispatch_uid="limits-wake-runs")
    try:
        for _ in range(cycles):
            for name, (_, _, ms) in statements.per_operation(HOT, 4).items():
                engine_ms.setdefault(name, []).append(ms)
    finally:
        runs_woken.connect(_wake_runs, dispatch_uid="limits-wake-runs")
    connections.close_all()  # the backend reports its function counters as it ends
    engine_functions = function_times()

    _reset_function_stats()
    fifo_ms: dict[str, list[float]] = {}
    dsn = psycopg_dsn(os.environ["DATABASE_URL"])
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(5)]
    try:
        fifo.reset(conns[0], 1, 4)
        holders = [fifo.Client(conn, f"bench_unc_{n}") for n, conn in enumerate(conns)]

        def timed(name: str, call: Any) -> Any:
            started = time.perf_counter()
            result = call()
            fifo_ms.setdefault(name, []).append((time.perf_counter() - started) * 1000)
            return result

        for _ in range(cycles):
            got = timed("acquire, granted at once", lambda: holders[0].acquire(1))
            timed("release, nobody waiting", lambda got=got: holders[0].release(1, got[0]))
            tickets = [holders[n].acquire(1)[0] for n in range(4)]
            waiter = holders[4]
            ticket = timed(
                "acquire, queued",
                lambda w=waiter: int(w.conn.execute("SELECT bench_fifo_acquire(1, %s)", [w.channel]).fetchone()[0]),
            )
            timed("release, handing the slot over", lambda t=tickets: holders[0].release(1, t[0]))
            timed("the woken waiter reads its notification", lambda t=ticket, w=waiter: w.wait(t))
            for n in range(1, 4):
                holders[n].release(1, tickets[n])
            waiter.release(1, ticket)
    finally:
        for conn in conns:
            conn.close()
    fifo_functions = function_times()
    from tests.bench.common import median

    return {
        "engine_ms": {k: median(v) for k, v in engine_ms.items()},
        "engine_functions": engine_functions,
        "fifo_ms": {k: median(v) for k, v in fifo_ms.items()},
        "fifo_functions": fifo_functions,
    }


def statement_times(cycles: int = 20) -> list[tuple[str, float, int]]:
    """The statements inside the engine's functions over `cycles` uncontended rounds of
    statements.per_operation (6 acquires, 1 of them queued, and its confirm, 6 releases, 1 of
    them handing the slot over), each with its ms per round and count: auto_explain loaded in this
    session only (LOAD needs no restart; its plans come back to the client as NOTICEs), with
    nested statements and ANALYZE timing, which inflates every figure alike (read shares)."""
    import json
    import re

    from django.db import connection

    from limits.apps import _wake_runs
    from limits.signals import runs_woken
    from tests.bench import statements

    totals: dict[str, list[float]] = {}
    head = re.compile(r"duration: ([0-9.]+) ms\s+plan:\s*(.*)", re.S)

    def notice(diag: Any) -> None:
        found = head.match(diag.message_primary or "")
        if not found:
            return
        try:
            plan = json.loads(found.group(2))
        except ValueError:
            return
        text = " ".join(str(plan.get("Query Text", "")).split())
        text = re.sub(r"\b\d+\b", "?", re.sub(r"'[^']*'", "?", text))[:110]
        total = totals.setdefault(text, [0.0, 0])
        total[0] += float(found.group(1))
        total[1] += 1

    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    with connection.cursor() as cur:
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_format = 'json'",
            "SET auto_explain.log_level = 'notice'",
            "SET client_min_messages = 'notice'",
        ):
            cur.execute(setting)
    raw.add_notice_handler(notice)
    runs_woken.disconnect(_wake_runs, dispatch_uid="limits-wake-runs")
    try:
        for _ in range(cycles):
            statements.per_operation(HOT, 4)
    finally:
        runs_woken.connect(_wake_runs, dispatch_uid="limits-wake-runs")
        raw.remove_notice_handler(notice)
        connection.close()
    ranked = sorted(((text, ms / cycles, int(n)) for text, (ms, n) in totals.items()), key=lambda r: -r[1])
    for text, ms, n in ranked[:25]:
        log(f"  {ms:7.2f} ms a round, {n:5d} runs  {text}")
    return ranked
