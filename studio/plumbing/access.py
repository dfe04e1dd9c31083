"""Moved to stackbone.plumbing.access: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import access as _moved
from stackbone.plumbing.access import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
