from __future__ import annotations

import argparse
import sys

from django.core.management.base import BaseCommand, CommandParser

from limits.cli import Streams
from limits.cli import workers as workers_cli


class Command(BaseCommand):
    help = (
        "The Celery workers alive, the runs waiting for one and the limits the workers bound (as "
        "`stackbone workers`). Exit codes: 0 a worker is alive; 1 none is."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        workers_cli.add_arguments(parser)

    def handle(self, *args: object, **options: object) -> None:
        streams = Streams(stdin=sys.stdin, stdout=self.stdout, stderr=self.stderr)
        code = workers_cli.run(argparse.Namespace(**options), streams=streams)
        if code:  # its own line says why, as `stackbone workers` says it
            sys.exit(code)
