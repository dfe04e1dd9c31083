"""Reads for the Studio run pages."""

from __future__ import annotations

from studio.models import Run, Step

WAIT_STEP_PREFIX = "Esperando hueco · "


def get_run(run_id: str) -> Run | None:
    if "\x00" in run_id:
        return None  # no run has that id, and PostgreSQL cannot even compare it
    return Run.objects.filter(id=run_id).first()


def run_steps(run: Run) -> list[Step]:
    """The run's steps in order; a wait for a slot carries `waits_on` (the limit's name)."""
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    for step in steps:
        step.waits_on = (  # type: ignore[attr-defined]  # for the template, not a field
            step.name.removeprefix(WAIT_STEP_PREFIX)
            if step.kind == Step.Kind.HOOK and step.name.startswith(WAIT_STEP_PREFIX)
            else ""
        )
    return steps
