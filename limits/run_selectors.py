"""Moved to limits.runs.selectors: this old path warns (DeprecationWarning) and is that module itself."""

import sys

from limits._moved import moved
from limits.runs.selectors import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = moved(__name__, "limits.runs.selectors")
