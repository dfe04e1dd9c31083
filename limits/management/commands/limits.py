from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from limits import services
from limits.config import ConfigError, load_workspace


class Command(BaseCommand):
    help = "Operate concurrency limits: sync the workspace, run one sweep."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        verbs = parser.add_subparsers(dest="verb", required=True)
        verbs.add_parser("sync", help="Bring declared limits from the workspace config to the database.")
        verbs.add_parser("sweep", help="Run one pass of the sweep (beat runs it every 15 seconds).")

    def handle(self, *args: object, **options: object) -> None:
        if options["verb"] == "sync":
            try:
                report = services.sync_workspace(load_workspace())
            except ConfigError as error:
                raise CommandError(str(error)) from None
            self.stdout.write(
                f"synced: {len(report.created)} created, {len(report.updated)} updated, "
                f"{len(report.undeclared)} undeclared"
            )
        elif options["verb"] == "sweep":
            report = services.sweep()
            self.stdout.write(
                f"sweep: {report.expired} expired, {report.lapsed} lapsed, {report.timed_out} timed out, "
                f"{report.granted} granted over {report.limits} limit(s)"
            )
