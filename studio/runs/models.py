"""Moved to stackbone.runs.models: this old path warns (DeprecationWarning) and is that module itself."""

import sys

from stackbone.runs.models import *  # noqa: F403 - its names, for type checkers
from studio._moved import moved

sys.modules[__name__] = moved(__name__, "stackbone.runs.models")
