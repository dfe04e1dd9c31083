"""Runs woken by a change (granted a reservation, or timed out), announced after the commit that
woke them, never while a lock is held: both engines' last step (limits.signals.runs_woken)."""

from __future__ import annotations

from django.db import transaction

from limits.models import Limit
from limits.signals import runs_woken


def wake_on_commit(run_ids: list[str]) -> None:
    """Send runs_woken for these runs (once each, in order) when the current transaction commits
    (at once outside one)."""
    if run_ids:
        woken = list(dict.fromkeys(run_ids))
        transaction.on_commit(lambda: runs_woken.send(sender=Limit, run_ids=woken))
