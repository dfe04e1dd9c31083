"""Kept for old imports: the run layer's and the plumbing's models live in the stackbone app
(stackbone.models; app label "studio", so their tables and migrations are unchanged)."""

from stackbone.models import ClockSkew, Run, SignInFailure, Step, new_run_id

__all__ = ["ClockSkew", "Run", "SignInFailure", "Step", "new_run_id"]
