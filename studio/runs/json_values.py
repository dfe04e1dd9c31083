"""Moved to stackbone.runs.json_values: this old path warns (DeprecationWarning) and is that module itself."""

import sys

from stackbone.runs.json_values import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "stackbone.runs.json_values")
