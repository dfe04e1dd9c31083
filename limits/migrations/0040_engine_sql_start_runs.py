"""limits/sql/engine.sql with limits_start_runs (issue 44): a run's start, or a batch's, in one
call on PostgreSQL: the runs written and their start acquisitions taken in the order given, where
start_run sent a check of the box, one of the workflow's own bound, the run's INSERT, the
acquisition, a tie per slot, an UPDATE of the run and a read of it back, in a transaction.
And limits_release_slots: a with_limits block's slots released in one call (one set of locks, one
grant), where each slot's release locked the same limits again.

Reverse: a noop (the older code does not call the new function)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "d50e12bc7766058a2dae750ba17ee34bf3d037ad8d70e27d1ce3a697fdedb092"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0039_fair_turns"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
