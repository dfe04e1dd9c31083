"""Moved to limits.runs.listing: this old path warns (DeprecationWarning) and is that module itself."""

import sys

from limits._moved import moved
from limits.runs.listing import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = moved(__name__, "limits.runs.listing")
