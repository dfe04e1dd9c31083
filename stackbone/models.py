"""The app's models, defined by the layers that own them: the run layer's runs, their steps and
the keys they took slots under (stackbone.runs.models), and the plumbing's sign-in failures, clock
skews and worker reports (stackbone.plumbing.models)."""

from stackbone.plumbing.models import ClockSkew, SignInFailure, WorkerBeat
from stackbone.runs.models import Run, RunKey, Step, new_run_id

__all__ = ["ClockSkew", "Run", "RunKey", "SignInFailure", "Step", "WorkerBeat", "new_run_id"]
