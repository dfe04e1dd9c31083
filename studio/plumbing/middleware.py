"""Moved to stackbone.plumbing.middleware: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import middleware as _moved
from stackbone.plumbing.middleware import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
