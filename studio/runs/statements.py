"""Moved to stackbone.runs.statements: this old path is that module itself (sys.modules)."""

import sys

from stackbone.runs import statements as _moved
from stackbone.runs.statements import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
