"""Moved to stackbone.runs.json_values: this old path is that module itself (sys.modules)."""

import sys

from stackbone.runs import json_values as _moved
from stackbone.runs.json_values import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
