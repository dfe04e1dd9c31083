"""The `stackbone` console script: one top-level parser with a subcommand group per area.

    stackbone limits list|slots|release|capacity|max-hold ...   (limits.cli)
    stackbone runs start|list|show|cancel ...                   (studio.runs_cli)
    stackbone workers [--json] [--agent ID]                      (studio.workers_cli)
    stackbone dev [--demo] [--port N]                            (studio.dev)

To add a group (say `stackbone dev`), write `add_<group>(groups)` that adds its parser and sets
`handler` (a function of the parsed options returning an exit code), and list it in GROUPS.
A group that needs the project's Django calls `setup_django()` itself, only when it needs it, so
`stackbone limits --agent ...` works without a local database or settings.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from limits import cli as limits_cli

SETTINGS_MODULE = "studio.settings"
TRACEBACK_ENV = "STACKBONE_TRACEBACK"


def setup_django() -> None:
    """Configure Django for a local verb (settings from the environment, as manage.py does)."""
    from django.apps import apps

    if apps.ready:
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    import django
    from django.core.exceptions import ImproperlyConfigured

    from limits.config import ConfigError

    try:
        django.setup()
    except (ImproperlyConfigured, ConfigError) as error:
        raise limits_cli.CliError(f"the installation's settings are wrong: {error}") from None


def add_limits(groups: argparse._SubParsersAction[Any]) -> None:
    parser = groups.add_parser(
        "limits",
        help="operate concurrency limits (locally, or on another installation with --agent)",
        description="Operate concurrency limits. Exit codes: 0 done; 1 not found or nothing released; "
        "2 bad usage or bad value.",
    )
    limits_cli.add_verbs(parser)
    parser.set_defaults(handler=lambda options: limits_cli.run(options, setup=setup_django))


def add_runs(groups: argparse._SubParsersAction[Any]) -> None:
    from studio import runs_cli

    parser = groups.add_parser(
        "runs",
        help="start, list, show and cancel workflow runs (locally, or on another installation with --agent)",
        description="Start and watch workflow runs. Exit codes: 0 done; 1 not found or nothing cancelled; "
        "2 bad usage or bad value.",
    )
    runs_cli.add_verbs(parser)
    parser.set_defaults(handler=lambda options: runs_cli.run(options, setup=setup_django))


def add_workers(groups: argparse._SubParsersAction[Any]) -> None:
    from studio import workers_cli

    parser = groups.add_parser(
        "workers",
        help="the Celery workers alive, the runs waiting for one, and the limits the workers bound",
        description="The box's second ceiling: the Celery workers alive (host, pool, concurrency, busy), the "
        "runs waiting for a worker, and the limits whose capacity is above the workers' total concurrency. "
        "Exit codes: 0 a worker answered; 1 none did.",
    )
    workers_cli.add_arguments(parser)
    parser.set_defaults(handler=lambda options: workers_cli.run(options, setup=setup_django))


def add_dev(groups: argparse._SubParsersAction[Any]) -> None:
    from studio import dev

    parser = groups.add_parser(
        "dev",
        help="run the whole box here: web server, Celery worker and beat (--demo: with live example runs)",
        description="Migrate, then run the web server, one Celery worker and Celery beat until Ctrl-C.",
    )
    dev.add_arguments(parser)
    parser.set_defaults(handler=dev.run)


GROUPS: list[Callable[[argparse._SubParsersAction[Any]], None]] = [add_limits, add_runs, add_workers, add_dev]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stackbone", description="Stackbone Limits for Python.")
    groups = parser.add_subparsers(dest="group", metavar="<command>", required=True)
    for add_group in GROUPS:
        add_group(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        return int(options.handler(options))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except Exception as error:  # the last line of defence: one line, never a traceback
        if os.environ.get(TRACEBACK_ENV):
            raise
        print(f"error: unexpected {type(error).__name__}: {error} (set {TRACEBACK_ENV}=1 for details)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
