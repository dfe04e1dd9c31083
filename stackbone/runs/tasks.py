from __future__ import annotations

import logging
from typing import TypedDict

from celery import shared_task
from celery.signals import worker_ready

from stackbone.runs import runtime

logger = logging.getLogger(__name__)


class RetryOptions(TypedDict):
    autoretry_for: tuple[type[BaseException], ...]
    retry_backoff: int
    retry_backoff_max: int
    max_retries: int


# A database outage while advancing leaves the run untouched (runtime.advance): try again soon.
RETRY_ON_OUTAGE: RetryOptions = {
    "autoretry_for": runtime.INTERRUPTIONS,
    "retry_backoff": 2,
    "retry_backoff_max": 30,
    "max_retries": 10,
}


@shared_task(name="studio.tasks.advance_run", ignore_result=True, **RETRY_ON_OUTAGE)
def advance_run(run_id: str) -> None:
    outcome = runtime.advance(run_id)
    logger.debug("advance %s: %s", run_id, outcome)


@shared_task(name="studio.tasks.advance_runs", ignore_result=True, **RETRY_ON_OUTAGE)
def advance_runs(run_ids: list[str]) -> None:
    for run_id in run_ids:
        runtime.advance(run_id)


@shared_task(name="studio.tasks.start_deferred_run", ignore_result=True, **RETRY_ON_OUTAGE)
def start_deferred_run(run_id: str) -> None:
    """A deferred run's countdown (runtime.start_run_at): wake it when its time has come."""
    runtime.start_if_due(run_id)


@shared_task(name="studio.tasks.recover_runs", ignore_result=True)
def recover_runs() -> None:
    count = runtime.recover()
    if count:
        logger.info("recovered %d run(s)", count)


@worker_ready.connect
def recover_at_worker_start(**kwargs: object) -> None:
    recover_runs.delay()
