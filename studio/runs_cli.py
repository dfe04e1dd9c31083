"""`stackbone runs start|list|show|cancel`: start and watch workflow runs from a terminal.

    stackbone runs start <workflow> [--input JSON] [--key K] [--json]
    stackbone runs list [--status S] [--workflow W] [--key K] [--waiting-for L] [--rows N] [--json]
    stackbone runs show <run id> [--json]
    stackbone runs cancel <run id> [--json]

Exit codes, as `stackbone limits`: 0 done; 1 not found (an unknown run) or nothing cancelled (the
run had already finished); 2 bad usage or a bad value (an unknown workflow, input that is not a
JSON object, a bad key or status). An error is one line on stderr, never a traceback; with
`--json` it is JSON on stderr: `{"error": ..., "field": ...}`. A refused start creates nothing.

This installation only: `--agent` answers a one-line error (the API has no runs endpoints yet).
Reads and writes go through studio.run_list, like the Runs screen; starting is the public
studio.workflows.start_run and cancelling the run page's cancel_run.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from limits.cli.errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from limits.cli.render import Streams, table
from limits.printable import printable

VERBS = ("start", "list", "show", "cancel")
DEFAULT_LIST_SIZE = 20
MAX_LIST_SIZE = 1000
AGENT_NOT_SUPPORTED = "runs: --agent is not supported yet; run `stackbone runs` on that installation"
BAD_LIST_SIZE = "--rows must be a whole number from 1 to {max}, not {value!r}"
NOT_CANCELLED = "{run_id} had already finished ({status}): nothing cancelled"
# The `reason` of `cancel --json`'s {"cancelled": false}: no such run, or it had finished already.
UNKNOWN = "unknown"
FINISHED = "already finished"


class RunsCliError(CliError):
    """A CliError that names the argument it is about (for `--json`'s `field`)."""

    def __init__(self, message: str, code: int = EXIT_USAGE, field: str | None = None) -> None:
        super().__init__(message, code)
        self.field = field


def add_verbs(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON (errors too, on stderr)")
    common.add_argument("--agent", metavar="ID", help="not supported for runs yet (runs on this installation only)")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    kwargs: dict[str, Any] = {"parents": [common]}
    start = verbs.add_parser("start", help="start a run of a workflow; prints its id (only the id on stdout)", **kwargs)
    start.add_argument("workflow", help="the workflow's registered name (`stackbone runs start ''` lists them)")
    start.add_argument("--input", metavar="JSON", default="", help="the run's input: a JSON object (default {})")
    start.add_argument(
        "--key",
        metavar="K",
        help="the run's concurrency key: which per-key pool of the workflow's bounds it takes "
        "(1 to 128 characters, no control characters; only for a workflow that caps its runs)",
    )
    listing = verbs.add_parser("list", help="runs, newest first", **kwargs)
    listing.add_argument("--status", metavar="S", help="only runs in this status (queued, pending, running, ...)")
    listing.add_argument("--workflow", metavar="W", help="only runs of this workflow")
    listing.add_argument(
        "--key",
        metavar="K",
        help="only runs of this key (exact): their concurrency key, or the key of a slot they hold or a queue "
        "they wait in",
    )
    # --waiting-for L names the limit a run waits for; --limit L, its older name, still works (in
    # `limits slots/keys` --limit N counts rows, whose unambiguous name is --rows, as here).
    listing.add_argument(
        "--waiting-for",
        "--limit",
        dest="waiting_for",
        metavar="L",
        help="only runs waiting in limit L's queue (--limit L: the same, its older name)",
    )
    listing.add_argument(
        "--rows",
        dest="size",
        metavar="N",
        default=str(DEFAULT_LIST_SIZE),
        help=f"show at most N runs (default {DEFAULT_LIST_SIZE}, at most {MAX_LIST_SIZE})",
    )
    show = verbs.add_parser("show", help="one run: status, input, output, waits, slots and steps", **kwargs)
    show.add_argument("run_id", help="the run's id (run_...)")
    cancel = verbs.add_parser(
        "cancel", help="cancel a run: it leaves every queue and frees what ends with it", **kwargs
    )
    cancel.add_argument("run_id", help="the run's id (run_...)")


def run(options: argparse.Namespace, *, streams: Streams | None = None, setup: Callable[[], None] | None = None) -> int:
    """Run one verb and return its exit code; an error is one line on stderr (JSON with --json)."""
    io = streams or Streams()
    try:
        if options.agent is not None:
            raise RunsCliError(AGENT_NOT_SUPPORTED, EXIT_USAGE, "agent")
        if setup is not None:
            setup()
        return _execute(options, io)
    except CliError as error:
        if options.json:
            io.err(json.dumps({"error": error.message, "field": getattr(error, "field", None)}))
        else:
            io.err(f"error: {printable(error.message)}")
        return error.code


def _execute(options: argparse.Namespace, io: Streams) -> int:
    from django.db import DatabaseError, InterfaceError

    from limits.cli.local import database_error_message
    from studio.run_list import RunsError

    try:
        return HANDLERS[options.verb](options, io)
    except RunsError as error:
        code = EXIT_NOT_FOUND if error.field == "run" else EXIT_USAGE
        raise RunsCliError(error.message, code, error.field) from None
    except (DatabaseError, InterfaceError) as error:
        raise RunsCliError(database_error_message(error), EXIT_NOT_FOUND) from None


def start(options: argparse.Namespace, io: Streams) -> int:
    from studio import run_list

    values = run_list.parse_input(options.input)
    run = run_list.start(options.workflow, values, options.key)
    if options.json:
        io.json(run_list.run_summary(run_list.run_row(run)))
    else:
        # Only the id on stdout, so `R=$(stackbone runs start ...)` holds it; the rest to stderr.
        key = f", key {run.concurrency_key}" if run.concurrency_key else ""
        io.out(run.id)
        io.err(printable(f"started {run.id} ({run.workflow}{key}): {run.status}"))
    return EXIT_OK


def list_runs(options: argparse.Namespace, io: Streams) -> int:
    from studio import run_list
    from studio.plumbing import clock

    size = _list_size(options.size)
    run_filter = run_list.RunFilter(
        status=options.status or "",
        workflow=options.workflow or "",
        waiting_for=options.waiting_for or "",
        key=options.key or "",
    )
    page = run_list.runs_page(run_filter, size=size)
    if options.json:
        io.json({"runs": [run_list.run_summary(row) for row in page.rows], "more": page.older is not None})
        return EXIT_OK
    if not page.rows:
        io.out("no runs" + (" match" if run_filter.active else " yet"))
        return EXIT_OK
    now = clock.now()
    rows = [
        [
            row.run.id,
            row.run.workflow,
            row.run.status,
            ", ".join(row.keys) or "-",
            _ago(row.run.created_at, now),
            _ago(row.run.started_at, now),
            _duration(row),
            _limits_of(row),
        ]
        for row in page.rows
    ]
    for line in table(["RUN", "WORKFLOW", "STATUS", "KEY", "CREATED", "STARTED", "DURATION", "LIMITS"], rows):
        io.out(line)
    if page.older is not None:
        io.out(f"… more runs: raise --rows (at most {MAX_LIST_SIZE}) or filter")
    return EXIT_OK


def show(options: argparse.Namespace, io: Streams) -> int:
    from studio import run_list
    from studio.plumbing import clock

    run = run_list.get_run(options.run_id)
    if run is None:
        raise run_list.RunsError(run_list.UNKNOWN_RUN.format(run_id=options.run_id), "run")
    details = run_list.run_details(run_list.run_row(run))
    if options.json:
        io.json(details)
        return EXIT_OK
    now = clock.now()
    suspended = " (suspended)" if run.suspended and run.status == "running" else ""
    io.out(printable(f"{run.id}  {run.workflow}  {run.status}{suspended}"))
    facts = [
        ("key", run.concurrency_key or "-"),
        ("created", _ago(run.created_at, now)),
        ("started", _ago(run.started_at, now)),
        ("finished", _ago(run.finished_at, now)),
        ("input", json.dumps(run.input, ensure_ascii=False, sort_keys=True)),
        ("output", "-" if run.output is None else json.dumps(run.output, ensure_ascii=False, sort_keys=True)),
    ]
    if run.error:
        facts.append(("error", run.error.strip().splitlines()[-1]))
    for wait in details["waits"]:
        why = f": {wait['reason']['text']}" if wait["reason"] else ""
        facts.append(("waits for", f"{wait['limit']}" + (f" (label {wait['label']})" if wait["label"] else "") + why))
    for slot in details["slots"]:
        facts.append(("holds", f"{slot['limit']} {slot['id']} ({slot['state']})"))
    for name, value in facts:
        io.out(printable(f"  {name + ':':<11}{value}"))
    if details["steps"]:
        io.out("")
        rows = [[str(step["seq"]), step["name"], step["kind"], step["status"]] for step in details["steps"]]
        for line in table(["#", "STEP", "KIND", "STATUS"], rows):
            io.out(line)
    return EXIT_OK


def cancel(options: argparse.Namespace, io: Streams) -> int:
    from studio import run_list

    try:
        cancelled, run = run_list.cancel(options.run_id)
    except run_list.RunsError:
        if options.json:
            io.json({"cancelled": False, "reason": UNKNOWN})
        raise
    if options.json:
        answer: dict[str, Any] = {"cancelled": cancelled, "id": run.id, "status": run.status}
        if not cancelled:
            answer["reason"] = FINISHED
        io.json(answer)
    if not cancelled:
        raise RunsCliError(NOT_CANCELLED.format(run_id=run.id, status=run.status), EXIT_NOT_FOUND, "run")
    if not options.json:
        io.out(printable(f"cancelled {run.id} ({run.workflow}): it left every queue and freed what ends with it"))
    return EXIT_OK


HANDLERS: dict[str, Callable[[argparse.Namespace, Streams], int]] = {
    "start": start,
    "list": list_runs,
    "show": show,
    "cancel": cancel,
}


def _list_size(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text) or not 1 <= int(text) <= MAX_LIST_SIZE:
        raise RunsCliError(BAD_LIST_SIZE.format(max=MAX_LIST_SIZE, value=text), EXIT_USAGE, "rows")
    return int(text)


def _duration(row: Any) -> str:
    """How long it ran: '1m 15s', or '12s so far' while it runs; '-' before it started."""
    from limits.durations import format_duration

    if row.duration_ms is None:
        return "-"
    return format_duration(row.duration_ms) + ("" if row.run.is_finished else " so far")


def _limits_of(row: Any) -> str:
    waits = [f"waits {entry.limit.name}" for entry in row.waits]
    holds = [f"holds {slot.limit.name}" for slot in row.holds]
    return ", ".join(waits + holds) or "-"


def _ago(moment: datetime | None, now: datetime) -> str:
    from limits.durations import format_duration

    if moment is None:
        return "-"
    ms = int((now - moment).total_seconds() * 1000)
    return "just now" if ms < 1000 else f"{format_duration(ms)} ago"


def build_parser(prog: str = "stackbone runs") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Start and watch workflow runs.")
    add_verbs(parser)
    return parser


def main(argv: list[str] | None = None, *, streams: Streams | None = None) -> int:
    """`stackbone runs` without the outer script, for a Django that is already set up (tests)."""
    try:
        options = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return run(options, streams=streams)
