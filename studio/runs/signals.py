"""Moved to stackbone.runs.signals: this old path is that module itself (sys.modules)."""

import sys

from stackbone.runs import signals as _moved
from stackbone.runs.signals import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
