"""The twelve scenarios, in the order they run, each returning its rows of the table."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from typing import Any

from tests.bench import data, dbos_queue, fair, handoff, hotpath, load, runs, statements, sweeps
from tests.bench.common import bench_database_url, create_database, drop_database, log, median, percentile
from tests.bench.report import Row, verdict
from tests.bench.workspace import (
    FAIR,
    FAIR_TURNS,
    FAIR_WIDE,
    FIFO_PER_KEY,
    FIFO_PLAIN,
    FIFO_TURNS,
    FIFO_WIDE,
    GROUP_A,
    GROUP_B,
    HANDOFF,
    HOT,
    HOT_2,
    KEYED,
    KEYED_CAPACITY,
    KEYED_TOTAL,
    STUDIO,
)

MANY_LIMITS = 1_000
KEYS = 1_000  # scenario 7: the keys a process draws from
PER_CALL = "(round trips, BEGIN and COMMIT included; median ms of one uncontended call)"
PER_CALL_REFERENCE = "scenario 1 (plain limit): 1 per operation; ms: median of 6 rounds after one that compiles plans"


def run_all(args: argparse.Namespace) -> list[Row]:
    """1, 5, 7 and 8 first (an empty box; 7 and 8 beside scenario 1's figure of the same run,
    which runs whenever one of them does); 9 with two workers of its own; the idle sweep on small
    tables; 2, then the big sweep as the Celery task, with one worker (stopped after the sweep:
    the pass dispatched one advance task per woken run, which nobody must run); 4 in a web
    process of its own; the idle sweep again on big tables."""
    rows: list[Row] = []
    memory: list[Row] = []
    fair_parts: set[str] = getattr(args, "fair_parts", {"flood", "hot", "keys", "turns"}) if 14 in args.only else set()
    one: dict[str, Any] | None = None
    if args.only & {1, 5, 7, 8} or fair_parts & {"flood", "hot"}:  # scenario 1: the reference of 14's flood, hot
        hot_rows, one = hot_limits(args)
        rows += hot_rows
        rows += keyed_and_groups(args, one)
    if 14 in args.only:
        rows += fair_shares(args, one)
    swept: dict[str, dict[int, dict[str, Any]]] = {}
    if 10 in args.only:
        hot_rows, swept = hot_path(args)
        rows += hot_rows
    if 15 in args.only:
        rows += hot_over_history(args)
    fastest: dict[str, Any] | None = None
    if 11 in args.only:
        run_rows, fastest = runs_beside_dbos(args)
        rows += run_rows
    if args.chart and swept:
        title = (
            f"cycles/s, one limit of capacity 4; median of {args.runs} x {args.seconds:g} s at 8 and 32, "
            f"1 run elsewhere; load {os.getloadavg()[0]:.1f} after ({os.cpu_count()} cores)"
        )
        hotpath.chart(swept, fastest, args.chart, title)
    if 9 in args.only:
        rows += run_throughput(args)
    if 12 in args.only:
        rows += sweep_delay()
    if 13 in args.only:
        rows += box_throughput(args)
    data.many_limits(MANY_LIMITS)
    idle_small = sweeps.idle() if 3 in args.only else None
    if args.only & {2, 3, 6}:
        worker = handoff.Worker()
        try:
            if 2 in args.only:
                rows += handoffs(args, worker)
            rss = worker.peak_rss_mb()
            memory.append(Row("6. Peak RSS, Celery worker (solo pool) through scenario 2", f"{rss:.0f} MiB"))
            if 3 in args.only:
                sweep_rows, rss = big_sweep(args, worker)
                rows += sweep_rows
                n = _rows(args)
                memory.append(Row(f"6. Peak RSS, Celery worker through the sweep of {n:,} + {n:,}", f"{rss:.0f} MiB"))
        finally:
            worker.stop()
    if 4 in args.only:
        page_rows, web, idle_full = studio_pages(args)
        rows += page_rows
        memory.append(Row("6. Peak RSS, web process serving scenario 4", f"{web:.0f} MiB"))
    if idle_small is not None:
        rows.append(idle_sweep(idle_small, idle_full if 4 in args.only else sweeps.idle(), big=4 in args.only))
    if 6 in args.only:
        rows += memory
    return rows


def _rows(args: argparse.Namespace) -> int:
    return int(100_000 * args.scale)


# --- 1 and 5: the hot limit, and two limits at once ------------------------------------------------


def hot_limits(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    """Scenario 1's rows and 5's; and scenario 1's engine figures, the reference of 7 and 8."""
    load.create_semaphore()
    procs = args.processes
    rows = []
    log(f"scenario 1: hot limit, capacity 4, {procs} processes, {args.runs} x {args.seconds:g} s")
    load.reset_semaphore(1)
    if 1 in args.only:
        hold, ref_ms = statements.lock_hold(HOT), statements.reference_cycle_ms()  # before any load
    one = load.repeat(load.Load("engine", (HOT,), procs, args.seconds, hold_ms=args.hold), args.runs)
    ref_one = load.repeat(load.Load("reference", (HOT,), procs, args.seconds, hold_ms=args.hold), args.runs)
    ratio = one["median"] / ref_one["median"]
    if 1 in args.only:
        rows.append(
            Row(
                f"1. Hot limit: capacity 4, {procs} processes, acquire → {_hold(args)}release (cycles/s, median of "
                f"{args.runs}; acquire → busy, wait and confirm included)",
                f"{_spread(one)}; {_waits(one)}; {_queued(one)}",
                f"{_spread(ref_one)}; {_waits(ref_one)} (bare semaphore, first try → taken)",
                f"{ratio:.2f}",
                "≥ 0.6",
                verdict(ratio >= 0.6),
            )
        )
        rows.append(
            Row(
                "1. One process, uncontended: a cycle, and how long it holds the limit's row lock",
                f"{hold['cycle_ms']:.2f} ms per cycle, lock held {hold['locked_ms']:.2f} ms "
                f"(so ≤ {1000 / hold['locked_ms']:,.0f} cycles/s on one limit)",
                f"{ref_ms:.2f} ms per cycle, each UPDATE holds the row through its commit",
                f"{ref_ms / hold['cycle_ms']:.2f}",
            )
        )
        figures = statements.per_operation(HOT, 4)
        queued = sum(
            f[0]
            for name, f in figures.items()
            if "nobody" not in name and "at once" not in name and "skipped" not in name
        )
        rows.append(
            Row(
                "1. Statements per engine operation (round trips; BEGIN and COMMIT included)",
                statements.summary(figures),
                "bare semaphore: 1 per operation, autocommit",
                f"a queued cycle: {queued} statements, 3 commits",
            )
        )
    needed, allowed = 4 * procs + 20, _max_connections()
    if 5 in args.only and needed > allowed:
        log(f"scenario 5 skipped: two limits x {procs} processes need ~{needed} connections, max is {allowed}")
        rows.append(
            Row(
                f"5. Two limits at once vs one ({procs} processes each)",
                f"skipped: needs ~{needed} "
                f"connections (2 per engine process), the server's max_connections is {allowed}",
            )
        )
    elif 5 in args.only:
        log(f"scenario 5: two limits at once, {procs} processes each")
        two = load.repeat(load.Load("engine", (HOT, HOT_2), procs, args.seconds, hold_ms=args.hold), args.runs)
        ref_two = load.repeat(load.Load("reference", (HOT, HOT_2), procs, args.seconds, hold_ms=args.hold), args.runs)
        scale, ref_scale = two["median"] / one["median"], ref_two["median"] / ref_one["median"]
        rows.append(
            Row(
                f"5. Two limits at once vs one ({procs} processes each; cycles/s, both limits together)",
                f"{_spread(two)} = {scale:.2f}× one",
                f"{_spread(ref_two)} = {ref_scale:.2f}× one row",
                f"{scale:.2f}×",
                "≥ 1.6×",
                verdict(scale >= 1.6),
            )
        )
    return rows, one


# --- 7 and 8: a keyed limit, and two limits per acquisition ----------------------------------------


def keyed_and_groups(args: argparse.Namespace, one: dict[str, Any]) -> list[Row]:
    """Scenario 1's loop on the rules of limits.engine.grant and keys, each row beside scenario 1's engine
    figure of this run (one plain limit, capacity 4, the same number of processes):

    7. One limit with per_key 1; each cycle acquires with a key drawn from 1,000. With capacity
       1,000 the keys bind (the processes can never fill the total; a cycle queues only when its
       key is held); with capacity 4 the total binds, as in scenario 1.
    8. acquire_group over two limits of capacity 4, half the processes naming them in the other
       order (crossing orders must neither deadlock nor grant half a group); release both.
    """
    procs, rows = args.processes, []
    reference = f"{_spread(one)}; {_waits(one)}; {_queued(one)} (scenario 1: one plain limit, capacity 4)"
    if 7 in args.only:
        for name, capacity, binds in ((KEYED, KEYED_CAPACITY, "the keys bind"), (KEYED_TOTAL, 4, "the total binds")):
            log(f"scenario 7: keyed limit, capacity {capacity}, per_key 1, {KEYS:,} keys, {procs} processes")
            keyed_load = load.Load("keyed", (name,), procs, args.seconds, keys=KEYS, hold_ms=args.hold)
            keyed = load.repeat(keyed_load, args.runs)
            rows.append(
                Row(
                    f"7. Keyed limit, {binds}: capacity {capacity:,}, per_key 1, {KEYS:,} keys, {procs} processes, "
                    f"acquire(key=random) → {_hold(args)}release (cycles/s, median of {args.runs})",
                    f"{_spread(keyed)}; {_waits(keyed)}; {_queued(keyed)}; {_trouble(keyed, one)}",
                    reference,
                    f"{keyed['median'] / one['median']:.2f}",
                )
            )
        figures = statements.per_operation(KEYED, 1, key=lambda n: "key-0")
        total_figures = statements.per_operation(KEYED_TOTAL, 4, key=lambda n: f"key-{n}")
        rows.append(
            Row(
                f"7. Statements per keyed operation {PER_CALL}",
                f"keys bind (a second run on a held key): {statements.summary(figures, timed=True)}. "
                f"Total binds: {statements.summary(total_figures, timed=True)}",
                PER_CALL_REFERENCE,
            )
        )
        replaced = statements.replace_at_a_key(KEYED)  # SPEC 14.3 (issue 47): one call whatever it replaces
        rows.append(
            Row(
                "7. Replace at a key with 1,000 waiting: acquire(key, on_full='replace') behind the key's holder",
                f"{replaced['engine_calls']} engine call ({replaced['under_lock']} statement under lock; "
                f"{replaced['statements']} in all, the other the wake of the replaced runs after the commit; "
                f"{replaced['ms']:.1f} ms), {replaced['replaced']:,} entries replaced, answered {replaced['state']}",
                PER_CALL_REFERENCE,
            )
        )
    if 8 in args.only:
        log(f"scenario 8: acquire_group over {GROUP_A} + {GROUP_B} (half reversed), {procs} processes")
        both = load.repeat(load.Load("group", (GROUP_A, GROUP_B), procs, args.seconds, hold_ms=args.hold), args.runs)
        rows.append(
            Row(
                f"8. Two limits per acquisition: acquire_group([a, b]) in half the processes, [b, a] in the other "
                f"half, capacity 4 each, {procs} processes, → {_hold(args)}release both "
                f"(cycles/s, median of {args.runs})",
                f"{_spread(both)}; {_waits(both)}; {_queued(both)}; {_trouble(both, one)}",
                reference,
                f"{both['median'] / one['median']:.2f}",
            )
        )
        figures = statements.per_operation(GROUP_A, 4, group=(GROUP_A, GROUP_B))
        rows.append(
            Row(
                f"8. Statements per group operation, 2 limits {PER_CALL}",
                statements.summary(figures, timed=True),
                PER_CALL_REFERENCE,
            )
        )
    return rows


# --- 14: fair shares between keys (issue 28, SPEC 13) ----------------------------------------------

FAIR_LOADS = (
    (FAIR, 'fair (`"share": "fair"`)'),
    (FIFO_PER_KEY, "fifo, per_key 2"),
    (FIFO_PLAIN, "fifo, no per_key"),
)


def fair_shares(args: argparse.Namespace, one: dict[str, Any] | None) -> list[Row]:
    """The parts of scenario 14 that `--fair-parts` names (all by default), in this order: the
    issue's simulation on the three limits in turn (tests.bench.fair.simulate), the hot loop of
    scenario 7 on each (a key drawn from 5, beside scenario 1 of this run: `one`), the key choice
    at 10,000 waiting keys on a fair limit and a fifo limit with per_key 2, and the turns of six
    tenants on 4 slots (issue 43, fair against fifo with per_key 2); then verify."""
    parts: set[str] = getattr(args, "fair_parts", {"flood", "hot", "keys", "turns"})
    rows: list[Row] = []
    flood = 200 if args.quick else fair.FLOOD
    hold = fair.HOLD_MS
    for limit, label in FAIR_LOADS if "flood" in parts else ():
        assert one is not None
        log(f"scenario 14: capacity 10, {label}: A floods {flood}, B-E send {fair.SMALL} each, hold {hold:g} ms")
        got = fair.simulate(limit, flood=flood)
        log(
            f"    {got['seconds']:.1f} s (ideal {got['ideal_s']:.1f}); used {got['used']:.1%} (busy {got['busy']:.1%}) "
            f"while anyone waits; B-E p95 {got['small_p95']:.0f} ms; A {got['a_per_s']:.1f}/s, "
            f"{got['a_per_s_during']:.1f}/s beside B-E; stale wakes {got['stale']}, re-polls {got['repolls']}"
        )
        target_ok = got["used"] >= 0.95 and (limit != FAIR or got["small_p95"] <= 2 * hold)
        rows.append(
            Row(
                f"14. Fair shares, {label}: capacity 10, tenant A floods {flood:,} runs, B-E send {fair.SMALL} each "
                f"{fair.SMALL_AFTER_S:g} s later, each holds {hold:g} ms (acquire(key=tenant) → hold → release, "
                f"{fair.A_PROCESSES + 4} processes, LISTEN/NOTIFY wake)",
                f"capacity used while anyone waits {got['used']:.1%} (busy {got['busy']:.1%}, the rest reserved "
                f"for a woken run); B-E first run's time to grant at most {got['small_first_max']:,.0f} ms; "
                f"all B-E runs p50 {got['small_p50']:,.0f} / p95 {got['small_p95']:,.0f} / "
                f"max {got['small_max']:,.0f} ms, all done {got['small_done_s']:.1f} s in; A {got['a_per_s']:.1f} "
                f"runs/s overall, {got['a_per_s_during']:.1f}/s while B-E had runs; all {got['n']:,} in "
                f"{got['seconds']:.1f} s (ideal {got['ideal_s']:.1f}), {got['cycles_per_s']:.1f} cycles/s; "
                f"slots really held p95 {got['hold_p95']:,.0f} ms",
                f"scenario 1: {_spread(one)} cycles/s (capacity 4, hold 0); this load's ceiling 10 / {hold:g} ms "
                f"= {10 / hold * 1000:.0f} cycles/s",
                f"{got['cycles_per_s'] / one['median']:.2f}",
                "used 100 %" + ("; B-E p95 ≤ 2 holds" if limit == FAIR else ""),
                verdict(target_ok),
            )
        )
    for limit, label in FAIR_LOADS if "hot" in parts else ():
        assert one is not None
        log(f"scenario 14: hot loop, {label}, keys from 5, {args.processes} processes")
        hot = load.repeat(
            load.Load("keyed", (limit,), args.processes, args.seconds, keys=5, hold_ms=args.hold), args.runs
        )
        rows.append(
            Row(
                f"14. Hot loop on the {label} limit: capacity 10, {args.processes} processes, acquire(key=random of "
                f"5) → {_hold(args)}release (cycles/s, median of {args.runs})",
                f"{_spread(hot)}; {_waits(hot)}; {_queued(hot)}; {_trouble(hot, one)}",
                f"scenario 1: {_spread(one)}; {_waits(one)}",
                f"{hot['median'] / one['median']:.2f}",
            )
        )
    keys = args.fair_keys if "keys" in parts else 0
    releases = 50 if args.quick else 300
    for limit, label in ((FAIR_WIDE, "fair"), (FIFO_WIDE, "fifo, per_key 2")) if keys else ():
        tag = uuid.uuid4().hex[:6]
        log(f"scenario 14: {keys:,} keys waiting on a {label} limit, then {releases} releases")
        waiting = fair.fill_waiting(limit, keys, tag)
        plan_ms, plan = fair.explain_candidate(limit) if limit == FAIR_WIDE else (float("nan"), [])
        next_ms, next_plan = fair.explain_candidate(limit, fair.FAIR_NEXT) if limit == FAIR_WIDE else (float("nan"), [])
        got = fair.release_stream(limit, tag, releases)
        log(
            f"    release that grants p50 {got['release_p50']:.2f} / p95 {got['release_p95']:.2f} ms; confirm "
            f"p50 {got['confirm_p50']:.2f} ms; {got['distinct_keys']} keys granted; first {got['first_keys']}"
        )
        for line in plan:
            log(f"    | {line}")
        for line in next_plan:
            log(f"    limits_fair_next | {line}")
        rows.append(
            Row(
                f"14. Key choice at scale, {label}: capacity 10 full, {keys:,} keys with 1-3 runs each waiting "
                f"({waiting:,} runs), {releases} releases one after the "
                "other, each granting one run (one process)",
                f"release that grants p50 {got['release_p50']:.2f} / p95 {got['release_p95']:.2f} ms; the woken "
                f"run's confirm p50 {got['confirm_p50']:.2f} / p95 {got['confirm_p95']:.2f} ms; "
                f"{got['distinct_keys']} distinct keys granted"
                + (
                    f"; EXPLAIN ANALYZE of the fair choice (limits_fair_next, one call): {next_ms:,.2f} ms; of "
                    f"its key scan to the first key: {plan_ms:,.2f} ms"
                    + (" (index limitkey_fair_order)" if any("limitkey_fair_order" in x for x in plan) else "")
                    if plan
                    else ""
                ),
            )
        )
    if "turns" in parts:
        rows.append(fair_turns())
    from limits import verify

    checked = verify.verify()
    rows.append(
        Row(
            "14. After the loads: `limits.verify.verify()` over every limit (13.6 on the fair ones)",
            checked.summary(),
            "—",
            "—",
            "verify ok",
            verdict(checked.ok),
        )
    )
    return rows


def fair_turns() -> Row:
    """Issue 43's row: six tenants with 20 runs each arrive oldest first on 4 slots, 200 ms holds
    (tests.bench.fair.turns), on a fair limit and, as the reference, on a fifo limit with per_key
    2 (the same load, the same run). Each tenant's first grant from its arrival, against the first
    release after it arrived; the largest gap between two of its grants while it waits. The
    target: every first grant within one hold of that release, no waiting tenant more than
    (competing keys / capacity + 1) holds without a grant. The met column judges it in holds of
    200 ms; the figures also in holds as the slots were really held (granted → freed, from the
    rows) and in grants, whatever the machine's pace (tests.bench.fair.summarize_turns)."""
    hold = fair.HOLD_MS
    got: dict[str, dict[str, Any]] = {}
    for limit, label in ((FAIR_TURNS, "fair"), (FIFO_TURNS, "fifo, per_key 2")):
        log(
            f"scenario 14: turns, capacity {fair.TURN_CAPACITY}, {label}: {fair.TURN_TENANTS} tenants x "
            f"{fair.TURN_RUNS} runs arriving oldest first, hold {hold:g} ms"
        )
        figures = got[limit] = fair.turns(limit)
        for key, tenant in figures["tenants"].items():
            log(
                f"    {key}: arrived {tenant['arrived']:.0f} ms in; first grant {tenant['first']:.0f} ms after, "
                f"{tenant['after_release']:+.0f} ms from the first release after it arrived, {tenant['ahead']} grants "
                f"to others between; largest gap between two grants while waiting {tenant['gap']:.0f} ms "
                f"({tenant['gap_grants']} grants to others); longest without a grant {tenant['without']:.0f} ms"
            )
        log(
            f"    {figures['n']} runs in {figures['seconds']:.1f} s (ideal {figures['ideal_s']:.1f}); slots held "
            f"(granted → freed) mean {figures['held_ms']:.0f} ms, busy → released p95 {figures['hold_p95']:.0f} ms; "
            f"lapsed reservations {figures['lapsed']}, stale wakes {figures['stale']}, re-polls "
            f"{figures['repolls']}; target met: {_met(figures)}"
        )
    fair_figures, fifo_figures = got[FAIR_TURNS], got[FIFO_TURNS]
    bound = fair_figures["holds_bound"]
    return Row(
        f"14. Turns (issue 43): capacity {fair.TURN_CAPACITY}, fair, {fair.TURN_TENANTS} tenants x {fair.TURN_RUNS} "
        f"runs arriving oldest first (tenant 1's, then tenant 2's, ...; a process each), each holds {hold:g} ms "
        "(acquire(key=tenant) → hold → release, LISTEN/NOTIFY wake; times from the slot rows)",
        _turns(fair_figures) + f"; target met: {_met(fair_figures)}",
        "fifo, per_key 2, same load: " + _turns(fifo_figures) + f"; target met: {_met(fifo_figures)}",
        f"{fair_figures['without_max'] / fifo_figures['without_max']:.2f}",
        f"first grant ≤ first release after arriving + 1 hold ({hold:g} ms); ≤ {fair.TURN_TENANTS} / "
        f"{fair.TURN_CAPACITY} + 1 = {bound:g} holds ({bound * hold:.0f} ms) without a grant",
        verdict(fair_figures["first_met"] and fair_figures["gap_met"]),
    )


def _turns(figures: dict[str, Any]) -> str:
    tenants = figures["tenants"]

    def each(field: str, sign: str = "") -> str:
        return " / ".join(f"{t[field]:{sign},.0f}" for t in tenants.values())

    return (
        f"tenants 1-{len(tenants)} arrived at {each('arrived')} ms; first grant after arriving: {each('first')} ms, "
        f"from the first release after it arrived: {each('after_release', '+')} ms, grants to other tenants "
        f"between its arrival and its first grant: {each('ahead')}; largest gap between two grants "
        f"while waiting: {each('gap')} ms, grants to others within it: {each('gap_grants')}; longest without a "
        f"grant (first wait included): {each('without')} ms; "
        f"slots held (granted → freed) mean {figures['held_ms']:.0f} ms; all {figures['n']} in "
        f"{figures['seconds']:.1f} s (ideal {figures['ideal_s']:.1f})"
    )


def _met(figures: dict[str, Any]) -> str:
    def yes(ok: bool) -> str:
        return "yes" if ok else "no"

    return (
        f"in {fair.HOLD_MS:g} ms holds, first grants {yes(figures['first_met'])}, gaps {yes(figures['gap_met'])}; "
        f"in holds as held ({figures['held_ms']:.0f} ms), first grants {yes(figures['first_met_held'])}, gaps "
        f"{yes(figures['gap_met_held'])}; in grants (≤ {fair.TURN_CAPACITY} to others before a first grant, "
        f"≤ {figures['most_without_grants']} while waiting), first grants {yes(figures['first_met_grants'])}, gaps "
        f"{yes(figures['gap_met_grants'])}"
    )


def _hold(args: argparse.Namespace) -> str:
    return f"hold {args.hold:g} ms → " if args.hold else ""


def _waits(figures: dict[str, Any]) -> str:
    return f"acquire → busy p50 {figures['p50']:.1f} / p95 {figures['p95']:.1f} / max {figures['max_ms']:.0f} ms"


def _queued(figures: dict[str, Any]) -> str:
    share = figures["queued"] / figures["begun"] if figures["begun"] else 0.0
    return f"{share:.0%} of cycles queued"


def _trouble(figures: dict[str, Any], one: dict[str, Any]) -> str:
    """Lock waits (beside scenario 1's), deadlocks and the errors the processes retried."""
    errors = ", ".join(f"{count} {name}" for name, count in figures["errors"].items()) or "no errors"
    return (
        f"{figures['lock_waits']:.1f} backends waiting on a lock on average (scenario 1: {one['lock_waits']:.1f}); "
        f"{figures['deadlocks']} deadlocks, {errors}"
    )


def _max_connections() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SHOW max_connections")
        return int(cur.fetchone()[0])


def _spread(figures: dict[str, float]) -> str:
    if figures["min"] == figures["max"]:
        return f"{figures['median']:,.0f}"
    return f"{figures['median']:,.0f} ({figures['min']:,.0f}–{figures['max']:,.0f})"


# --- 9: runs/s with and without a bound on the whole run ------------------------------------------


def run_throughput(args: argparse.Namespace) -> list[Row]:
    n = args.workflow_runs
    log(f"scenario 9: {n} runs of a one-step workflow, plain then bounded (total 4), 2 Celery workers")
    result = runs.run(n, workers_count=2)
    plain, bounded, checked = result["plain"], result["bounded"], result["verify"]
    ratio = bounded["per_s"] / plain["per_s"]
    return [
        Row(
            f"9. Run throughput: {n:,} runs of a one-step workflow, 2 Celery workers (solo pool); "
            f'bounded `concurrency={{"total": 4}}` vs plain (runs/s, first start → last finished)',
            f"{_throughput(bounded)}; {bounded['queued_at_start']:,} created queued",
            f"plain: {_throughput(plain)}",
            f"{ratio:.2f}",
            "—",
            "—",
        ),
        Row(
            "9. After both loads: every run completed; `limits.verify.verify()` over every limit",
            f"{2 * n:,} of {2 * n:,} completed; verify {checked.summary()}",
            f"workers' peak RSS {result['peak_rss_mb']:.0f} MiB",
            "—",
            "verify ok",
            verdict(checked.ok),
        ),
    ]


# --- 13: runs/s under the box's run concurrency (issue 27) -------------------------------------------


def box_throughput(args: argparse.Namespace) -> list[Row]:
    n = args.workflow_runs
    log(f"scenario 13: {n} runs of a one-step workflow without a box, then under a box of base 4; twice")
    result = runs.box(n, workers_count=2)
    none, boxed, checked = result["none"], result["box"], result["verify"]
    plain_per_s = sum(f["per_s"] for f in none) / len(none)
    box_per_s = sum(f["per_s"] for f in boxed) / len(boxed)

    def both(figures: list[dict[str, Any]]) -> str:
        return "; then ".join(f"{_throughput(f)}; {f['queued_at_start']:,} created queued" for f in figures)

    return [
        Row(
            f"13. Run throughput under the box: {n:,} runs of a one-step workflow, 2 Celery workers (solo pool); "
            f'`run_concurrency={{"base": 4, "burst": 2.0}}` vs no box, in turn twice (runs/s, first start → '
            "last finished)",
            f"box: {both(boxed)}",
            f"no box: {both(none)}",
            f"{box_per_s / plain_per_s:.2f}",
            "—",
            "—",
        ),
        Row(
            "13. After the loads: every run completed; `limits.verify.verify()` over every limit (the box's too)",
            f"{n * (len(none) + len(boxed)):,} completed; verify {checked.summary()}",
            "—",
            "—",
            "verify ok",
            verdict(checked.ok),
        ),
    ]


def _throughput(figures: dict[str, Any]) -> str:
    return (
        f"{figures['per_s']:,.1f} runs/s ({figures['seconds']:.1f} s, of which starting them "
        f"{figures['enqueue_s']:.1f} s); created → finished p50 {figures['p50_ms']:,.0f} / "
        f"p95 {figures['p95_ms']:,.0f} ms; at most {figures['max_running']} running at once"
    )


# --- 2: hand-off latency ------------------------------------------------------------------------------


def handoffs(args: argparse.Namespace, worker: handoff.Worker) -> list[Row]:
    log(f"scenario 2: {args.handoffs} hand-offs through a real Celery worker")
    handoff.purge_broker()
    result = handoff.measure(HANDOFF, args.handoffs, worker)
    returned, woken, resumed, completed = result["returned"], result["woken"], result["resumed"], result["completed"]
    p50, p95 = percentile(resumed, 50), percentile(resumed, 95)
    log(f"  resumed p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    return [
        Row(
            f"2. Hand-off, release → slot reserved for the head run and committed (the wake starts), "
            f"{len(woken)} hand-offs",
            _latency(woken),
            f"release() returned, the wake published: {_latency(returned)}",
            "—",
            "—",
            "—",
        ),
        Row(
            "2. Hand-off, release → run resumed (hook step closed in the worker)",
            _latency(resumed),
            f"run completed: {_latency(completed)}",
            "—",
            "p50 ≤ 50 ms, p95 ≤ 200 ms",
            verdict(p50 <= 50 and p95 <= 200),
        ),
    ]


def _latency(values: list[float]) -> str:
    return f"p50 {percentile(values, 50):.1f} / p95 {percentile(values, 95):.1f} / max {max(values):.1f} ms"


# --- 3: the sweep -------------------------------------------------------------------------------------


SWEEP_DELAY_RUNS = 1_000


def sweep_delay() -> list[Row]:
    n = SWEEP_DELAY_RUNS
    log(f"scenario 12: a sweep sent with no runs queued, then behind {n:,} queued runs, one Celery worker")
    result = sweeps.delay_beside_runs(n)
    empty, behind, reference = result["empty"], result["behind"], result["reference"]
    log(
        f"  empty: taken after {_seconds([s[0] for s in empty])}; behind {n:,} runs: "
        f"{_seconds([s[0] for s in behind])} with {min(s[2] for s in behind):,}+ runs unfinished; "
        f"in the runs' queue: {reference[0]:.2f} s with {reference[2]:,} unfinished "
        f"(starting the runs took {result['enqueue_s']:.1f} s)"
    )
    return [
        Row(
            f"12. Sweep delay: `limits.tasks.sweep` sent → taken by the worker (→ pass ended), one Celery worker "
            f"(solo pool), {len(behind)} sweeps each, behind {n:,} queued one-step runs vs an empty queue",
            f"behind {n:,} runs: {_seconds([s[0] for s in behind])} (→ ended {_seconds([s[1] for s in behind])}); "
            f"at least {min(s[2] for s in behind):,} of the runs still unfinished at each",
            f"empty queue: {_seconds([s[0] for s in empty])} (→ ended {_seconds([s[1] for s in empty])}); "
            f"sent to the runs' queue instead (one queue, before the maintenance queue): {reference[0]:.1f} s, "
            f"{reference[2]:,} runs unfinished",
            "—",
            "—",
            "—",
        )
    ]


def _seconds(values: list[float]) -> str:
    return f"median {median(values) * 1000:,.0f} / max {max(values) * 1000:,.0f} ms"


def big_sweep(args: argparse.Namespace, worker: handoff.Worker) -> tuple[list[Row], float]:
    n = _rows(args)
    log(f"scenario 3: one sweep pass (the Celery task, in the worker) over {n:,} busy past expiry + {n:,} waiting")
    result = sweeps.worker_pass(n, worker, whole_wake=args.whole_wake)
    seconds = result["seconds"]
    bound = "" if result["measured"] else "> "
    log(
        f"  {bound}{seconds:.2f} s: {result['locked']:.2f} s to commit, then {bound}{result['wake']:.2f} s waking "
        f"{result['granted']:,} runs; peak RSS {result['peak_rss_mb']:.0f} MiB"
    )
    lapses = sweeps.lapse_pass(n // 10)
    log(f"  lapses: {lapses['seconds']:.2f} s for {lapses['lapsed']:,} lapsed, {lapses['granted']:,} granted again")
    return [
        Row(
            f"3. Sweep pass lapsing {n // 10:,} reservations nobody confirmed (`services.sweep` in this process)",
            f"{lapses['seconds']:.2f} s",
            f"{lapses['lapsed']:,} lapsed, back at the end of the queue, and {lapses['granted']:,} granted again",
            "—",
            "—",
            "—",
        ),
        Row(
            f"3. Sweep pass: {n:,} busy slots past expiry + {n:,} waiting runs (`limits.tasks.sweep` in the worker)",
            f"{bound}{seconds:.1f} s = {bound.replace('>', '<')}{2 * n / seconds:,.0f} rows/s",
            f"expire + grant, to commit: {result['locked']:.2f} s; then waking the {result['granted']:,} runs "
            f"(Celery messages): {bound}{result['wake']:.1f} s",
            "—",
            "≤ 5 s" if n == 100_000 else "≤ 5 s at 100k",
            verdict(result["measured"] and seconds <= 5) if n == 100_000 else "—",
        ),
    ], result["peak_rss_mb"]


def idle_sweep(small: dict[str, Any], large: dict[str, Any], *, big: bool) -> Row:
    ok = large["ms"] <= 10 and large["queries"] == small["queries"]
    for name, figures in (("near-empty tables", small), ("full tables", large)):
        for query in figures["sql"]:
            log(f"  idle sweep, {name}: {query['time']} s  {query['sql'][:150]}")
    return Row(
        f"3. Idle sweep over {MANY_LIMITS:,} limits, nothing to do (median of 20)",
        f"{large['ms']:.1f} ms, {large['queries']} queries "
        + ("(beside scenario 4's rows)" if big else "(after the scenarios)"),
        f"{small['ms']:.1f} ms, {small['queries']} queries (tables near empty)",
        "—",
        "≤ 10 ms, constant queries",
        verdict(ok),
    )


# --- 4: Studio at scale -----------------------------------------------------------------------------


def studio_pages(args: argparse.Namespace) -> tuple[list[Row], float, dict[str, Any]]:
    busy, waiting = int(100_000 * args.scale), int(1_000_000 * args.scale)
    limit = data.limit_id(STUDIO)
    log(f"scenario 4: generating {busy:,} busy slots and {waiting:,} queue entries on {STUDIO}")
    data.clear(limit, tag="st")
    data.busy_slots(limit, busy, tag="st", expired=False)
    data.waiting_entries(limit, waiting, tag="st", with_runs=False)
    data.analyze()
    base = f"/studio/limits/{STUDIO}/"
    htmx = {"HX-Request": "true"}
    pages = [
        ("Limits list", "/studio/limits/", {}),
        ("Limits list, htmx refresh (#limits-table)", "/studio/limits/", htmx),
        ("Limit page", base, {}),
        ("Limit page, queue page 500", f"{base}?queue=500", {}),
        ("Limit page, htmx refresh (#live: counts, slots, queue)", base, htmx),
    ]
    params = {"pages": pages, "requests": 20}
    log("  requesting the pages from a web process of its own")
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.pages", json.dumps(params)],
        env=dict(os.environ), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the web process failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    idle_full = sweeps.idle()  # the sweep has nothing to do on these rows: capacity is full, nothing due
    rows = []
    for label, page in result["pages"].items():
        targeted = label.startswith("Limit page")  # issue 7 sets the target on a limit's page
        ok = page["status"] == 200 and page["ms"] <= 100 and page["queries"] <= 10
        log(f"  {label}: {page['ms']:.1f} ms, {page['queries']} queries, {page['status']}, {page['bytes']:,} B")
        for query in page["slowest_sql"]:
            log(f"    {query['time']} s  {query['sql'][:160]}")
        rows.append(
            Row(
                f"4. {label} — `{page['url']}`, {busy:,} busy + {waiting:,} queued, {MANY_LIMITS:,} limits",
                f"{page['ms']:.1f} ms, {page['queries']} queries"
                + ("" if page["status"] == 200 else f" (HTTP {page['status']})"),
                "—",
                "—",
                "≤ 100 ms, ≤ 10 queries" if targeted else "—",
                verdict(ok) if targeted else "—",
            )
        )
    data.clear(limit, tag="st")
    return rows, result["peak_rss_mb"], idle_full


# --- 10: the hot path against the durable FIFO reference (issue 17) --------------------------------


def hot_path(args: argparse.Namespace) -> tuple[list[Row], dict[str, dict[int, dict[str, Any]]]]:
    swept = hotpath.sweep(args, _max_connections())
    engine, fifo, bare = swept["engine"], swept["fifo"], swept["reference"]
    rows = []
    for procs in (8, 32):
        if procs not in engine or procs not in fifo:
            continue
        e, f = engine[procs], fifo[procs]
        ratio = e["median"] / f["median"]
        rows.append(
            Row(
                f"10. Hot path, {procs} processes on one limit of capacity 4, acquire → {_hold(args)}release "
                f"(cycles/s, median of {args.runs}): engine vs the durable FIFO semaphore",
                f"{_spread(e)}; {_waits(e)}; {_queued(e)}",
                f"durable FIFO: {_spread(f)}; {_waits(f)}; {_queued(f)}",
                f"{ratio:.2f}",
                "≥ 0.5",
                verdict(ratio >= 0.5),
            )
        )
        if procs in bare:
            b = bare[procs]
            rows.append(
                Row(
                    f"10. The ceiling at {procs} processes: the bare semaphore (two autocommit UPDATEs, "
                    "retried at once when full; not FIFO)",
                    f"{_spread(b)} cycles/s",
                    f"engine {e['median'] / b['median']:.2f}×, durable FIFO {f['median'] / b['median']:.2f}× of it",
                    f"{e['median'] / b['median']:.2f}",
                )
            )
        raw = swept["engine_raw"].get(procs)
        if raw:
            rows.append(
                Row(
                    f"10. The engine's functions without the client, {procs} processes: limits_acquire / "
                    "limits_release sent straight on psycopg as prepared statements (server-side binding), no Django, "
                    "no Python rules; the same server work as the engine",
                    f"{_spread(raw)} cycles/s; CPU {_cpu(raw)}; {_queued(raw)}",
                    f"engine {_spread(e)}, CPU {_cpu(e)}; durable FIFO {_spread(f)}",
                    f"{raw['median'] / e['median']:.2f}× the engine, {raw['median'] / f['median']:.2f}× the FIFO",
                )
            )
        mx, sx = swept["fifo_mx"].get(procs), swept["fifo_sx"].get(procs)
        if mx and sx:
            rows.append(
                Row(
                    f"10. Lock patterns, measured on the durable FIFO at {procs} processes: the limit's row "
                    "locked in a subtransaction and written after it (a MultiXact on every write: the engine's "
                    "functions before migration 0015) vs locked and written inside one block (the engine's "
                    "functions now, so that answering 'slow' gives the lock back)",
                    f"written after the block: {_spread(mx)} cycles/s, CPU {_cpu(mx)}",
                    f"lock and writes in one block: {_spread(sx)}, CPU {_cpu(sx)}; plain FIFO (no subtransaction) "
                    f"{_spread(f)}",
                    f"{mx['median'] / sx['median']:.2f}; one block {sx['median'] / f['median']:.2f}× the FIFO",
                )
            )
        rc = swept["fifo_rc"].get(procs)
        if rc:
            rows.append(
                Row(
                    f"10. The SPEC's reservation, measured on the durable FIFO at {procs} processes: the grant "
                    "reserves the head's slot and the woken waiter confirms it in one more call and durable commit "
                    "under the limit's lock (3 commits a queued cycle, the engine's count, against 2)",
                    f"FIFO with the reservation: {_spread(rc)} cycles/s, CPU {_cpu(rc)}; {_queued(rc)}",
                    f"plain FIFO {_spread(f)}, CPU {_cpu(f)}; engine {_spread(e)}",
                    f"{rc['median'] / f['median']:.2f}× the FIFO; the engine {e['median'] / rc['median']:.2f}× it",
                )
            )
        ok = e["cpu_client_ms"] + e["cpu_server_ms"] <= 1.5
        rows.append(
            Row(
                f"10. CPU per cycle at {procs} processes (/proc utime + stime of the load processes and "
                "their PostgreSQL backends ÷ cycles)",
                f"{_cpu(e)} ({_queued(e)})",
                f"durable FIFO: {_cpu(f)} ({_queued(f)}); bare semaphore: "
                + (_cpu(bare[procs]) if procs in bare else "—"),
                f"{(e['cpu_client_ms'] + e['cpu_server_ms']) / (f['cpu_client_ms'] + f['cpu_server_ms']):.2f}",
                "≤ 1.5 ms",
                verdict(ok),
            )
        )
    if 8 in engine and 8 in fifo:
        rows.append(
            Row(
                "10. Where a cycle's wall time goes, 8 processes (each process's time in each operation, "
                "ms per cycle, summed over the processes ÷ cycles)",
                _spent(engine[8]),
                "durable FIFO: " + _spent(fifo[8]),
            )
        )
        functions = engine[8].get("functions", {})
        if functions:
            rows.append(
                Row(
                    "10. Time inside PostgreSQL per call, 8 processes (pg_stat_user_functions, track_functions = pl)",
                    _functions(functions),
                    "a call's wall time in the process, above, minus this: the round trip and the client",
                )
            )
        one = hotpath.uncontended(20 if args.quick else 100)
        rows.append(
            Row(
                "10. One process, uncontended, a queued cycle by operation: client wall ms (median); then "
                "PostgreSQL's ms per call inside each function (own time; no lock waits here)",
                "; ".join(f"{name} {ms:.2f}" for name, ms in one["engine_ms"].items())
                + ". In the server: "
                + _functions(one["engine_functions"]),
                "durable FIFO: "
                + "; ".join(f"{name} {ms:.2f}" for name, ms in one["fifo_ms"].items())
                + ". In the server: "
                + _functions(one["fifo_functions"]),
            )
        )
        ranked = hotpath.statement_times(10 if args.quick else 30)
        inner = [r for r in ranked if not r[0].startswith(("SELECT outcome", "SELECT * FROM limits_settle"))]
        top = inner[:6]
        calls = sum(ms for text, ms, _ in ranked if text.startswith("SELECT outcome"))
        rows.append(
            Row(
                "10. Inside the engine's functions, uncontended (auto_explain with ANALYZE in one session, nested "
                "statements; ms per round of 6 acquires, 1 queued, its confirm and 6 releases; timing overhead "
                "included)",
                "; ".join(f"`{text[:70]}` {ms:.2f} ms ({n} runs)" for text, ms, n in top),
                f"the function calls, whole: {calls:.2f} ms a round; every statement inside them: "
                f"{sum(ms for _, ms, _ in inner):.2f} ms; the rest is PL/pgSQL itself (exception blocks, "
                "expressions, helper calls)",
            )
        )
        profile = hotpath.profile_engine(args, 8)
        per_cycle = 1000 * profile["total_s"] / profile["cycles"] if profile["cycles"] else float("nan")
        rows.append(
            Row(
                "10. cProfile (CPU clock) of one engine process of 8, one extra run: its CPU by where the code lives",
                "; ".join(f"{group} {share:.0%}" for group, share in profile["groups"].items() if share >= 0.01),
                f"{profile['total_s']:.2f} s CPU in {args.seconds:g} s (~{per_cycle:.1f} ms per cycle of "
                "this process, with the profiler's own overhead); top: "
                + "; ".join(f"{where} {tottime * 1000:.0f} ms" for tottime, _, where in profile["top"][:4]),
            )
        )
    points = ", ".join(
        f"{p}: " + " / ".join(f"{swept[k][p]['median']:,.0f}" if p in swept[k] else "—" for k in hotpath.KINDS)
        for p in args.sweep
    )
    rows.append(
        Row(
            "10. Cycles/s by processes, engine / durable FIFO / bare semaphore (the chart)",
            points,
            args.chart or "no chart (--chart PATH)",
        )
    )
    return rows, swept


# --- 15: the hot limit over a long history (issue 26, part 2) ------------------------------------


def hot_over_history(args: argparse.Namespace) -> list[Row]:
    """Scenario 1's engine load on the hot limit, then the same after the limit has kept the
    history of 1,000,000 cycles (x --scale: freed slots and granted queue entries, bulk-inserted
    behind its queue positions, then ANALYZE), then again with the history gone: what a long
    history costs the hot path. On PostgreSQL the history sits in partitions of its own
    (migration 0034), so the live indexes do not grow with it; before, every slot and entry
    shared the tables and their unique and lookup indexes with the whole history."""
    procs, count = args.processes, int(1_000_000 * args.scale)
    log(f"scenario 15: hot limit over a history of {count:,} slots and entries, {procs} processes")
    limit = data.limit_id(HOT)
    hot = load.Load("engine", (HOT,), procs, args.seconds, hold_ms=args.hold)
    before = load.repeat(hot, args.runs)
    data.history(limit, count, tag="hist")
    data.analyze()
    after = load.repeat(hot, args.runs)
    data.clear_history(limit, tag="hist")
    data.analyze()
    again = load.repeat(hot, args.runs)
    reference = (before["median"] + again["median"]) / 2
    return [
        Row(
            f"15. Hot limit, {procs} processes, over a history of {count:,} freed slots + {count:,} finished "
            "entries (cycles/s, median of runs; CPU per cycle)",
            f"{_spread(after)}; CPU {_cpu(after)}",
            f"without it, before and after: {_spread(before)}, {_spread(again)}; CPU {_cpu(before)}",
            f"{after['median'] / reference:.2f}",
            "—",
            "—",
        )
    ]


def _functions(functions: dict[str, tuple[int, float, float]]) -> str:
    return "; ".join(
        f"{name}: {calls:,} calls, {total:.2f} ms ({own:.2f} own)"
        for name, (calls, total, own) in list(functions.items())[:6]
    )


def _cpu(figures: dict[str, Any]) -> str:
    total = figures["cpu_client_ms"] + figures["cpu_server_ms"]
    return (
        f"{total:.2f} ms = {figures['cpu_client_ms']:.2f} client + {figures['cpu_server_ms']:.2f} server "
        f"({total * figures['cycles'] / figures['processes'] / 1000 / max(1, len(figures['runs'])):.2f} s "
        "a process per run)"
    )


def _spent(figures: dict[str, Any]) -> str:
    cycles = figures["cycles"] or 1
    parts = sorted(figures["spent"].items(), key=lambda kv: -kv[1][0])
    return "; ".join(
        f"{name} {1000 * secs / cycles:.1f} ms ({calls:,} calls, {1000 * secs / calls:.2f} ms each)"
        for name, (secs, calls) in parts
    )


# --- 11: run throughput through a limit, beside DBOS's queue (issue 17) ----------------------------


def runs_beside_dbos(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any] | None]:
    """Our runs twice: 2 worker processes of the solo pool (one run at a time each: the setup of
    the earlier tables), and 2 worker processes of the threads pool with 2 threads each (4 runs
    at once, as DBOS's queue runs 4 at once in its one process); DBOS at its default and fastest
    polling. Each ratio is against DBOS in the same bench run."""
    n = args.limited_runs
    setups = {"solo": ("2 Celery workers (solo pool)", 0), "threads": ("2 Celery workers × 2 threads", 2)}
    ours: dict[str, dict[str, Any]] = {}
    for name, (label, threads) in setups.items():
        log(f"scenario 11: {n} runs of the shipped sync_partner on a capacity-4 limit, {label}")
        ours[name] = runs.limited(n, workers_count=2, threads=threads)

    def ours_text(got: dict[str, Any]) -> str:
        return (
            f"{got['per_s']:,.1f} runs/s ({got['seconds']:.1f} s, of which starting them {got['enqueue_s']:.1f} s); "
            f"release → next step start p50 {got['handoff_p50']:.1f} / p95 {got['handoff_p95']:.1f} ms; "
            f"{got['waited']:,} runs waited for a slot; at most {got['max_running']} running at once; "
            f"{got['cpu_text']}"
        )

    rows = []
    fastest: dict[str, Any] | None = None
    if not dbos_queue.available():
        log("scenario 11: dbos is not installed (pip install -e '.[bench]'): no DBOS figures")
        for name, (label, _threads) in setups.items():
            rows.append(
                Row(
                    f"11. Run throughput: {n:,} runs of `sync_partner` (acquire_slot → one step → release_slot), "
                    f"capacity 4, {label}",
                    ours_text(ours[name]),
                    "DBOS not installed (the `bench` extra)",
                )
            )
    else:
        url = bench_database_url(os.environ["DATABASE_URL"]) + "_dbos"
        figures = {}
        for polling_name, polling, count in (("default", 1.0, args.dbos_default_runs), ("fastest", 0.001, n)):
            log(f"scenario 11: {count} DBOS workflows, queue concurrency 4, polling every {polling * 1000:g} ms")
            create_database(url)
            try:
                got = dbos_queue.run(url.replace("postgres://", "postgresql://", 1), count, polling)
            finally:
                drop_database(url)
            log(
                f"    {got['per_s']:.1f} workflows/s ({got['seconds']:.1f} s, enqueueing {got['enqueue_s']:.1f} s); "
                f"completion → next step start p50 {got['handoff_p50']:.0f} / p95 {got['handoff_p95']:.0f} ms; "
                f"at most {got['max_running']} running; {got['cpu_text']}"
            )
            figures[polling_name] = got
        fastest = figures["fastest"]
        for name, (label, _threads) in setups.items():
            mine = ours[name]
            for polling_name, target in (("default", 10.0), ("fastest", 1.0)):
                d = figures[polling_name]
                ratio = mine["per_s"] / d["per_s"]
                handoff_ok = polling_name == "default" or mine["handoff_p95"] < d["handoff_p95"]
                rows.append(
                    Row(
                        f"11. Run throughput: {n:,} runs of `sync_partner` (acquire_slot → one step → "
                        f"release_slot), capacity 4, {label}, vs DBOS 3.4's queue (concurrency 4, one process) "
                        f"at its {polling_name} polling ({d['polling'] * 1000:g} ms; {d['n']:,} workflows of one step)",
                        ours_text(mine),
                        f"DBOS: {d['per_s']:,.1f} workflows/s ({d['seconds']:.1f} s, of which enqueueing "
                        f"{d['enqueue_s']:.1f} s); completion → next step start p50 {d['handoff_p50']:.0f} / "
                        f"p95 {d['handoff_p95']:.0f} ms; {d['cpu_text']}",
                        f"{ratio:.2f}×",
                        f"≥ {target:g}×" + ("" if polling_name == "default" else ", hand-off p95 under DBOS's"),
                        verdict(ratio >= target and handoff_ok),
                    )
                )
    for name, (label, _threads) in setups.items():
        phases = dict(ours[name]["phases"])
        busy = phases.pop("workers busy (share of the load's time)")
        rows.append(
            Row(
                f"11. Where a run of `sync_partner` spends its time, {label} (p50 of the {n:,} runs, ms, "
                "from its rows)",
                "; ".join(f"{part} {ms:.1f}" for part, ms in phases.items()),
                f"the workers' {ours[name]['in_flight']} places for a run were taken {busy:.0%} of the load's "
                "time; the rest is between runs (the next task from Redis, loading the run)",
            )
        )
    for name, (label, _threads) in setups.items():
        checked = ours[name]["verify"]
        rows.append(
            Row(
                f"11. After the {n:,} runs ({label}): every run completed; `limits.verify.verify()` over every limit",
                f"{n:,} of {n:,} completed; verify {checked.summary()}",
                "—",
                "—",
                "verify ok",
                verdict(checked.ok),
            )
        )
    return rows, fastest
