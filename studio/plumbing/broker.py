"""Moved to stackbone.plumbing.broker: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import broker as _moved
from stackbone.plumbing.broker import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
