from __future__ import annotations

from django.core.management.base import BaseCommand

from limits import services
from limits.services import SweepReport


def summary(report: SweepReport) -> str:
    """One line of what a pass of the sweep did (also `manage.py limits sweep`)."""
    return (
        f"sweep: {report.expired} expired, {report.lapsed} lapsed, {report.timed_out} timed out, "
        f"{report.granted} granted over {report.limits} limit(s)"
    )


class Command(BaseCommand):
    help = "Run one pass of the sweep (Celery beat runs it every 15 seconds; this is for cron or by hand)."

    def handle(self, *args: object, **options: object) -> None:
        self.stdout.write(summary(services.sweep()))
