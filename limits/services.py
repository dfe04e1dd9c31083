"""Every write to limits, slots and the queue: the public face of the engine (limits.engine,
whose docstring says how it is built). Callers import from here; the names below stay stable."""

from __future__ import annotations

from limits.config import CAPACITY_HELP
from limits.engine import *  # noqa: F403 - the engine's public names are this module's
from limits.engine import __all__ as _engine_names
from limits.models import LIVE_SLOT_STATES, Limit

__all__ = [*_engine_names, "CAPACITY_HELP", "LIVE_SLOT_STATES", "Limit"]
