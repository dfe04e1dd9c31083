"""A run's place in the box's run concurrency (SPEC 12), as both of the box's waits take it: a run
that starts under the box (limits.runs.bounds: its bounds and a box slot in one acquisition) and a
run whose body waits for a limit's slot (limits.workflow: it gives its box slot back and waits for
both together, SPEC 12.2). Here, below both, so the body's slot API needs nothing of the runs
surfaces (limits.runs)."""

from __future__ import annotations

from collections.abc import Sequence

from limits import services
from limits.config import BOX_NAME, KEY_MAX_LENGTH
from limits.durations import MAX_DURATION_MS
from limits.models import Limit, QueueEntry
from stackbone.runs.models import Run

QUEUE_TIMEOUT_MS = MAX_DURATION_MS  # a queued run waits as long as the longest wait there is: 30 days


def box_place(run_id: str, request: str, *, run: tuple[str, Sequence[str]] | None = None) -> services.BoxPlace | None:
    """The box slot a run needs beside a limit's slot in its body (SPEC 12.2), for the
    acquisition `request`: for a run started under the box (its bounds name it) while the box is
    still declared, or whose wait `request` joined the box's queue before the box was undeclared
    (the box slot granted with it is the run's to resume in, freed when it ends); None otherwise.
    `run`: its (workflow, bounds) when the caller has read them (no query then, for most runs)."""
    found = run if run is not None else Run.objects.filter(id=run_id).values_list("workflow", "bounds").first()
    if found is None or BOX_NAME not in found[1]:
        return None
    if not Limit.objects.filter(name=BOX_NAME, kind=Limit.Kind.BOX, declared=True).exists() and (
        not QueueEntry.objects.filter(request=request, limit__name=BOX_NAME, limit__kind=Limit.Kind.BOX).exists()
    ):
        return None
    return box_pool(found[0])


def box_pool(workflow_name: str) -> services.BoxPlace:
    """A run's place in the box: its workflow's pool (SPEC 12.3)."""
    return services.BoxPlace(BOX_NAME, key=workflow_name[:KEY_MAX_LENGTH])
