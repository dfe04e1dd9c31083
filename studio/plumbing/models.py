"""Moved to stackbone.plumbing.models: this old path is that module itself (sys.modules)."""

import sys

from stackbone.plumbing import models as _moved
from stackbone.plumbing.models import *  # noqa: F403 - its names, for type checkers

sys.modules[__name__] = _moved
