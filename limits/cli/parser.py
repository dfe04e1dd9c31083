"""The arguments of the operator verbs, shared by `stackbone limits` and `manage.py limits`."""

from __future__ import annotations

import argparse
import re
from typing import Any

from limits.cli.errors import BAD_CUT, BAD_KIND, BAD_SEARCH, EXIT_USAGE, CliError
from limits.cli.remote import AGENTS_FILE_ENV
from limits.config import KEY_MAX_LENGTH, check_key
from limits.durations import DURATION_HELP

VERBS = ("list", "slots", "keys", "release", "capacity", "max-hold", "per-key", "verify")
KINDS = ("limit", "workflow")  # limits.models.Limit.Kind, without importing Django
KEY_HELP = "a key: 1 to 128 characters, no control characters, case-sensitive"


def add_verbs(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    """Add the operator verbs to `parser` (the `stackbone limits` group or the management command)
    and return the subparsers, so a caller can add verbs of its own (sync, sweep, token)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument(
        "--agent",
        metavar="ID",
        help=f"act on another installation, listed in the agents file (${AGENTS_FILE_ENV}, "
        "default ~/.config/stackbone/agents.toml)",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>", required=True)
    kwargs: dict[str, Any] = {"parents": [common]}
    listing = verbs.add_parser("list", help="every limit: kind, busy/capacity, waiting, max hold, per key", **kwargs)
    listing.add_argument(
        "--kind",
        metavar="KIND",
        help="only limits of this kind: 'limit' (declared in the workspace) or 'workflow' (a workflow's own bound)",
    )
    slots = verbs.add_parser("slots", help="a limit's slots (busy first), then its queue", **kwargs)
    slots.add_argument("limit", help="the limit's name")
    slots.add_argument("--limit", dest="cut", metavar="N", type=_cut, help="show at most N slots and N waiting runs")
    slots.add_argument("--key", metavar="K", help=f"only the slots and waiting runs of this key ({KEY_HELP})")
    keys = verbs.add_parser("keys", help="a limit's keys: busy/pool and waiting per key, busiest first", **kwargs)
    keys.add_argument("limit", help="the limit's name")
    keys.add_argument("--limit", dest="cut", metavar="N", type=_cut, help="show at most N keys")
    keys.add_argument("--key", metavar="K", help="only this key (exact)")
    keys.add_argument("--search", metavar="TEXT", default="", help="only keys that contain TEXT (any case)")
    release = verbs.add_parser("release", help="release a busy or reserved slot", **kwargs)
    release.add_argument("slot_id", help="the slot's id (slot_...)")
    release.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    capacity = verbs.add_parser("capacity", help="override a limit's capacity, or reset it", **kwargs)
    capacity.add_argument("limit", help="the limit's name")
    capacity.add_argument("value", help="a whole number from 1 to 100000, or 'reset' for the declared value")
    max_hold = verbs.add_parser("max-hold", help="override a limit's max hold, or reset it", **kwargs)
    max_hold.add_argument("limit", help="the limit's name")
    max_hold.add_argument("value", help=f"{DURATION_HELP}; or 'reset' for the declared value")
    per_key = verbs.add_parser(
        "per-key", help="override a limit's per-key pool size (or one key's pool), or reset it", **kwargs
    )
    per_key.add_argument("limit", help="the limit's name")
    per_key.add_argument(
        "value",
        help="a whole number from 1 to the limit's capacity, or 'reset' (the declared per_key; with --key, "
        "the limit's per_key)",
    )
    per_key.add_argument("--key", metavar="K", help=f"change this key's pool instead of the limit's ({KEY_HELP})")
    verify = verbs.add_parser(
        "verify",
        help="prove from the history rows that no limit broke its rules (exit 1 with the violations)",
        **kwargs,
    )
    verify.add_argument("limits", nargs="*", metavar="limit", help="the limits to check (default: every limit)")
    return verbs


def build_parser(prog: str = "stackbone limits") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Operate concurrency limits.")
    add_verbs(parser)
    return parser


def _cut(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(BAD_CUT.format(value=text))
    return int(text)


def capacity_value(text: str) -> int | str | None:
    """'reset' → None; a whole number → int; anything else is passed on as it is, for the
    service to reject with a message naming the field and the allowed range."""
    text = _argument_text(text)
    if text.strip().lower() == "reset":
        return None
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,12}", text.strip()) else text


def per_key_value(text: str) -> int | str | None:
    """'reset' → None; a whole number → int; anything else is passed on for the service to reject."""
    return capacity_value(text)


def key_option(value: str | None) -> str | None:
    """The `--key` of a verb, checked here so a bad one is the same one-line error (exit 2) on
    this installation and through `--agent`."""
    if value is None:
        return None
    try:
        return check_key(value)
    except ValueError as error:
        raise CliError(str(error), EXIT_USAGE) from None


def kind_option(value: str | None) -> str | None:
    """The `--kind` of `list`, checked here (not by argparse's choices, whose error is a usage
    block) so a bad one is the same one-line error, exit 2, on this installation and through
    `--agent`."""
    if value is None:
        return None
    if value not in KINDS:
        raise CliError(BAD_KIND.format(value=value), EXIT_USAGE)
    return value


def search_option(value: str | None) -> str:
    """The `--search` of `keys`: any text a key could contain (so at most a key's length)."""
    value = value or ""
    try:
        value.encode("utf-8")  # a non-UTF-8 argument arrives with lone surrogates: no database stores them
    except UnicodeEncodeError:
        raise CliError(BAD_SEARCH, EXIT_USAGE) from None
    if len(value) > KEY_MAX_LENGTH or "\x00" in value:
        raise CliError(BAD_SEARCH, EXIT_USAGE)
    return value


def max_hold_value(text: str) -> int | str | None:
    """'reset' → None; bare digits are milliseconds, as in the config; else a duration string."""
    text = _argument_text(text)
    if text.strip().lower() == "reset":
        return None
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,15}", text.strip()) else text


def _argument_text(value: object) -> str:
    """Python 3.13.0's argparse hands a positional `[]` for `'' -- --`: treat it as empty."""
    return value if isinstance(value, str) else ""
