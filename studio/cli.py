"""Old path of the `stackbone` console script, which lives in the limits app (limits.cli.script;
the box's `stackbone dev` is its management command, studio/management/commands/dev.py): this
path warns (DeprecationWarning) and is that module itself (studio/_moved.py)."""

import sys

from limits.cli.script import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "limits.cli.script")
