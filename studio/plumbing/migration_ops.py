"""Moved to stackbone.plumbing.migration_ops: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import migration_ops as _moved
from stackbone.plumbing.migration_ops import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
