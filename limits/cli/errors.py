"""Exit codes, the one error type of the CLI, and its messages (tests assert on them)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2

NO_TERMINAL = "release: refusing to release {slot_id} without --yes: there is no terminal to confirm on"
NOT_CONFIRMED = "release: not confirmed; nothing released"
ALREADY_FREE = "{slot_id} was already free ({state}): nothing released"
UNKNOWN_SLOT = "unknown slot {slot_id!r}"
UNKNOWN_LIMIT = "unknown limit {name!r}"
BAD_CUT = "--rows (or --limit) must be a whole number of at least 1, not {value!r}"
VERIFY_LOCAL_ONLY = "verify reads the history rows of an installation: run it there (manage.py limits verify)"
FORGET_NO_TERMINAL = "forget: refusing to forget {name} without --yes: there is no terminal to confirm on"
FORGET_NOT_CONFIRMED = "forget: not confirmed; nothing forgotten"
BAD_SEARCH = "--search must be text of at most 128 characters (no NUL characters)"
BAD_KIND = "--kind must be 'limit', 'workflow' or 'box', not {value!r}"
# The engine's own words (limits.engine.operator_actions.NO_BOX; a test holds them equal): this
# module imports no Django.
NO_BOX = "the box has no run concurrency: declare run_concurrency={'base': n} in the workspace config first"
EMPTY_AGENT = "--agent needs an agent id, not an empty value (leave --agent out for this installation)"


class CliError(Exception):
    """A failure the user can act on: one line on stderr and an exit code. `field` names the
    argument at fault as the API does (`limit`, `slot_id`, `capacity`, `max_hold`, `per_key`,
    `key`, ...), or None; with `--json` the line is `{"error": message, "field": field}`."""

    def __init__(self, message: str, code: int = EXIT_USAGE, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field


def one_line(text: str) -> str:
    """The first line of an error's text, for a one-line message."""
    return " ".join(text.strip().splitlines()[:1]) or text
