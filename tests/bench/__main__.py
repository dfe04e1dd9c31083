"""python -m tests.bench [--quick] [--processes 32] [--only 1,2,...] [--fair-parts turns] [--chart PATH] [--keep-db]

Runs the benchmark scenarios against PostgreSQL + Redis (DATABASE_URL, CELERY_BROKER_URL) in a
database of its own (<name>_bench, created, migrated and dropped), and prints one markdown table
with the machine at the top. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from tests.bench.common import (
    REFUSE_BROKER,
    REFUSE_DATABASE,
    bench_database_url,
    configure_environment,
    create_database,
    drop_database,
    log,
    machine,
)

FAIR_PARTS = ("flood", "hot", "keys", "turns")  # scenario 14's parts, in the order they run


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[2])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run: 1 run of 3 s, 50 hand-offs, 1/10 of the rows, 200 workflow runs, 200 runs beside DBOS",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=8,
        help="processes per limit in scenarios 1 and 5, in all in 7 and 8 (default 8; try 32)",
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="seconds per timed run in scenarios 1, 5, 7, 8 (default 8, quick 3)"
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="timed runs per figure in scenarios 1, 5, 7, 8 (default 3, quick 1)"
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="ms each cycle of scenarios 1, 5, 7, 8 (and their references) holds its slots (default 0)",
    )
    parser.add_argument(
        "--handoffs", type=int, default=None, help="hand-offs measured in scenario 2 (default 200, quick 50)"
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="fraction of the row counts of scenarios 3 and 4 (default 1, quick 0.1)",
    )
    parser.add_argument(
        "--workflow-runs",
        type=int,
        default=None,
        help="runs of each workflow in scenarios 9 and 13 (default 1000, quick 200)",
    )
    parser.add_argument(
        "--limited-runs",
        type=int,
        default=None,
        help="scenario 11: runs of sync_partner, and DBOS workflows at its fastest polling (default 2000, quick 200)",
    )
    parser.add_argument(
        "--dbos-default-runs",
        type=int,
        default=None,
        help="scenario 11: DBOS workflows at its default 1 s polling (~4 a second; default 100, quick 20)",
    )
    parser.add_argument(
        "--sweep",
        default="1,2,4,8,16,32",
        help="scenario 10: process counts (default 1,2,4,8,16,32; median of --runs at 8 and 32, one run elsewhere)",
    )
    parser.add_argument(
        "--chart", default="", help="scenario 10: write the chart of cycles/s by processes here (.svg or .png)"
    )
    parser.add_argument(
        "--only",
        default="1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
        help="comma-separated scenario numbers (default all; 7 and 8 also run scenario 1's load, their reference)",
    )
    parser.add_argument(
        "--fair-keys",
        type=int,
        default=None,
        help="scenario 14: keys waiting in the key-choice measure (default 10000, quick 1000; 0 skips it)",
    )
    parser.add_argument(
        "--fair-parts",
        default=",".join(FAIR_PARTS),
        help="scenario 14: which of its parts run: flood (the issue's simulation), hot (the keyed hot loop), "
        "keys (the key choice at scale), turns (six tenants on 4 slots take turns); default all. Scenario 1, "
        "the reference of flood and hot, runs only with one of them",
    )
    parser.add_argument(
        "--whole-wake",
        action="store_true",
        help="in scenario 3, no 150 s cap on the wake after the sweep's commit",
    )
    parser.add_argument(
        "--keep-db", action="store_true", help="keep the bench database afterwards (to EXPLAIN by hand)"
    )
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (3.0 if args.quick else 8.0)
    args.runs = args.runs or (1 if args.quick else 3)
    args.handoffs = args.handoffs or (50 if args.quick else 200)
    args.scale = args.scale or (0.1 if args.quick else 1.0)
    args.workflow_runs = args.workflow_runs or (200 if args.quick else 1000)
    args.limited_runs = args.limited_runs or (200 if args.quick else 2000)
    args.dbos_default_runs = args.dbos_default_runs or (20 if args.quick else 100)
    if args.fair_keys is None:
        args.fair_keys = 1_000 if args.quick else 10_000
    args.sweep = [int(n) for n in args.sweep.split(",") if n.strip()]
    args.only = {int(n) for n in args.only.split(",") if n.strip()}
    args.fair_parts = {p.strip() for p in args.fair_parts.split(",") if p.strip()}
    unknown = args.fair_parts - set(FAIR_PARTS)
    if unknown:
        parser.error(f"--fair-parts: unknown {', '.join(sorted(unknown))} (choose from {', '.join(FAIR_PARTS)})")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print(REFUSE_DATABASE, file=sys.stderr)
        return 2
    if not os.environ.get("CELERY_BROKER_URL", "").startswith(("redis://", "rediss://")):
        print(REFUSE_BROKER, file=sys.stderr)
        return 2
    bench_url = bench_database_url(url)
    var_dir = tempfile.mkdtemp(prefix="stackbone-bench-")
    configure_environment(bench_url, var_dir)
    started = time.monotonic()
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    log(f"creating {bench_url.rsplit('/', 1)[-1]} and migrating")
    create_database(bench_url)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        from tests.bench import report, scenarios

        rows = scenarios.run_all(args)
        box = machine(bench_url) | {"load_before": load_before}
        print(report.table(box, rows, args, time.monotonic() - started))
    finally:
        from django.db import connections

        connections.close_all()
        shutil.rmtree(var_dir, ignore_errors=True)
        if args.keep_db:
            log(f"kept {bench_url}")
        else:
            drop_database(bench_url)
    log(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
