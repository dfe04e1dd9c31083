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

ENGINE_SQL_FINGERPRINT = "155926bcdcd4bddc5195bfc6b68b948deb3b6e5dbbcb36f1d300c3f7f4dc82da"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0043_engine_sql_sweep_lapses_and_heads"),
        ("studio", "0011_run_end_cause"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
