"""limits/sql/engine.sql with SPEC 14 for a run's start (issue 47): limits_acquire_group answers a
start (request '<run>:start') at once as it answers an acquisition, under bounds that skip or a
queue at its cap, and limits_start_runs (new p_on_full DEFAULT NULL; new OUT reasons, full_names)
writes such a run 'skipped' with its reason and limit (the run layer's columns of studio 0011);
limits_sync_bounds syncs a workflow's own bound's on_full and caps (new arrays DEFAULT NULL: a
caller of the release before keeps what is declared).

Reverse: a noop (the older code calls these functions with the arguments it knows; their new
parameters have defaults)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "189a19b4e4a8f26cdc24802026cf6d5d5399f553cf7e463dbe72071e43c7ebd1"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0044_engine_sql_comments"),
        ("studio", "0011_run_end_cause"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
