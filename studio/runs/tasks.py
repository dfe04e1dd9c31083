"""Moved to stackbone.runs.tasks: this old path is that module itself (sys.modules)."""

import sys

from stackbone.runs import tasks as _moved
from stackbone.runs.tasks import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
