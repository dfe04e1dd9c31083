"""Issue 29: a box made before the run layer and the plumbing left the box's package (studio.runs,
studio.plumbing, studio/migrations/) for the stackbone app migrates across the move, live.

The app kept its label, "studio": the migrations a box recorded, its tables, content types and
permissions are the moved app's, and the task names the broker carries are unchanged. So a box
with runs in flight is upgraded as a deploy does it: stop the worker, `migrate`, start the new
worker.

Must never happen: `migrate` finding anything to do for the run layer's app (a table made again
or dropped), a run, slot or queue entry lost or changed, a permission granted before the move no
longer held, or a message the broker carried across the upgrade under the old task name left
unconsumed (a woken run stranded)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from limits import services
from limits.models import QueueEntry, Slot
from stackbone.runs import runtime
from stackbone.runs.models import Run, Step
from studio.workflows import start_run
from tests.factories import declare, holders, queue
from tests.runs.conftest import Worker, status, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# studio/migrations/ before the move (commit fab03f4), as a box's django_migrations recorded them.
PRE_MOVE_MIGRATIONS = [
    "0001_initial",
    "0002_signinfailure",
    "0003_lean_indexes",
    "0004_queued_runs",
    "0005_run_list_indexes",
    "0006_clockskew",
    "0007_run_by_key",
    "0008_run_reference",
]
PRE_MOVE_TABLES = {"studio_run", "studio_step", "studio_signinfailure", "studio_clockskew"}
PRE_MOVE_TASK_NAMES = {"studio.tasks.advance_run", "studio.tasks.advance_runs", "studio.tasks.recover_runs"}


def test_the_moved_app_is_the_one_a_box_recorded() -> None:
    config = apps.get_app_config("studio")
    assert config.name == "stackbone"
    on_disk = sorted(
        name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == "studio"
    )
    assert on_disk[: len(PRE_MOVE_MIGRATIONS)] == PRE_MOVE_MIGRATIONS
    # Every table of before the move is still the app's (issue 45 added studio_runkey and
    # studio_workerbeat beside them, in migration 0009).
    assert {model._meta.db_table for model in config.get_models()} >= PRE_MOVE_TABLES
    assert {runtime.ADVANCE_RUN, runtime.ADVANCE_RUNS} | {"studio.tasks.recover_runs"} == PRE_MOVE_TASK_NAMES


def snapshot() -> dict[str, object]:
    """What the upgrade must leave as it found: the app's recorded migrations, content types and
    permissions, and every run, step, slot and queue entry."""
    return {
        "migrations": sorted(MigrationRecorder(connection).migration_qs.filter(app="studio").values_list("name", "id")),
        "content types": sorted(ContentType.objects.filter(app_label="studio").values_list("model", "id")),
        "permissions": sorted(
            Permission.objects.filter(content_type__app_label="studio").values_list("codename", "id")
        ),
        "runs": sorted(Run.objects.values_list("id", "status", "suspended", "lease_owner")),
        "steps": sorted(Step.objects.values_list("run_id", "seq", "status")),
        "slots": sorted(Slot.objects.values_list("id", "run_id", "state")),
        "queue": sorted(QueueEntry.objects.values_list("id", "run_id", "state", "position")),
    }


def test_a_box_with_live_runs_slots_and_queue_entries_migrates_across_the_move(workers) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "1h"})
    operator = User.objects.create_user("ops", password="a-long-password")
    operator.user_permissions.add(Permission.objects.get(content_type__app_label="studio", codename="change_run"))
    worker = Worker()
    workers.append(worker)
    holding = start_run("place_call", {"call_id": "c1"})  # its slot stays busy after it ends
    wait_for(lambda: status(holding) == "completed", what="the first call", worker=worker)
    holding.refresh_from_db()
    waiting = start_run("place_call", {"call_id": "c2", "timeout": "1h"})
    wait_for(lambda: Run.objects.get(id=waiting.id).suspended, what="the second call to wait", worker=worker)
    worker.stop()  # the deploy stops the box's worker

    # While it is down, an operator releases the slot: the waiting run is granted it, and the
    # message that wakes it waits in the broker, by the task name of the code before the move.
    assert services.release(holding.output["slot_id"], actor="ops")
    assert holders("voice-calls") == [(waiting.id, "reserved")] and queue("voice-calls") == []
    before = snapshot()
    assert before["runs"] and before["slots"] and before["queue"] and before["migrations"]

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    assert [migration.name for migration, _ in plan if migration.app_label == "studio"] == []
    out = StringIO()
    call_command("migrate", "--no-input", stdout=out)  # what a deploy runs (other apps may have steps)
    assert "Applying studio." not in out.getvalue(), out.getvalue()
    assert snapshot() == before
    assert User.objects.get(username="ops").has_perm("studio.change_run")

    worker = Worker()  # the new code's worker takes the message sent before the upgrade
    workers.append(worker)
    wait_for(lambda: status(waiting) == "completed", what="the woken call to complete", worker=worker)
    assert holders("voice-calls") == [(waiting.id, "busy")]
    assert "Task studio.tasks.advance_run[" in "".join(worker.lines)
    call_command("limits", "verify", "voice-calls", stdout=StringIO())
