"""One function per verb, each talking to a Backend, and the dispatch that picks the backend
(this installation, or `--agent <id>`) and turns a failure into one line and an exit code."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from limits.cli.backend import Backend
from limits.cli.errors import (
    ALREADY_FREE,
    EMPTY_AGENT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    FORGET_NO_TERMINAL,
    FORGET_NOT_CONFIRMED,
    NO_TERMINAL,
    NOT_CONFIRMED,
    VERIFY_LOCAL_ONLY,
    CliError,
)
from limits.cli.local import LocalBackend, database_error_message, local_actor
from limits.cli.parser import (
    base_value,
    build_parser,
    burst_value,
    capacity_value,
    key_option,
    kind_option,
    max_hold_value,
    max_waiting_value,
    on_full_value,
    per_key_value,
    search_option,
    share_value,
)
from limits.cli.remote import AgentBackend, load_agent
from limits.cli.render import (
    Streams,
    box_text,
    in_use,
    is_terminal,
    render_box,
    render_keys,
    render_limit,
    render_limits,
    render_slots,
    write,
)
from limits.durations import format_duration
from limits.printable import printable

LIVE_STATES = ("busy", "reserved")
# The `reason` of `release --json`'s {"released": false}: no such slot, or it was free already
# (released, taken back past its max hold, its reservation lapsed, its run ended: `state` says).
UNKNOWN = "unknown"
FREE = "already free"


def list_limits(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    kind = kind_option(getattr(options, "kind", None))
    limits = backend.limits(kind)
    if options.json:
        io.json(limits)
    else:
        render_limits(io, limits, kind)
    return EXIT_OK


def slots(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    key = key_option(getattr(options, "key", None))
    view = backend.slots(options.limit, options.cut, key)
    if options.json:
        io.json(view.as_json())
    else:
        render_slots(io, view)
    return EXIT_OK


def keys(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    view = backend.keys(options.limit, options.cut, key_option(options.key), search_option(options.search))
    if options.json:
        io.json(view.as_json())
    else:
        render_keys(io, view)
    return EXIT_OK


def release(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    slot_id = options.slot_id
    if not options.yes:
        if not is_terminal(io.stdin):
            raise CliError(NO_TERMINAL.format(slot_id=slot_id) + " (pass --yes)", EXIT_USAGE)
        slot = backend.slot(slot_id)
        if slot["state"] in LIVE_STATES:
            label = f", label {slot['label']}" if slot["label"] else ""
            question = f"Release {slot_id} of {slot['limit']} ({slot['state']}, run {slot['run']}{label})?"
            write(io.stderr, printable(question) + " [y/N] ")
            if io.stdin.readline().strip().lower() not in ("y", "yes"):
                raise CliError(NOT_CONFIRMED, EXIT_NOT_FOUND)
    try:
        released, slot = backend.release(slot_id)
    except CliError as error:
        if options.json and error.code == EXIT_NOT_FOUND:
            io.json({"released": False, "reason": UNKNOWN})
        raise
    if options.json:
        io.json({"released": True} if released else {"released": False, "reason": FREE, "state": slot["state"]})
    if not released:
        raise CliError(ALREADY_FREE.format(slot_id=slot_id, state=slot["state"]), EXIT_NOT_FOUND, field="slot_id")
    if not options.json:
        io.out(printable(f"released {slot_id} of {slot['limit']} (was {slot['state']}, run {slot['run']})"))
    return EXIT_OK


def capacity(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    value = capacity_value(options.value)
    change = backend.set_capacity(options.limit, value)
    if options.json:
        io.json(change.limit)
    else:
        new = str(change.limit["capacity"]) + (" (declared)" if value is None else "")
        io.out(printable(f"{change.limit['name']} capacity: {change.old} → {new}"))
    return EXIT_OK


def max_hold(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    value = max_hold_value(options.value)
    change = backend.set_max_hold(options.limit, value)
    if options.json:
        io.json(change.limit)
    else:
        new = format_duration(change.limit["max_hold_ms"]) + (" (declared)" if value is None else "")
        io.out(printable(f"{change.limit['name']} max hold: {format_duration(change.old)} → {new}"))
    return EXIT_OK


def per_key(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """Without --key: the limit's per_key (reset: the declared one). With --key: that key's pool
    size (reset: the limit's per_key again). Prints old → new; 'none' is no pool size (only the
    total applies)."""
    value = per_key_value(options.value)
    key = key_option(options.key)
    change = backend.set_per_key(options.limit, value, key)
    name = change.limit["name"]
    if key is None or change.key is None:
        if options.json:
            io.json(change.limit)
        else:
            new = _size(change.limit["per_key"]) + (" (declared)" if value is None else "")
            io.out(printable(f"{name} per key: {_size(change.old)} → {new}"))
    elif options.json:
        io.json({**change.key, "limit": name})
    else:
        new = _size(change.key["pool"]) + (" (the limit's per key)" if value is None else "")
        io.out(printable(f"{name} key {key} pool: {_size(change.old)} → {new}"))
    return EXIT_OK


def pause(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """SPEC 5.6: the limit grants nothing until resumed. No confirmation, like capacity: it
    takes no slot back, and `resume` undoes it at once. A paused limit stays paused (exit 0)."""
    return _set_paused(backend, options, io, paused=True)


def resume(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """The limit's free slots go to the queue at once. A running limit stays running (exit 0)."""
    return _set_paused(backend, options, io, paused=False)


def _set_paused(backend: Backend, options: argparse.Namespace, io: Streams, *, paused: bool) -> int:
    change = backend.set_paused(options.limit, paused)
    if options.json:
        io.json(change.limit)
        return EXIT_OK
    name, new = change.limit["name"], "paused" if paused else "running"
    if not change.changed:
        io.out(printable(f"{name} was already {new}: nothing changed"))
    elif paused:
        io.out(
            printable(
                f"{name}: running → paused (grants nothing until `stackbone limits resume {name}`; "
                f"{in_use(change.limit)} in use stay, {change.limit['waiting']} waiting keep their places)"
            )
        )
    else:
        io.out(
            printable(
                f"{name}: paused → running ({in_use(change.limit)}/{change.limit['capacity']} in use, "
                f"{change.limit['waiting']} waiting)"
            )
        )
    return EXIT_OK


def share(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """SPEC 13.5: 'fifo' (first come, first served), 'fair' (fair shares between keys) or
    'reset' (the declared share). The next grant follows it; nothing held changes."""
    value = share_value(options.value)
    change = backend.set_share(options.limit, value)
    if options.json:
        io.json(change.limit)
    else:
        new = str(change.limit.get("share")) + (" (declared)" if value is None else "")
        io.out(printable(f"{change.limit['name']} share: {change.old} → {new}"))
    return EXIT_OK


def on_full(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """SPEC 14.1: 'wait' (queue, the default), 'skip' (answered at once, queued nowhere),
    'replace' (take the place of its key's runs waiting, 14.3), 'cancel_running' (a workflow's own
    bound only, 14.4: a new run cancels its key's oldest running run; on a named limit refused with
    the engine's message naming on_full) or 'reset' (the declared value). The next acquisition
    follows it; the runs waiting keep their places."""
    value = on_full_value(options.value)
    change = backend.set_on_full(options.limit, value)
    if options.json:
        io.json(change.limit)
    else:
        new = str(change.limit.get("on_full")) + (" (declared)" if value is None else "")
        io.out(printable(f"{change.limit['name']} on full: {change.old} → {new}"))
    return EXIT_OK


def max_waiting(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """SPEC 14.5: the queue's cap (1 to 1,000,000), with --per-key each key's part of it, or
    'reset' (the declared one). Prints old → new; 'none' is no cap. Lowering it takes no waiting
    run out of the queue."""
    value = max_waiting_value(options.value)
    change = backend.set_max_waiting(options.limit, value, per_key=options.per_key)
    if options.json:
        io.json(change.limit)
        return EXIT_OK
    field, what = ("max_waiting_per_key", "max waiting per key") if options.per_key else ("max_waiting", "max waiting")
    new = _size(change.limit.get(field)) + (" (declared)" if value is None else "")
    io.out(printable(f"{change.limit['name']} {what}: {_size(change.old)} → {new}"))
    return EXIT_OK


def show(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """One limit: its figures, each value in force (with the declared one an operator overrode)
    and the acquisitions it answered at once instead of queueing (SPEC 14.6)."""
    limit = backend.limit(options.limit)
    if options.json:
        io.json(limit)
    else:
        render_limit(io, limit)
    return EXIT_OK


def weight(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """A key's weight (1-100) on a fair limit, or 'reset' (1)."""
    return _set_key_field(backend, options, io, "weight")


def minimum(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """A key's min (0 to the limit's capacity) on a fair limit, or 'reset' (0)."""
    return _set_key_field(backend, options, io, "min")


def _set_key_field(backend: Backend, options: argparse.Namespace, io: Streams, field: str) -> int:
    value = per_key_value(options.value)
    key = key_option(options.key)
    assert key is not None  # --key is required
    change = backend.set_key_field(options.limit, field, value, key)
    name = change.limit["name"]
    if options.json:
        io.json({**change.key, "limit": name})
        return EXIT_OK
    new = str(change.key[field]) + (" (default)" if value is None else "")
    note = "" if change.limit.get("share") == "fair" else f" (applies while {name} is fair)"
    io.out(printable(f"{name} key {key} {field}: {change.old} → {new}{note}"))
    return EXIT_OK


def box(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """SPEC 12.5: without options, show the box's run concurrency; `--base N|reset` and
    `--burst F|reset` (either or both, in one audited change) override or reset them. A bad value
    is one line naming the field (exit 2) and changes nothing."""
    changes: dict[str, object] = {}
    if options.base is not None:
        changes["base"] = base_value(options.base)
    if options.burst is not None:
        changes["burst"] = burst_value(options.burst)
    if not changes:
        limit = backend.box()
        if options.json:
            io.json(limit)
        else:
            render_box(io, limit)
        return EXIT_OK
    change = backend.set_box(changes)
    if options.json:
        io.json(change.limit)
        return EXIT_OK
    new = box_text(change.limit)
    resets = [field for field, value in changes.items() if value is None]
    note = f" ({' and '.join(resets)} reset to the declared value)" if resets else ""
    io.out(printable(f"box: {box_text(change.old)} → {new}{note}"))
    return EXIT_OK


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def _size(value: object) -> str:
    return "none" if value is None else str(value)


def verify(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """Exit 0 with a one-line summary, or list the violations (one a line) and exit 1."""
    if not isinstance(backend, LocalBackend):
        raise CliError(VERIFY_LOCAL_ONLY, EXIT_USAGE)
    result = backend.verify(options.limits or None)
    if options.json:
        io.json({"ok": result.ok, "summary": result.summary(), "violations": result.violations})
    else:
        for violation in result.violations:
            io.out(printable(violation))
        io.out(result.summary())
    if not result.ok:
        raise CliError(f"{len(result.violations)} violation(s) found", EXIT_NOT_FOUND)
    return EXIT_OK


def forget(backend: Backend, options: argparse.Namespace, io: Streams) -> int:
    """Remove a limit that left the config, idle, with its history (limits.forget), here or
    through `--agent` (the API's forget). Without --yes it asks on a terminal."""
    name = options.limit
    if not options.yes:
        if not is_terminal(io.stdin):
            raise CliError(FORGET_NO_TERMINAL.format(name=name) + " (pass --yes)", EXIT_USAGE)
        write(
            io.stderr, printable(f"Forget {name} and remove its history (slots, queue, audit, insights)?") + " [y/N] "
        )
        if io.stdin.readline().strip().lower() not in ("y", "yes"):
            raise CliError(FORGET_NOT_CONFIRMED, EXIT_NOT_FOUND)
    record = backend.forget(name)
    if options.json:
        io.json(record)
    else:
        removed = record["removed"]
        insights = removed["minutes"] + removed["key_spans"] + removed["totals"]
        counts = [
            _count(removed["slots"], "slot", "slots"),
            _count(removed["queue_entries"], "queue entry", "queue entries"),
            _count(removed["keys"], "key", "keys"),
            _count(removed["audit_events"], "audit row", "audit rows"),
        ]
        io.out(
            printable(
                f"forgot {record['limit']}: removed {', '.join(counts)} and "
                f"{_count(insights, 'insights row', 'insights rows')} (recorded as forgotten by {record['actor']})"
            )
        )
    return EXIT_OK


HANDLERS: dict[str, Callable[[Backend, argparse.Namespace, Streams], int]] = {
    "list": list_limits,
    "slots": slots,
    "keys": keys,
    "release": release,
    "capacity": capacity,
    "max-hold": max_hold,
    "per-key": per_key,
    "pause": pause,
    "resume": resume,
    "share": share,
    "on-full": on_full,
    "max-waiting": max_waiting,
    "show": show,
    "weight": weight,
    "min": minimum,
    "box": box,
    "verify": verify,
    "forget": forget,
}


def run(
    options: argparse.Namespace,
    *,
    streams: Streams | None = None,
    setup: Callable[[], None] | None = None,
    actor: str | None = None,
) -> int:
    """Run one verb and return its exit code; errors are written to stderr as one line.

    `setup` prepares Django before a local verb (the `stackbone` script passes one; manage.py
    and tests have Django ready). `actor` defaults to `cli:<os user>`.
    """
    io = streams or Streams()
    try:
        return execute(options, io=io, setup=setup, actor=actor)
    except CliError as error:
        if getattr(options, "json", False):  # one line of JSON, like the API's errors
            io.err(json.dumps({"error": error.message, "field": error.field}))
        else:
            io.err(f"error: {printable(error.message)}")
        return error.code


def execute(
    options: argparse.Namespace,
    *,
    io: Streams,
    setup: Callable[[], None] | None = None,
    actor: str | None = None,
) -> int:
    """Run one verb; raise CliError for a failure (the management command turns it into a
    CommandError with the same exit code)."""
    handler = HANDLERS[options.verb]
    if options.agent is not None and not options.agent.strip():
        raise CliError(EMPTY_AGENT, EXIT_USAGE, field="agent")  # an unset $TARGET must not mean "this installation"
    if options.agent:
        return handler(AgentBackend(load_agent(options.agent)), options, io)
    if setup is not None:
        setup()
    from django.db import DatabaseError, InterfaceError

    from limits.services import LimitsError

    try:
        return handler(LocalBackend(actor or local_actor()), options, io)
    except LimitsError as error:
        code = EXIT_NOT_FOUND if error.field == "limit" else EXIT_USAGE
        raise CliError(error.message, code, field=error.field) from None
    except (DatabaseError, InterfaceError) as error:
        raise CliError(database_error_message(error), EXIT_NOT_FOUND) from None


def main(argv: list[str] | None = None, *, streams: Streams | None = None) -> int:
    """`stackbone limits` without the outer script, for a Django that is already set up
    (tests, a shell)."""
    io = streams or Streams()
    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return run(options, streams=io)
