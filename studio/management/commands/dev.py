from __future__ import annotations

import argparse
import sys

from django.core.management.base import BaseCommand, CommandParser

from studio import dev


class Command(BaseCommand):
    help = (
        "Run the whole box here: migrate, then the web server, a Celery worker and beat until Ctrl-C "
        "(--demo: with live example runs). Also `stackbone dev` and ./scripts/dev."
    )
    # It migrates first itself; a check that needs the tables must not stop it before that.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        dev.add_arguments(parser)

    def handle(self, *args: object, **options: object) -> None:
        code = dev.run(argparse.Namespace(**options))
        if code:
            sys.exit(code)
