"""The box's old import paths, kept for one release: each old module is a shim that warns
(DeprecationWarning, naming the new path) and gives the moved code itself.

Issue 29 moved the run layer and the plumbing from the box into the stackbone app
(studio.runs.* -> stackbone.runs.*, studio.plumbing.* -> stackbone.plumbing.*, studio.models ->
stackbone.models, studio.runtime -> stackbone.runs.runtime, studio.tasks -> stackbone.runs.tasks);
issue 45 moved the `stackbone` command into the limits app (studio.cli -> limits.cli.script,
studio.runs_cli -> limits.cli.runs, studio.workers_cli -> limits.cli.workers). Nothing of the
apps, the box or the tests imports an old path; the wheel ships no `studio` package at all, so
these serve a checkout of the box whose own code still uses them.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Collection
from types import ModuleType

MOVED = "{old} is deprecated and goes in the next release: import {new} instead (docs/embedding.md)"


def moved(old: str, new: str) -> ModuleType:
    """Warn that module `old` moved to `new`, and make `old` the moved module itself (sys.modules),
    so an attribute set through one path is seen through the other. Called by the shim as it is
    imported: the warning names the line that imported it (the import machinery's frames are
    skipped)."""
    warnings.warn(MOVED.format(old=old, new=new), DeprecationWarning, stacklevel=3)
    module = importlib.import_module(new)
    sys.modules[old] = module
    return module


def moved_name(old: str, new: str, name: str, names: Collection[str]) -> object:
    """A name of an old module that Django or Celery import by convention (an app's `models`, its
    `tasks`): importing the module says nothing, using one of its names warns (its module
    `__getattr__` calls this)."""
    if name not in names:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    warnings.warn(MOVED.format(old=f"{old}.{name}", new=f"{new}.{name}"), DeprecationWarning, stacklevel=3)
    return getattr(importlib.import_module(new), name)
