"""Old path of the run layer's runtime (stackbone.runs.runtime): this path warns
(DeprecationWarning) and is that module itself, so attributes set on one are seen by the other."""

import sys

from stackbone.runs.runtime import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "stackbone.runs.runtime")
