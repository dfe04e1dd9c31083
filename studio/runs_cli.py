"""Old path of `stackbone runs` (limits.cli.runs): this path warns (DeprecationWarning) and is that
module itself (studio/_moved.py)."""

import sys

from limits.cli.runs import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "limits.cli.runs")
