from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task

from limits import services
from limits.engine import sweeper
from limits.models import SweepState
from stackbone.plumbing import clock

logger = logging.getLogger(__name__)

# A sweep message taken this soon after the last pass began does nothing: after an outage beat's
# messages (one every 15 s) wait in the maintenance queue, and the first one does the work of all.
# Judged by the database's clock, never the worker's (a beat entry's `expires` was judged by the
# worker's clock: one minutes ahead dropped every sweep). Below beat's period, so no regular
# message is skipped.
RECENT_PASS = timedelta(seconds=5)


@shared_task(name="limits.tasks.sweep", ignore_result=True)
def sweep() -> None:
    if last_pass_is_recent():
        logger.debug("sweep: the last pass began under %s ago; nothing to do", RECENT_PASS)
        return
    report = services.sweep()
    if report.found_work():
        logger.info(
            "sweep: %d expired, %d lapsed, %d timed out, %d granted over %d limit(s)",
            report.expired,
            report.lapsed,
            report.timed_out,
            report.granted,
            report.limits,
        )


@shared_task(name="limits.tasks.analyze", ignore_result=True)
def analyze() -> None:
    """Hourly (limits.beat): fresh planner statistics for the partitioned tables (sweeper)."""
    sweeper.analyze_partitioned()


def last_pass_is_recent() -> bool:
    """Did the last sweep pass begin within RECENT_PASS, by the box's clock (the database's:
    stackbone/plumbing/clock.py)? One read of one row. A last pass stamped ahead of that clock is not
    trusted: the sweep then runs, as it would with no pass recorded."""
    return SweepState.objects.filter(
        id=1, last_run_at__gt=clock.expression(-RECENT_PASS), last_run_at__lte=clock.expression()
    ).exists()
