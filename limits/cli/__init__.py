"""The operator verbs of `stackbone limits ...` and `python manage.py limits ...`, implemented once.

Each verb talks to a backend: the local installation (this project's database, read through
limits.selectors and changed through limits.services) or, with `--agent <id>`, another
installation's JSON API (limits.api). Both backends return the JSON shapes of the API
(limits.serializers), so one renderer prints both, as aligned columns or, with `--json`, as JSON.
In JSON, no key is `null`: the `key` of a slot or waiting run taken without one, and of the pool
of runs without a key (`keys`' `no_key`).

Exit codes: 0 done; 1 the target was not found (unknown limit or slot, an installation that cannot
be reached) or nothing was released; 2 bad usage or a bad value (the message names the argument
and what is allowed). Errors are one line on stderr, never a traceback.

Every user-supplied value in human-readable output (limit names, slot and run ids, labels, agent
ids, messages from another installation) goes through `printable()` (limits.printable): control
characters and bidirectional overrides are shown as escapes such as `\\x1b` and `\\u202e`, so a
label cannot drive the terminal, reverse a line or forge a table row. `--json` output needs no
such care: JSON escapes control characters itself.

Actors recorded in the audit log: `cli:<os user>` locally, `api:<username>` through the API.

The modules, lowest first:

    errors.py    exit codes, CliError and its messages
    backend.py   the Backend interface and the shapes it returns (SlotsView, KeysView, Change,
                 PoolChange, PauseChange)
    local.py     this installation (selectors, services, serializers; Django imported lazily)
    remote.py    another installation: the agents file and an HTTP client for its API
    parser.py    the arguments of the verbs (argparse)
    render.py    streams, tables and JSON
    verbs.py     one function per verb, and the dispatch (run, execute, main)

Settings of a module are read where they live: patch `limits.cli.remote.API_PAGE_SIZE`, not a
copy here (which is why it is not re-exported).
"""

from __future__ import annotations

from limits.cli.backend import Backend, Change, KeysView, PauseChange, PoolChange, SlotsView
from limits.cli.errors import (
    ALREADY_FREE,
    BAD_CUT,
    BAD_KIND,
    EMPTY_AGENT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    NO_TERMINAL,
    NOT_CONFIRMED,
    UNKNOWN_LIMIT,
    UNKNOWN_SLOT,
    VERIFY_LOCAL_ONLY,
    CliError,
)
from limits.cli.local import LocalBackend, database_error_message, local_actor
from limits.cli.parser import (
    VERBS,
    add_verbs,
    build_parser,
    capacity_value,
    key_option,
    kind_option,
    max_hold_value,
    per_key_value,
)
from limits.cli.remote import AGENT_TIMEOUT_SECONDS, AGENTS_FILE_ENV, Agent, AgentBackend, agents_file, load_agent
from limits.cli.render import Streams, render_keys, render_limits, render_slots, table
from limits.cli.verbs import HANDLERS, LIVE_STATES, execute, main, run

__all__ = [
    "AGENTS_FILE_ENV",
    "AGENT_TIMEOUT_SECONDS",
    "ALREADY_FREE",
    "BAD_CUT",
    "BAD_KIND",
    "EMPTY_AGENT",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "HANDLERS",
    "LIVE_STATES",
    "NOT_CONFIRMED",
    "NO_TERMINAL",
    "UNKNOWN_LIMIT",
    "UNKNOWN_SLOT",
    "VERBS",
    "VERIFY_LOCAL_ONLY",
    "Agent",
    "AgentBackend",
    "Backend",
    "Change",
    "KeysView",
    "CliError",
    "LocalBackend",
    "PauseChange",
    "PoolChange",
    "SlotsView",
    "Streams",
    "add_verbs",
    "agents_file",
    "build_parser",
    "capacity_value",
    "database_error_message",
    "key_option",
    "kind_option",
    "execute",
    "load_agent",
    "local_actor",
    "main",
    "max_hold_value",
    "per_key_value",
    "render_keys",
    "render_limits",
    "render_slots",
    "run",
    "table",
]
