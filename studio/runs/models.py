"""Moved to stackbone.runs.models: this old path is that module itself (sys.modules)."""

import sys

from stackbone.runs import models as _moved
from stackbone.runs.models import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
