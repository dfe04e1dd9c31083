"""`stackbone workers [--json]`: the Celery workers alive, the runs waiting for one, and the limits
the workers bound (limits.workers; Studio's Limits list shows the same panel).

Exit codes: 0 at least one worker answered; 1 none did (the line says why: no broker, no answer
in time), or the database cannot be reached. This installation only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from limits.cli.errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from limits.cli.render import Streams, table
from limits.durations import format_duration
from limits.printable import printable

AGENT_NOT_SUPPORTED = "workers: --agent is not supported; run `stackbone workers` on that installation"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON (errors too, on stderr)")
    parser.add_argument("--agent", metavar="ID", help="not supported (this installation only)")


def run(options: argparse.Namespace, *, streams: Streams | None = None, setup: Callable[[], None] | None = None) -> int:
    io = streams or Streams()
    try:
        if options.agent is not None:
            raise CliError(AGENT_NOT_SUPPORTED, EXIT_USAGE, field="agent")
        if setup is not None:
            setup()
        return _show(options, io)
    except CliError as error:
        if options.json:
            io.err(json.dumps({"error": error.message, "field": error.field}))
        else:
            io.err(f"error: {printable(error.message)}")
        return error.code


def _show(options: argparse.Namespace, io: Streams) -> int:
    from django.db import DatabaseError, InterfaceError

    from limits import workers
    from limits.cli.local import database_error_message
    from studio.plumbing import clock

    found = workers.alive(fresh=True)
    try:
        pending = workers.pending(clock.display_now())
        bounded = workers.bounded_by_workers(found.concurrency)
    except (DatabaseError, InterfaceError) as error:
        raise CliError(database_error_message(error), EXIT_NOT_FOUND) from None
    code = EXIT_OK if found.workers else EXIT_NOT_FOUND
    if options.json:
        io.json(
            {
                "workers": [worker.as_json() for worker in found.workers],
                "concurrency": found.concurrency,
                "busy": found.busy,
                "note": found.note or None,
                "pending": {"runs": pending.runs, "oldest_seconds": pending.oldest_seconds},
                "bounded_by_workers": [
                    {"limit": limit.name, "kind": limit.kind, "capacity": limit.capacity} for limit in bounded
                ],
            }
        )
        return code
    if found.workers:
        rows = [
            [worker.name, worker.host, worker.pool, str(worker.concurrency), str(worker.busy)]
            for worker in found.workers
        ]
        for line in table(["WORKER", "HOST", "POOL", "CONCURRENCY", "BUSY"], rows):
            io.out(line)
        count = len(found.workers)
        io.out(
            f"{count} worker{'s' if count != 1 else ''}: {found.busy} of {found.concurrency} "
            f"process{'es' if found.concurrency != 1 else ''} busy"
        )
    else:
        io.out(f"no worker answered: {found.note}")
    if pending.runs:
        oldest = format_duration(pending.oldest_ms or 0) if (pending.oldest_ms or 0) >= 1000 else "under a second"
        runs = f"{pending.runs} run{'s' if pending.runs != 1 else ''}"
        io.out(f"{runs} waiting for a worker (pending), the oldest for {oldest}")
    else:
        io.out("no run waits for a worker")
    for limit in bounded[: workers.BOUNDED_SHOWN]:
        io.out(
            printable(
                f"{limit.name}: capacity {limit.capacity} is more than the workers' {found.concurrency} "
                "processes: the workers, not this limit, bound it"
            )
        )
    if len(bounded) > workers.BOUNDED_SHOWN:
        io.out("… and more limits above the workers' concurrency")
    return code


def build_parser(prog: str = "stackbone workers") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="The Celery workers alive and the runs waiting for one.")
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None, *, streams: Streams | None = None) -> int:
    """`stackbone workers` without the outer script, for a Django that is already set up (tests)."""
    try:
        options = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return run(options, streams=streams)
