from __future__ import annotations

import argparse
import sys

from django.core.management.base import BaseCommand, CommandParser

from limits.cli import Streams
from limits.cli import runs as runs_cli


class Command(BaseCommand):
    help = (
        "Start, list, show and cancel workflow runs (as `stackbone runs`; --agent <id>: on another "
        "installation). Exit codes: 0 done; 1 not found or nothing cancelled; 2 bad usage or value."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        runs_cli.add_verbs(parser)

    def handle(self, *args: object, **options: object) -> None:
        streams = Streams(stdin=sys.stdin, stdout=self.stdout, stderr=self.stderr)
        code = runs_cli.run(argparse.Namespace(**options), streams=streams)
        if code:  # its own error line is written already, as `stackbone runs` writes it
            sys.exit(code)
