"""Moved to stackbone.plumbing.migration_ops: this old path warns (DeprecationWarning) and is that module itself."""

import sys

from stackbone.plumbing.migration_ops import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "stackbone.plumbing.migration_ops")
