"""Old path of `stackbone workers` (limits.cli.workers): this path warns (DeprecationWarning) and is
that module itself (studio/_moved.py)."""

import sys

from limits.cli.workers import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "limits.cli.workers")
