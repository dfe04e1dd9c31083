"""`stackbone runs start|list|show|cancel` (and `python manage.py runs ...`): start and watch workflow
runs from a terminal.

    stackbone runs start <workflow> [--input JSON] [--key K] [--limits L,...] [--on-full V] [--json] [--agent ID]
    stackbone runs start <workflow> --from FILE [--limits L,...] [--on-full V] [--json] [--agent ID]
    stackbone runs list [--status S] [--workflow W] [--key K] [--waiting-for L] [--rows N] [--json] [--agent ID]
    stackbone runs show <run id> [--json] [--agent ID]
    stackbone runs cancel <run id> [--json] [--agent ID]

Exit codes, as `stackbone limits`: 0 done; 1 not found (an unknown run) or nothing cancelled (the
run had already finished); 2 bad usage or a bad value (an unknown workflow, input that is not a
JSON object, a bad key, status or --on-full). An error is one line on stderr, never a traceback;
with `--json` it is JSON on stderr: `{"error": ..., "field": ...}`. A refused start creates nothing.

`start --on-full V` is start_run's `on_full` (SPEC 14.1): what the run does if its bounds cannot
take it at once (the values a run's start accepts on the installation, which checks them: 'wait',
'skip', ...; left out: its bounds' own). A start is not refused for being skipped: the run was
created and ended at once, exit 0, its status 'skipped' and why on stderr (`--json`: `status`,
`end_reason`, `end_reason_text`, `end_limit` of each run).

`start --from FILE` (`-`: stdin) starts a batch (limits.runs.start_runs: one transaction, in the
order of the file): JSON lines, each one run as the API's batch takes it, `{"input": {...}, "key":
"K"}` (both optional; blank lines skipped). It prints the ids in that order, one a line; a bad
line refuses the whole batch, named by its line (`runs.jsonl line 3: ...`; with --json the field
as the API names it, `runs[2].input`).

Each verb gets its answer as a dict from a backend, and prints it (as JSON with --json): on this
installation from limits.runs.listing (the answers of the Runs screen's reads, the public
limits.runs.start_run and the one cancel path of Studio and the API); with `--agent <id>` from another
installation's /api/runs/ (limits.runs.api), which answers the same dicts, through the HTTP
client of `stackbone limits --agent` (limits.cli.remote). No Django is loaded for --agent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from limits.cli.errors import EMPTY_AGENT, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CliError
from limits.cli.remote import AGENTS_FILE_ENV, AgentBackend, load_agent
from limits.cli.render import Streams, table
from limits.durations import format_duration
from limits.printable import printable
from limits.runs.values import (
    BATCH_TOO_BIG,
    DEFAULT_LIST_SIZE,
    FINISHED_STATUSES,
    MAX_BATCH_SIZE,
    MAX_LIST_SIZE,
    UNKNOWN,
    RunsError,
    batch_run,
    parse_input,
)

VERBS = ("start", "list", "show", "cancel")
BAD_LIST_SIZE = "--rows must be a whole number from 1 to {max}, not {value!r}"
NOT_CANCELLED = "{run_id} had already finished ({status}): nothing cancelled"
CANCELLED = "it left every queue and freed what ends with it"
UNKNOWN_RUN = "unknown run {run_id!r}"  # limits.runs.listing.UNKNOWN_RUN, without Django for --agent
FROM_WITH_ONE_RUN = "--from takes each run's input and key from the file: leave out {option}"
CANNOT_READ = "--from {name}: cannot read it: {reason}"
NOT_UTF8 = "--from {name}: not UTF-8 text"
NO_RUNS = '--from {name} holds no runs: one JSON object a line, {{"input": {{...}}, "key": "K"}}'
TOO_MANY_RUNS = "--from {name}: " + BATCH_TOO_BIG.replace("runs must hold", "a batch holds")
BAD_LINE_JSON = "{where}: not valid JSON: {error}"


class RunsCliError(CliError):
    """A CliError that names the argument it is about (for `--json`'s `field`)."""

    def __init__(self, message: str, code: int = EXIT_USAGE, field: str | None = None) -> None:
        super().__init__(message, code)
        self.field = field


def add_verbs(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON (errors too, on stderr)")
    common.add_argument(
        "--agent",
        metavar="ID",
        help=f"run it on another installation, listed in the agents file (${AGENTS_FILE_ENV}, "
        "default ~/.config/stackbone/agents.toml), through its JSON API",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    kwargs: dict[str, Any] = {"parents": [common]}
    start = verbs.add_parser("start", help="start a run of a workflow; prints its id (only the id on stdout)", **kwargs)
    start.add_argument("workflow", help="the workflow's registered name (`stackbone runs start ''` lists them)")
    start.add_argument("--input", metavar="JSON", help="the run's input: a JSON object (default {})")
    start.add_argument(
        "--key",
        metavar="K",
        help="the run's concurrency key: which per-key pool of the workflow's bounds it takes "
        "(1 to 128 characters, no control characters; only for a run with bounds)",
    )
    start.add_argument(
        "--limits",
        metavar="L,...",
        help="the named limits this run holds for its whole run, instead of the workflow's own limits=[...] "
        "(comma-separated; '' for none, only the workflow's own bound)",
    )
    start.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="start a batch, in one transaction and in the file's order: JSON lines, each "
        '{"input": {...}, "key": "K"} (both optional); - reads stdin; prints the ids in that order '
        f"(at most {MAX_BATCH_SIZE} runs; not with --input or --key)",
    )
    start.add_argument(
        "--on-full",
        dest="on_full",
        metavar="V",
        help="what the run does if its bounds cannot take it at once, for this start (every run of a --from "
        "batch): wait, skip, ... as start_run(on_full=) accepts it; default: its bounds' own. A skipped run "
        "ends at once, status 'skipped' with its reason",
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
    listing.add_argument(
        "--search",
        metavar="TEXT",
        help="only the run with this whole id, the runs whose reference is TEXT (exact), and those holding a slot "
        "or waiting in a queue whose label contains TEXT (any case)",
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
            if not options.agent.strip():  # an unset $TARGET must not mean "this installation"
                raise RunsCliError(EMPTY_AGENT, EXIT_USAGE, "agent")
            backend: RunsBackend = AgentRuns(load_agent(options.agent))
        else:
            if setup is not None:
                setup()
            backend = LocalRuns()
        return HANDLERS[options.verb](backend, options, io)
    except CliError as error:
        if options.json:
            io.err(json.dumps({"error": error.message, "field": getattr(error, "field", None)}))
        else:
            io.err(f"error: {printable(error.message)}")
        return error.code


# --- where the answers come from ------------------------------------------------------------------


class RunsBackend(Protocol):
    def start(
        self, workflow: str, input: dict[str, Any], key: str | None, limits: list[str] | None, on_full: str | None
    ) -> Any: ...

    def start_batch(
        self, workflow: str, runs: list[dict[str, Any]], limits: list[str] | None, on_full: str | None
    ) -> Any: ...

    def list(self, filters: dict[str, str], size: int) -> Any: ...

    def show(self, run_id: str) -> Any: ...

    def cancel(self, run_id: str) -> Any: ...

    def now(self) -> datetime: ...


@contextlib.contextmanager
def _local_errors() -> Iterator[None]:
    """listing's refusals and a database that cannot be reached, as the CLI's errors."""
    from django.db import DatabaseError, InterfaceError

    from limits.cli.local import database_error_message

    try:
        yield
    except RunsError as error:
        code = EXIT_NOT_FOUND if error.field == "run" else EXIT_USAGE
        raise RunsCliError(error.message, code, error.field) from None
    except (DatabaseError, InterfaceError) as error:
        raise RunsCliError(database_error_message(error), EXIT_NOT_FOUND) from None


class LocalRuns:
    """This installation: limits.runs.listing (Django loaded by the caller's setup)."""

    def start(
        self, workflow: str, input: dict[str, Any], key: str | None, limits: list[str] | None, on_full: str | None
    ) -> Any:
        from limits.runs import listing

        with _local_errors():
            return listing.start_answer(workflow, input, key, limits, on_full)

    def start_batch(
        self, workflow: str, runs: list[dict[str, Any]], limits: list[str] | None, on_full: str | None
    ) -> Any:
        from limits.runs import api  # the API's own batch start, so both answer the same

        with _local_errors():
            return api.start_batch_answer(workflow, runs, limits, on_full)

    def list(self, filters: dict[str, str], size: int) -> Any:
        from limits.runs import listing

        with _local_errors():
            return listing.list_answer(listing.RunFilter(**filters), size=size)

    def show(self, run_id: str) -> Any:
        from limits.runs import listing

        with _local_errors():
            return listing.show_answer(run_id)

    def cancel(self, run_id: str) -> Any:
        from limits.runs import listing

        with _local_errors():
            return listing.cancel_answer(run_id)

    def now(self) -> datetime:
        from stackbone.plumbing import clock

        return clock.now()


class AgentRuns(AgentBackend):
    """Another installation: its /api/runs/ (limits.runs.api), through limits.cli.remote's client
    (its agents file, token, time-out and the errors of its answers)."""

    # on_full is sent only when given: an installation from before it refuses a field it does not know.
    def start(
        self, workflow: str, input: dict[str, Any], key: str | None, limits: list[str] | None, on_full: str | None
    ) -> Any:
        body: dict[str, object] = {"workflow": workflow, "input": input, "key": key, "limits": limits}
        return self._call("POST", "", body | _on_full(on_full), api="runs")

    def start_batch(
        self, workflow: str, runs: list[dict[str, Any]], limits: list[str] | None, on_full: str | None
    ) -> Any:
        body: dict[str, object] = {"workflow": workflow, "runs": runs, "limits": limits}
        return self._call("POST", "", body | _on_full(on_full), api="runs")

    def list(self, filters: dict[str, str], size: int) -> Any:
        query = urllib.parse.urlencode({**{name: value for name, value in filters.items() if value}, "size": size})
        return self._call("GET", f"?{query}", api="runs")

    def show(self, run_id: str) -> Any:
        return self._call("GET", f"{quote(run_id)}/", not_found=UNKNOWN_RUN.format(run_id=run_id), api="runs")

    def cancel(self, run_id: str) -> Any:
        not_found = UNKNOWN_RUN.format(run_id=run_id)
        return self._call("POST", f"{quote(run_id)}/cancel/", {}, not_found=not_found, api="runs")

    def now(self) -> datetime:
        return datetime.now(UTC)


# --- the verbs ------------------------------------------------------------------------------------


def start(backend: RunsBackend, options: argparse.Namespace, io: Streams) -> int:
    limits = None if options.limits is None else [name.strip() for name in options.limits.split(",") if name.strip()]
    if options.from_file is not None:
        return start_batch(backend, options, io, limits)
    values = _checked(parse_input, options.input)
    run = backend.start(options.workflow, values, options.key, limits, options.on_full)
    if options.json:
        io.json(run)
    else:
        # Only the id on stdout, so `R=$(stackbone runs start ...)` holds it; the rest to stderr.
        key = f", key {run['key']}" if run["key"] else ""
        io.out(printable(run["id"]))
        io.err(printable(f"started {run['id']} ({run['workflow']}{key}): {run['status']}{_why(run)}"))
    return EXIT_OK


def _on_full(on_full: str | None) -> dict[str, object]:
    return {} if on_full is None else {"on_full": on_full}


def _why(run: dict[str, Any]) -> str:
    """Why a run ended at its start (SPEC 14.6): ', never started: the limit is full (L)', or ""."""
    if not run.get("end_reason"):  # an older installation sends none
        return ""
    limit = f" ({run['end_limit']})" if run.get("end_limit") else ""
    return f", never started: {run.get('end_reason_text') or run['end_reason']}{limit}"


def start_batch(backend: RunsBackend, options: argparse.Namespace, io: Streams, limits: list[str] | None) -> int:
    """`start --from FILE`: the file's runs started as one batch; their ids in its order."""
    for option, value in (("--input", options.input), ("--key", options.key)):
        if value is not None:
            raise RunsCliError(FROM_WITH_ONE_RUN.format(option=option), EXIT_USAGE, "from")
    name = "stdin" if options.from_file == "-" else options.from_file
    runs, lines = _batch_file(_read_from(options.from_file, io), name)
    try:
        answer = backend.start_batch(options.workflow, runs, limits, options.on_full)
    except CliError as error:  # the installation's `runs[2]: ...` is the file's line 3
        raise _on_line(error, name, lines) from None
    if options.json:
        io.json(answer)
        return EXIT_OK
    started = answer["runs"]
    for run in started:  # only the ids on stdout, in the file's order
        io.out(printable(run["id"]))
    told = ("pending", "queued", "skipped")
    statuses = [f"{n} {status}" for status in told if (n := _count(started, status))]
    others = len(started) - sum(_count(started, status) for status in told)
    statuses += [f"{others} other"] if others else []
    count = f"{len(started)} run" + ("" if len(started) == 1 else "s")
    io.err(printable(f"started {count} ({options.workflow}): {', '.join(statuses)}"))
    return EXIT_OK


def _count(runs: list[dict[str, Any]], status: str) -> int:
    return sum(1 for run in runs if run["status"] == status)


def _read_from(path: str, io: Streams) -> str:
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            text: str = io.stdin.read()
            return text
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RunsCliError(NOT_UTF8.format(name=name), EXIT_USAGE, "from") from None
    except OSError as error:
        raise RunsCliError(CANNOT_READ.format(name=name, reason=error.strerror or error), EXIT_USAGE, "from") from None


def _batch_file(text: str, name: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The runs of a --from file, each as the API's batch takes it, and the line each came from.
    Checked here as the API checks them (values.batch_run: their keys' values on the
    installation), so a bad line is named before anything is sent."""
    entries = [(number, line) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    # not splitlines: a JSON string may hold U+2028, which it would split on
    if len(entries) > MAX_BATCH_SIZE:
        raise RunsCliError(
            TOO_MANY_RUNS.format(name=name, limit=MAX_BATCH_SIZE, count=len(entries)), EXIT_USAGE, "from"
        )
    runs: list[dict[str, Any]] = []
    lines: list[int] = []
    for index, (number, line) in enumerate(entries):
        where = f"{name} line {number}"
        try:
            value = json.loads(line)
        except ValueError as error:
            raise RunsCliError(BAD_LINE_JSON.format(where=where, error=error), EXIT_USAGE, f"runs[{index}]") from None
        except RecursionError:
            raise RunsCliError(f"{where}: nested too deeply", EXIT_USAGE, f"runs[{index}]") from None
        try:
            batch_run(value, index)
        except RunsError as error:
            raise _on_line(RunsCliError(error.message, EXIT_USAGE, error.field), name, [*lines, number]) from None
        runs.append(value)
        lines.append(number)
    if not runs:
        raise RunsCliError(NO_RUNS.format(name=name), EXIT_USAGE, "from")
    return runs, lines


def _on_line(error: CliError, name: str, lines: list[int]) -> CliError:
    """An error naming a run of the batch (`runs[2]: ...`) as the file's line (`FILE line 3: ...`)."""
    found = re.match(r"runs\[(\d+)\]:? ?", error.message)
    if found is None or int(found.group(1)) >= len(lines):
        return error
    message = f"{name} line {lines[int(found.group(1))]}: {error.message[found.end() :]}"
    return RunsCliError(message, error.code, getattr(error, "field", None))


def list_runs(backend: RunsBackend, options: argparse.Namespace, io: Streams) -> int:
    size = _list_size(options.size)
    filters = {
        "status": options.status or "",
        "workflow": options.workflow or "",
        "waiting_for": options.waiting_for or "",
        "key": options.key or "",
        "search": options.search or "",
    }
    answer = backend.list(filters, size)
    if options.json:
        io.json(answer)
        return EXIT_OK
    if not answer["runs"]:
        io.out("no runs" + (" match" if any(filters.values()) else " yet"))
        return EXIT_OK
    now = backend.now()
    rows = [
        [
            run["id"],
            run["workflow"],
            run["status"],
            ", ".join(run["keys"]) or "-",
            _ago(run["created_at"], now),
            _ago(run["started_at"], now),
            _duration(run),
            _limits_of(run),
        ]
        for run in answer["runs"]
    ]
    for line in table(["RUN", "WORKFLOW", "STATUS", "KEY", "CREATED", "STARTED", "DURATION", "LIMITS"], rows):
        io.out(line)
    if answer["more"]:
        io.out(f"… more runs: raise --rows (at most {MAX_LIST_SIZE}) or filter")
    return EXIT_OK


def show(backend: RunsBackend, options: argparse.Namespace, io: Streams) -> int:
    details = backend.show(options.run_id)
    if options.json:
        io.json(details)
        return EXIT_OK
    now = backend.now()
    suspended = " (suspended)" if details["suspended"] and details["status"] == "running" else ""
    io.out(printable(f"{details['id']}  {details['workflow']}  {details['status']}{suspended}"))
    output = details["output"]
    facts = [
        ("key", details["key"] or "-"),
        ("reference", details["reference"] or "-"),
        ("created", _ago(details["created_at"], now)),
        *([("starts", _in(details["starts_at"], now))] if details.get("starts_at") else []),
        ("started", _ago(details["started_at"], now)),
        ("finished", _ago(details["finished_at"], now)),
        ("input", json.dumps(details["input"], ensure_ascii=False, sort_keys=True)),
        ("output", "-" if output is None else json.dumps(output, ensure_ascii=False, sort_keys=True)),
    ]
    if details["error"]:
        facts.append(("error", details["error"].strip().splitlines()[-1]))
    if details.get("end_reason") or details.get("caused_by"):  # SPEC 14.6 (an older installation sends none)
        why = details.get("end_reason_text") or details["end_reason"]
        facts.append(("why", why + (f" ({details['end_limit']})" if details.get("end_limit") else "")))
        if details.get("caused_by"):
            facts.append(("caused by", details["caused_by"]))
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


def cancel(backend: RunsBackend, options: argparse.Namespace, io: Streams) -> int:
    try:
        answer = backend.cancel(options.run_id)
    except CliError as error:
        if options.json and error.field == "run" and error.code == EXIT_NOT_FOUND:
            io.json({"cancelled": False, "reason": UNKNOWN})
        raise
    if options.json:
        io.json(answer)
    if not answer["cancelled"]:
        message = NOT_CANCELLED.format(run_id=answer["id"], status=answer["status"])
        raise RunsCliError(message, EXIT_NOT_FOUND, "run")
    if not options.json:
        io.out(printable(f"cancelled {answer['id']} ({_workflow_of(backend, answer['id'])}): {CANCELLED}"))
    return EXIT_OK


HANDLERS: dict[str, Callable[[RunsBackend, argparse.Namespace, Streams], int]] = {
    "start": start,
    "list": list_runs,
    "show": show,
    "cancel": cancel,
}


def quote(run_id: str) -> str:
    return urllib.parse.quote(run_id, safe="")


def _workflow_of(backend: RunsBackend, run_id: str) -> str:
    workflow: str = backend.show(run_id)["workflow"]
    return workflow


def _checked[T](check: Callable[[str], T], text: str) -> T:
    try:
        return check(text)
    except RunsError as error:
        raise RunsCliError(error.message, EXIT_USAGE, error.field) from None


def _list_size(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text) or not 1 <= int(text) <= MAX_LIST_SIZE:
        raise RunsCliError(BAD_LIST_SIZE.format(max=MAX_LIST_SIZE, value=text), EXIT_USAGE, "rows")
    return int(text)


def _duration(run: dict[str, Any]) -> str:
    """How long it ran: '1m 15s', or '12s so far' while it runs; '-' before it started."""
    if run["duration_ms"] is None:
        return "-"
    return format_duration(run["duration_ms"]) + ("" if run["status"] in FINISHED_STATUSES else " so far")


def _limits_of(run: dict[str, Any]) -> str:
    waits = [f"waits {name}" for name in run["waiting_for"]]
    holds = [f"holds {name}" for name in run["holding"]]
    return ", ".join(waits + holds) or "-"


def _ago(moment: str | None, now: datetime) -> str:
    if moment is None:
        return "-"
    ms = int((now - datetime.fromisoformat(moment)).total_seconds() * 1000)
    return "just now" if ms < 1000 else f"{format_duration(ms)} ago"


def _in(moment: str, now: datetime) -> str:
    """When a deferred run starts (SPEC 15.4), as the run page says it: 'in 4m 5s', or due."""
    ms = int((datetime.fromisoformat(moment) - now).total_seconds() * 1000)
    return f"{moment} (in {format_duration(ms)})" if ms >= 1000 else f"{moment} (due: it starts within 15 s)"


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
