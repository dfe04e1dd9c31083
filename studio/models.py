"""The studio app's models, defined by the layers that own them: the run layer's runs and steps
(studio.runs.models) and the plumbing's sign-in failures (studio.plumbing.models). Their app label
stays "studio", so their tables and migrations are those of the studio app."""

from studio.plumbing.models import SignInFailure
from studio.runs.models import Run, Step, new_run_id

__all__ = ["Run", "SignInFailure", "Step", "new_run_id"]
