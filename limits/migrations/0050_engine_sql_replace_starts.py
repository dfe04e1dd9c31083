"""limits/sql/engine.sql with replace for a run's start (SPEC 14.3, issue 47): limits_acquire_group
no longer turns a start's 'replace' into 'wait'; the queued runs whose start acquisition ('<run>:start')
an acquisition replaces end 'replaced' with their cause (the new limits_end_replaced_starts), and
limits_start_runs answers the runs of a batch a later run of it replaced as 'replaced'.

Reverse: a noop (no function's parameters or results changed; one function added)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "a0c77c65f90280bd30d0f1491fe4d02683153e892afd971252f8c768c7f5df0c"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0049_engine_sql_one_replace_query"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
