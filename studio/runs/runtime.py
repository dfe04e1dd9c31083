"""Moved to stackbone.runs.runtime: this old path is that module itself (sys.modules)."""

import sys

from stackbone.runs import runtime as _moved
from stackbone.runs.runtime import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
