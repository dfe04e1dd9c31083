"""The app's models, defined by the layers that own them: the run layer's runs and steps
(stackbone.runs.models) and the plumbing's sign-in failures and clock skews
(stackbone.plumbing.models)."""

from stackbone.plumbing.models import ClockSkew, SignInFailure
from stackbone.runs.models import Run, Step, new_run_id

__all__ = ["ClockSkew", "Run", "SignInFailure", "Step", "new_run_id"]
