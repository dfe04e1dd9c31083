"""Moved to stackbone.plumbing.clock: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import clock as _moved
from stackbone.plumbing.clock import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
