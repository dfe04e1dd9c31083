"""The settings the limits app reads, and their defaults (docs/embedding.md, "Settings"). A project
sets only what it changes; StackboneConfig and LimitsConfig fill in the rest at start, so code that
reads `settings.STACKBONE_...` finds a value in any project.

STACKBONE_WORKSPACE has no default: the module that declares a project's limits is the project's
(limits.checks reports it missing)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Modules or packages holding workflows, imported when a run or a bound needs them.
    "STACKBONE_WORKFLOWS": [],
    # How long freed slots and finished queue entries are kept (the sweep deletes older ones).
    "STACKBONE_HISTORY_RETENTION": "7d",
    # The bearer token Prometheus sends to /metrics; empty: /metrics answers 404 with DEBUG off.
    "STACKBONE_METRICS_TOKEN": "",
}


def install_defaults() -> None:
    for name, value in DEFAULTS.items():
        if not hasattr(settings, name):
            setattr(settings, name, value)
