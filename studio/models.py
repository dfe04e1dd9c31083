"""Old path of the run layer's and the plumbing's models, which live in the stackbone app
(stackbone.models; app label "studio", so their tables and migrations are unchanged). Django
imports this module as the box app's models: importing it says nothing, using a name from it warns
(DeprecationWarning) and gives stackbone.models' (studio/_moved.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from studio._moved import moved_name

__all__ = ["ClockSkew", "Run", "SignInFailure", "Step", "new_run_id"]

if TYPE_CHECKING:
    from stackbone.models import ClockSkew, Run, SignInFailure, Step, new_run_id
else:

    def __getattr__(name: str) -> object:
        return moved_name(__name__, "stackbone.models", name, __all__)
