"""`stackbone workers [--json] [--agent ID]` (and `python manage.py workers`): the Celery workers
alive, the runs waiting for one, and the limits the workers bound (limits.workers; Studio's Limits
list shows the same panel).

Locally it reads what each worker reported of itself (its pool, concurrency and the tasks it runs
now, at most a few seconds old: stackbone.plumbing.worker_beat); with `--agent <id>` it reads
another installation's `GET /api/limits/-/workers/` (limits.api). Both give the JSON of
limits.workers.report(), so one renderer prints both.

Exit codes: 0 at least one worker is alive; 1 none is (the line says why: eager tasks, an
in-process broker, no report lately), or the database or the agent cannot be reached; 2 a bad or
unknown agent, or a token it refuses.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from limits.cli.errors import EMPTY_AGENT, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from limits.cli.remote import AGENTS_FILE_ENV, AgentBackend, load_agent
from limits.cli.render import Streams, table
from limits.durations import format_duration
from limits.printable import printable

BOUNDED_SHOWN = 20  # limits.workers.BOUNDED_SHOWN, without importing Django for --agent


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON (errors too, on stderr)")
    parser.add_argument(
        "--agent",
        metavar="ID",
        help=f"ask another installation, listed in the agents file (${AGENTS_FILE_ENV}, "
        "default ~/.config/stackbone/agents.toml)",
    )


def run(options: argparse.Namespace, *, streams: Streams | None = None, setup: Callable[[], None] | None = None) -> int:
    io = streams or Streams()
    try:
        if options.agent is not None:
            if not options.agent.strip():  # an unset $TARGET must not mean "this installation"
                raise CliError(EMPTY_AGENT, EXIT_USAGE, field="agent")
            answer = AgentBackend(load_agent(options.agent)).workers()
        else:
            if setup is not None:
                setup()
            answer = _local()
        return _show(answer, options, io)
    except CliError as error:
        if options.json:
            io.err(json.dumps({"error": error.message, "field": error.field}))
        else:
            io.err(f"error: {printable(error.message)}")
        return error.code


def _local() -> dict[str, Any]:
    from django.db import DatabaseError, InterfaceError

    from limits import workers
    from limits.cli.local import database_error_message

    try:
        return workers.report(fresh=True)
    except (DatabaseError, InterfaceError) as error:
        raise CliError(database_error_message(error), EXIT_NOT_FOUND) from None


def _show(answer: dict[str, Any], options: argparse.Namespace, io: Streams) -> int:
    """Print the report (as JSON with --json); exit 0 when a worker answered. Every value may
    come from another installation, so each goes through printable()."""
    found = answer["workers"]
    code = EXIT_OK if found else EXIT_NOT_FOUND
    if options.json:
        io.json(answer)
        return code
    if found:
        rows = [[str(worker[name]) for name in ("name", "host", "pool", "concurrency", "busy")] for worker in found]
        for line in table(["WORKER", "HOST", "POOL", "CONCURRENCY", "BUSY"], rows):
            io.out(line)
        count, concurrency = len(found), answer["concurrency"]
        io.out(
            printable(
                f"{count} worker{'s' if count != 1 else ''}: {answer['busy']} of {concurrency} "
                f"process{'es' if concurrency != 1 else ''} busy"
            )
        )
    else:
        io.out(printable(f"no worker answered: {answer['note']}"))
    pending = answer["pending"]
    if pending["runs"]:
        oldest_ms = int((pending["oldest_seconds"] or 0) * 1000)
        oldest = format_duration(oldest_ms) if oldest_ms >= 1000 else "under a second"
        runs = f"{pending['runs']} run{'s' if pending['runs'] != 1 else ''}"
        io.out(printable(f"{runs} waiting for a worker, the oldest for {oldest}"))
    else:
        io.out("no run waits for a worker")
    bounded = answer["bounded_by_workers"]
    for limit in bounded[:BOUNDED_SHOWN]:
        io.out(
            printable(
                f"{limit['limit']}: capacity {limit['capacity']} is more than the workers' {answer['concurrency']} "
                "processes: the workers, not this limit, bound it"
            )
        )
    if len(bounded) > BOUNDED_SHOWN:
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
