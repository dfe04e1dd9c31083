"""When a workflow's own bound is full, cancel the running (SPEC 14.4, 14.6, issue 47): a limit counts
the runs a newer run of their key cancelled (cancelled_count), and limits/sql/engine.sql gains
limits_cancel_running, which limits_start_runs calls for a start that waits under its workflow's
own bound with on_full 'cancel_running' in force: the pool's oldest holder is cancelled as
cancel_run cancels it, its cause recorded, and the new run's entry waits in the front band of the
bound's queue (its ticket less 2^62). limits_stricter_on_full ranks 'cancel_running' between
'replace' and 'wait'; limits_grant and limits_key_head scan a queue from its lowest position.

Reverse: the field goes; the functions stay (the older code calls them with the arguments it knows)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "d578267891b79aa207e9d5f915cac00615e22414b7ac4bb9d10e7109891196b9"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0047_engine_sql_acquire_group_reads"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="cancelled_count",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                editable=False,
                help_text="Runs holding it that a newer run of their key cancelled (cancel_running, SPEC 14.4, 14.6).",
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
