"""The `stackbone` console script, in whichever Django project it is run (docs/cli.md):

    stackbone limits list|slots|keys|release|capacity|...   (limits.cli; also `manage.py limits`)
    stackbone runs start|list|show|cancel ...               (limits.cli.runs; also `manage.py runs`)
    stackbone workers [--json] [--agent ID]                  (limits.cli.workers; also `manage.py workers`)
    stackbone <command> ...                                  the project's own `manage.py <command>`
                                                             (the box's `stackbone dev` is its `manage.py dev`)

The project is found as `python manage.py` finds it (find_project): the settings module is
DJANGO_SETTINGS_MODULE when it is set, else the one the nearest manage.py names (in the current
folder or a folder above it, its `os.environ.setdefault("DJANGO_SETTINGS_MODULE", "...")`); that
manage.py's folder, else the current folder, goes first on the import path, as `python manage.py`
puts its own. With no settings it says what to set (exit 2) and loads nothing: the package has no
settings of its own, so it never writes anywhere, least of all inside its own install.

A group that needs the project's Django calls `setup_django()` itself, only when it needs it, so
`--agent <id>` (another installation, through its JSON API) works anywhere, with no project.

To add a group, write `add_<group>(groups)` that adds its parser and sets `handler` (a function of
the parsed options returning an exit code), and list it in GROUPS.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from limits.cli.errors import EXIT_USAGE, CliError
from limits.cli.verbs import run as run_limits_verb

TRACEBACK_ENV = "STACKBONE_TRACEBACK"
SETTINGS_ENV = "DJANGO_SETTINGS_MODULE"
MANAGE_PY = "manage.py"
# manage.py's own line: os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
NAMED_SETTINGS = re.compile(r"""["']DJANGO_SETTINGS_MODULE["']\s*,\s*["']([A-Za-z_][\w.]*)["']""")

# Messages (tests assert on them).
NO_PROJECT = (
    "no Django project here: run stackbone in your project's folder (where manage.py is) or below it, "
    "or set DJANGO_SETTINGS_MODULE (DJANGO_SETTINGS_MODULE=mysite.settings) where that module can be "
    "imported (its folder, or PYTHONPATH); --agent <id> needs no project"
)
NO_SETTINGS_IN_MANAGE_PY = (
    '{path} names no settings module (no os.environ.setdefault("DJANGO_SETTINGS_MODULE", ...)): '
    "set DJANGO_SETTINGS_MODULE (DJANGO_SETTINGS_MODULE=mysite.settings)"
)
SETTINGS_NOT_FOUND = (
    "cannot import the settings module {module!r} ({source}): {error}; run stackbone in the folder that "
    "holds it (where manage.py is), or add that folder to PYTHONPATH"
)
SETTINGS_WRONG = "the installation's settings are wrong: {error}"


@dataclass(frozen=True, slots=True)
class Project:
    """Where the settings come from: `settings` (a module name), `source` (what named it, for
    messages) and `folder` (what goes first on the import path)."""

    settings: str
    source: str
    folder: Path


def find_project(cwd: Path | None = None, environ: dict[str, str] | os._Environ[str] | None = None) -> Project:
    """The project stackbone runs in, found as `python manage.py` finds it; a CliError (exit 2)
    that says what to set when there is none."""
    here = (cwd or Path.cwd()).resolve()
    environ = os.environ if environ is None else environ
    manage_py = next((folder / MANAGE_PY for folder in (here, *here.parents) if (folder / MANAGE_PY).is_file()), None)
    folder = manage_py.parent if manage_py is not None else here
    if environ.get(SETTINGS_ENV):
        return Project(environ[SETTINGS_ENV], SETTINGS_ENV, folder)
    if manage_py is None:
        raise CliError(NO_PROJECT, EXIT_USAGE)
    named = NAMED_SETTINGS.search(manage_py.read_text(errors="replace"))
    if named is None:
        raise CliError(NO_SETTINGS_IN_MANAGE_PY.format(path=manage_py), EXIT_USAGE)
    return Project(named[1], f"named by {manage_py}", folder)


def use_project(project: Project) -> None:
    """Put the project's folder first on the import path and name its settings, as manage.py does
    (the processes a verb starts inherit DJANGO_SETTINGS_MODULE)."""
    if str(project.folder) not in sys.path:
        sys.path.insert(0, str(project.folder))
    os.environ[SETTINGS_ENV] = project.settings


def setup_django() -> None:
    """Configure Django for a local verb: the project's settings (find_project), then
    django.setup(). A settings module that cannot be imported, or settings Django or the workspace
    refuse, is a CliError (exit 2) in one line."""
    from django.apps import apps

    if apps.ready:
        return
    project = find_project()
    use_project(project)
    import django
    from django.core.exceptions import ImproperlyConfigured

    from limits.config import ConfigError

    try:
        importlib.import_module(project.settings)
        django.setup()
    except ModuleNotFoundError as error:
        if error.name and (project.settings == error.name or project.settings.startswith(f"{error.name}.")):
            message = SETTINGS_NOT_FOUND.format(module=project.settings, source=project.source, error=error)
            raise CliError(message, EXIT_USAGE) from None
        raise CliError(SETTINGS_WRONG.format(error=error), EXIT_USAGE) from None
    except (ImproperlyConfigured, ConfigError) as error:
        raise CliError(SETTINGS_WRONG.format(error=error), EXIT_USAGE) from None


def add_limits(groups: argparse._SubParsersAction[Any]) -> None:
    from limits.cli.parser import add_verbs

    parser = groups.add_parser(
        "limits",
        help="operate concurrency limits (locally, or on another installation with --agent)",
        description="Operate concurrency limits. Exit codes: 0 done; 1 not found or nothing released; "
        "2 bad usage or bad value.",
    )
    add_verbs(parser)
    parser.set_defaults(handler=lambda options: run_limits_verb(options, setup=setup_django))


def add_runs(groups: argparse._SubParsersAction[Any]) -> None:
    from limits.cli import runs

    parser = groups.add_parser(
        "runs",
        help="start, list, show and cancel workflow runs (locally, or on another installation with --agent)",
        description="Start and watch workflow runs. Exit codes: 0 done; 1 not found or nothing cancelled; "
        "2 bad usage or bad value.",
    )
    runs.add_verbs(parser)
    parser.set_defaults(handler=lambda options: runs.run(options, setup=setup_django))


def add_workers(groups: argparse._SubParsersAction[Any]) -> None:
    from limits.cli import workers

    parser = groups.add_parser(
        "workers",
        help="the Celery workers alive, the runs waiting for one, and the limits the workers bound",
        description="The box's second ceiling: the Celery workers alive (host, pool, concurrency, busy), the "
        "runs waiting for a worker, and the limits whose capacity is above the workers' total concurrency. "
        "Exit codes: 0 a worker is alive; 1 none is.",
    )
    workers.add_arguments(parser)
    parser.set_defaults(handler=lambda options: workers.run(options, setup=setup_django))


GROUPS: dict[str, Callable[[argparse._SubParsersAction[Any]], None]] = {
    "limits": add_limits,
    "runs": add_runs,
    "workers": add_workers,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stackbone",
        description="Stackbone Limits for Python, in the Django project of the current folder (the nearest "
        "manage.py names its settings; DJANGO_SETTINGS_MODULE overrides it).",
        epilog="Any other command is your project's own management command, as `python manage.py <command>` "
        "runs it (the box's `stackbone dev` is its `manage.py dev`).",
    )
    groups = parser.add_subparsers(dest="group", metavar="<command>", required=True)
    for add_group in GROUPS.values():
        add_group(groups)
    return parser


def run_management_command(argv: list[str]) -> int:
    """`stackbone <command>` for any command not in GROUPS: the project's own management command,
    through Django's manage.py machinery (which exits with the command's code)."""
    use_project(find_project())
    from django.core.management import execute_from_command_line

    execute_from_command_line(["stackbone", *argv])
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args and not args[0].startswith("-") and args[0] not in GROUPS:
            return run_management_command(args)
        options = build_parser().parse_args(args)
        return int(options.handler(options))
    except CliError as error:  # no project to run a management command in
        print(f"error: {error.message}", file=sys.stderr)
        return error.code
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
