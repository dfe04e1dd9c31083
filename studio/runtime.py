"""Kept so that `studio.runtime` goes on naming the run layer's runtime (stackbone.runs.runtime):
the same module object, so attributes set on one are seen by the other."""

import sys

from stackbone.runs import runtime

sys.modules[__name__] = runtime
