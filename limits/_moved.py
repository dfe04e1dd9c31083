"""The limits app's old import paths, kept for one release: each old module is a shim that warns
(DeprecationWarning, naming the new path) and gives the moved code itself. The box's own shims
(studio/_moved.py) work the same way; this app cannot import the box, so it has its own.

Issue 48 gathered the runs surfaces into one package, limits.runs: limits.run_admin ->
limits.runs.admin, limits.run_bounds -> limits.runs.bounds, limits.run_list ->
limits.runs.listing, limits.run_selectors -> limits.runs.selectors, limits.run_values ->
limits.runs.values, limits.run_views -> limits.runs.views, limits.runs_api -> limits.runs.api,
limits.runs_api_urls -> limits.runs.api_urls, limits.runs_screen -> limits.runs.screen. Nothing of
the apps, the box or the tests imports an old path (tests/test_layers.py).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType

MOVED = "{old} is deprecated and goes in the next release: import {new} instead (docs/architecture.md)"


def moved(old: str, new: str) -> ModuleType:
    """Warn that module `old` moved to `new`, and make `old` the moved module itself (sys.modules),
    so an attribute set through one path is seen through the other. Called by the shim as it is
    imported: the warning names the line that imported it (the import machinery's frames are
    skipped)."""
    warnings.warn(MOVED.format(old=old, new=new), DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module
