from __future__ import annotations

import logging

from celery import shared_task

from limits import services

logger = logging.getLogger(__name__)


@shared_task(name="limits.tasks.sweep", ignore_result=True)
def sweep() -> None:
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
