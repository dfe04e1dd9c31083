"""Moved to stackbone.plumbing.throttle: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import throttle as _moved
from stackbone.plumbing.throttle import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
