"""The arguments of the operator verbs, shared by `stackbone limits` and `manage.py limits`."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, NoReturn

from limits.cli.errors import BAD_CUT, BAD_KIND, BAD_SEARCH, EXIT_USAGE, CliError
from limits.cli.remote import AGENTS_FILE_ENV
from limits.config import CAPACITY_HELP, KEY_MAX_LENGTH, MAX_BURST, MIN_BURST, check_key
from limits.durations import DURATION_HELP

VERBS = (
    "list",
    "slots",
    "keys",
    "release",
    "capacity",
    "max-hold",
    "per-key",
    "pause",
    "resume",
    "share",
    "on-full",
    "max-waiting",
    "show",
    "weight",
    "min",
    "box",
    "verify",
    "forget",
)
KINDS = ("limit", "workflow", "box")  # limits.models.Limit.Kind, without importing Django
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
        help="only limits of this kind: 'limit' (declared in the workspace), 'workflow' (a workflow's own bound) "
        "or 'box' (the box's run concurrency)",
    )
    slots = verbs.add_parser("slots", help="a limit's slots (busy first), then its queue", **kwargs)
    slots.add_argument("limit", help="the limit's name")
    # --rows N is the number of rows; --limit N, its older name, still works (`runs list --limit L`
    # names a limit, so --rows is the one to write).
    slots.add_argument(
        "--rows", "--limit", dest="cut", metavar="N", type=_cut, help="show at most N slots and N waiting runs"
    )
    slots.add_argument("--key", metavar="K", help=f"only the slots and waiting runs of this key ({KEY_HELP})")
    keys = verbs.add_parser("keys", help="a limit's keys: busy/pool and waiting per key, busiest first", **kwargs)
    keys.add_argument("limit", help="the limit's name")
    keys.add_argument("--rows", "--limit", dest="cut", metavar="N", type=_cut, help="show at most N keys")
    keys.add_argument("--key", metavar="K", help="only this key (exact)")
    keys.add_argument("--search", metavar="TEXT", default="", help="only keys that contain TEXT (any case)")
    release = verbs.add_parser("release", help="release a busy or reserved slot", **kwargs)
    release.add_argument("slot_id", help="the slot's id (slot_...)")
    release.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    capacity = verbs.add_parser("capacity", help="override a limit's capacity, or reset it", **kwargs)
    _values_may_start_with_a_minus(capacity)
    capacity.add_argument("limit", help="the limit's name")
    capacity.add_argument("value", help=f"{CAPACITY_HELP}, or 'reset' for the declared value")
    max_hold = verbs.add_parser("max-hold", help="override a limit's max hold, or reset it", **kwargs)
    _values_may_start_with_a_minus(max_hold)
    max_hold.add_argument("limit", help="the limit's name")
    max_hold.add_argument("value", help=f"{DURATION_HELP}; or 'reset' for the declared value")
    per_key = verbs.add_parser(
        "per-key", help="override a limit's per-key pool size (or one key's pool), or reset it", **kwargs
    )
    _values_may_start_with_a_minus(per_key)
    per_key.add_argument("limit", help="the limit's name")
    per_key.add_argument(
        "value",
        help="a whole number from 1 to the limit's capacity, or 'reset' (the declared per_key; with --key, "
        "the limit's per_key)",
    )
    per_key.add_argument("--key", metavar="K", help=f"change this key's pool instead of the limit's ({KEY_HELP})")
    # No --yes, like capacity: a pause takes no slot back and a resume undoes it at once.
    pause = verbs.add_parser(
        "pause",
        help="pause a limit: it grants nothing until resumed (held slots stay, waiting runs keep their places)",
        **kwargs,
    )
    pause.add_argument("limit", help="the limit's name")
    resume = verbs.add_parser("resume", help="resume a paused limit: its free slots go to the queue at once", **kwargs)
    resume.add_argument("limit", help="the limit's name")
    # SPEC 13.5, no --yes like capacity: each takes no slot back, and `reset` undoes it.
    share = verbs.add_parser(
        "share", help="share a limit's capacity first come, first served (fifo) or fairly between keys (fair)", **kwargs
    )
    share.add_argument("limit", help="the limit's name")
    share.add_argument("value", help="'fifo', 'fair', or 'reset' for the declared share")
    # SPEC 14.1, 14.5, no --yes like capacity: neither takes anything back, and `reset` undoes it.
    on_full = verbs.add_parser(
        "on-full",
        help="what an acquisition of a full limit does: wait in its queue, skip (answered at once, queued "
        "nowhere), replace (take the place of its key's runs waiting), or on a workflow's own bound "
        "cancel_running (cancel its key's oldest running run); or reset",
        **kwargs,
    )
    on_full.add_argument("limit", help="the limit's name")
    on_full.add_argument(
        "value", help="'wait', 'skip', 'replace', 'cancel_running' (a bound's), or 'reset' for the declared value"
    )
    max_waiting = verbs.add_parser(
        "max-waiting",
        help="cap a limit's queue (or, with --per-key, each key's part of it): a run past the cap is refused "
        "at once; or reset",
        **kwargs,
    )
    _values_may_start_with_a_minus(max_waiting)
    max_waiting.add_argument("limit", help="the limit's name")
    max_waiting.add_argument(
        "value", help="a whole number from 1 to 1,000,000, or 'reset' for the declared value (none: no cap)"
    )
    max_waiting.add_argument(
        "--per-key", action="store_true", help="cap each key's part of the queue (max_waiting_per_key) instead"
    )
    show = verbs.add_parser(
        "show",
        help="one limit: in use and waiting, each value in force (and the declared one an operator overrode), "
        "and the acquisitions it skipped and refused",
        **kwargs,
    )
    show.add_argument("limit", help="the limit's name")
    weight = verbs.add_parser(
        "weight", help="a key's weight on a fair limit (its share grows with it), or reset", **kwargs
    )
    _values_may_start_with_a_minus(weight)
    weight.add_argument("limit", help="the limit's name")
    weight.add_argument("value", help="a whole number from 1 to 100, or 'reset' for 1")
    weight.add_argument("--key", metavar="K", required=True, help=f"the key ({KEY_HELP})")
    minimum = verbs.add_parser(
        "min", help="a key's min on a fair limit (served first while it holds fewer), or reset", **kwargs
    )
    _values_may_start_with_a_minus(minimum)
    minimum.add_argument("limit", help="the limit's name")
    minimum.add_argument("value", help="a whole number from 0 to the limit's capacity, or 'reset' for 0")
    minimum.add_argument("--key", metavar="K", required=True, help=f"the key ({KEY_HELP})")
    # No --yes, like capacity: raising grants at once, lowering takes nothing back.
    box = verbs.add_parser(
        "box",
        help="the box's run concurrency (base, burst, runs executing and waiting); --base/--burst change it",
        **kwargs,
    )
    _values_may_start_with_a_minus(box)
    box.add_argument(
        "--base",
        metavar="N|reset",
        help=f"no single workflow executes more than N runs at once: {CAPACITY_HELP}, "
        "or 'reset' for the declared value",
    )
    box.add_argument(
        "--burst",
        metavar="F|reset",
        help=f"the box executes at most floor(base x F) runs at once: a number from {MIN_BURST} to {MAX_BURST}, "
        "or 'reset' for the declared value",
    )
    verify = verbs.add_parser(
        "verify",
        help="prove from the history rows that no limit broke its rules (exit 1 with the violations)",
        **kwargs,
    )
    verify.add_argument("limits", nargs="*", metavar="limit", help="the limits to check (default: every limit)")
    forget = verbs.add_parser(
        "forget",
        help="remove a limit that left the config, with no slot in use and no run waiting, and its history (recorded)",
        **kwargs,
    )
    forget.add_argument("limit", help="the limit's name")
    forget.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    for verb in (
        listing, slots, keys, release, capacity, max_hold, per_key, pause, resume, share, on_full, max_waiting, show,
        weight, minimum, box, verify, forget,
    ):  # fmt: skip
        _json_usage_errors(verb)
    return verbs


# A value that starts with '-' and a digit ('-5s', '-1') is the verb's value, not an unknown
# option: argparse alone takes only '-5' and '-1.5' as values, so `max-hold voice-calls -5s` was
# "the following arguments are required: value". Now it reaches the service, which says what is
# allowed ("max hold must be more than 0, not '-5s'"). `--` works too.
_NEGATIVE_VALUE = re.compile(r"^-[0-9]")


def _values_may_start_with_a_minus(parser: argparse.ArgumentParser) -> None:
    parser._negative_number_matcher = _NEGATIVE_VALUE


def _json_usage_errors(parser: argparse.ArgumentParser) -> None:
    """With `--json` among a verb's arguments, argparse's own errors of that verb (a missing
    argument, a bad `--limit`) are one line of JSON on stderr too, exit 2, like every other
    error. Only for plain argparse parsers: `manage.py limits` (Django's CommandParser) keeps
    Django's handling."""
    if type(parser) is not argparse.ArgumentParser:
        return
    parse_known_args, error = parser.parse_known_args, parser.error
    wants_json = False

    def parse_known_args_noting_json(args: Any = None, namespace: Any = None) -> Any:
        nonlocal wants_json
        given = list(args) if args is not None else []
        wants_json = "--json" in (given[: given.index("--")] if "--" in given else given)
        return parse_known_args(args, namespace)

    def json_error(message: str) -> NoReturn:
        if wants_json:
            sys.stderr.write(json.dumps({"error": f"{parser.prog}: {message}", "field": None}) + "\n")
            parser.exit(EXIT_USAGE)
        error(message)

    parser.parse_known_args = parse_known_args_noting_json  # type: ignore[method-assign]
    parser.error = json_error  # type: ignore[method-assign]


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


def share_value(text: str) -> str | None:
    """'reset' → None; anything else is passed on as it is, for the service to accept ('fifo',
    'fair') or reject naming the field."""
    text = _argument_text(text)
    return None if text.strip().lower() == "reset" else text


def on_full_value(text: str) -> str | None:
    """'reset' → None; anything else is passed on as it is, for the service to accept ('wait',
    'skip', 'replace'; 'cancel_running' for a workflow's own bound) or reject naming the field."""
    return share_value(text)


def max_waiting_value(text: str) -> int | str | None:
    """'reset' → None; a whole number → int; anything else is passed on for the service to reject
    naming the field (`max_waiting must be a whole number from 1 to 1,000,000, ...`)."""
    return capacity_value(text)


def base_value(text: str) -> int | str | None:
    """`--base`: 'reset' → None; a whole number → int; anything else is passed on for the
    service to reject naming the field (`base must be a whole number from 1 to 100000, ...`)."""
    return capacity_value(text)


def burst_value(text: str) -> float | str | None:
    """`--burst`: 'reset' → None; a decimal number ('1.5', '2', '.5') → float; anything else
    (including 'nan' and 'inf') is passed on for the service to reject naming the field."""
    text = _argument_text(text)
    if text.strip().lower() == "reset":
        return None
    if re.fullmatch(r"[+-]?([0-9]{1,12}(\.[0-9]{0,12})?|\.[0-9]{1,12})", text.strip()):
        return float(text)
    return text


def key_option(value: str | None) -> str | None:
    """The `--key` of a verb, checked here so a bad one is the same one-line error (exit 2) on
    this installation and through `--agent`."""
    if value is None:
        return None
    try:
        return check_key(value)
    except ValueError as error:
        raise CliError(str(error), EXIT_USAGE, field="key") from None


def kind_option(value: str | None) -> str | None:
    """The `--kind` of `list`, checked here (not by argparse's choices, whose error is a usage
    block) so a bad one is the same one-line error, exit 2, on this installation and through
    `--agent`."""
    if value is None:
        return None
    if value not in KINDS:
        raise CliError(BAD_KIND.format(value=value), EXIT_USAGE, field="kind")
    return value


def search_option(value: str | None) -> str:
    """The `--search` of `keys`: any text a key could contain (so at most a key's length)."""
    value = value or ""
    try:
        value.encode("utf-8")  # a non-UTF-8 argument arrives with lone surrogates: no database stores them
    except UnicodeEncodeError:
        raise CliError(BAD_SEARCH, EXIT_USAGE, field="search") from None
    if len(value) > KEY_MAX_LENGTH or "\x00" in value:
        raise CliError(BAD_SEARCH, EXIT_USAGE, field="search")
    return value


def max_hold_value(text: str) -> str | None:
    """'reset' → None; else the text, always: a bare number ('45') is refused by the service with
    a message naming the units (`'45' needs a unit: 45s, 45m, 45h`), never read as milliseconds."""
    text = _argument_text(text)
    if text.strip().lower() == "reset":
        return None
    return text


def _argument_text(value: object) -> str:
    """Python 3.13.0's argparse hands a positional `[]` for `'' -- --`: treat it as empty."""
    return value if isinstance(value, str) else ""
