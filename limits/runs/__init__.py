"""Durable workflows, the public API: write them anywhere (in modules STACKBONE_WORKFLOWS names)::

    from limits.runs import workflow, step

    @workflow
    def place_call(input: dict) -> dict: ...

Start a run with start_run(place_call, {...}) or start_run("place_call", {...}); cancel it with
cancel_run(run_id). `studio.workflows` (the box's example workflows) re-exports these names.

Cap whole runs (SPEC 11, limits/runs/bounds.py)::

    @workflow(concurrency={"total": 4, "per_key": 1}, limits=["partner-api"])
    def sync_account(input: dict) -> dict: ...

    start_run(sync_account, {...}, concurrency_key="acme")   # 'queued' until its bounds have room

The package holds the runs surfaces too (issue 48), one module a job:

    start      workflow, start_run, start_runs (the names above, handed on from here)
    bounds     whole-run concurrency: the bounds a workflow declares and a run holds (SPEC 11)
    values     a run's input, a batch, RunsError: no Django (`stackbone runs --agent` checks here)
    selectors  the reads of a run's page, and get_run: the one guard of a run id
    listing    the Runs list's pages, starting and cancelling (the one cancel path), the answers
               `stackbone runs --json` and /api/runs/ print
    screen     the Runs screen (/studio/runs/); views, a run's page (/studio/runs/<id>/)
    api        /api/runs/ (its URLs: api_urls); admin, runs and steps in the Django admin

The names are handed on when first used, so `import limits.runs.values` loads no Django.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from limits.runs.start import start_run, start_runs, workflow
    from stackbone.runs.runtime import StepError, Workflow, WorkflowError, cancel_run, step

__all__ = ["StepError", "Workflow", "WorkflowError", "cancel_run", "start_run", "start_runs", "step", "workflow"]

# Where each public name lives (the run layer's step, cancel_run and errors, as they always were).
_HOMES = {
    "start_run": "limits.runs.start",
    "start_runs": "limits.runs.start",
    "workflow": "limits.runs.start",
    "StepError": "stackbone.runs.runtime",
    "Workflow": "stackbone.runs.runtime",
    "WorkflowError": "stackbone.runs.runtime",
    "cancel_run": "stackbone.runs.runtime",
    "step": "stackbone.runs.runtime",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
