"""limits/sql/engine.sql with replace for a run's start (SPEC 14.3, issue 47): limits_acquire_group
no longer turns a start's 'replace' into 'wait'; the queued runs whose start acquisition ('<run>:start')
an acquisition replaces end 'replaced' with their cause (the new limits_end_replaced_starts), and
limits_start_runs answers the runs of a batch a later run of it replaced as 'replaced'.

Reverse: a noop (no function's parameters or results changed; one function added)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "350d274647cdf1c08fac0e7ef94ded0c71fddfde89018db7f49dd5016c70d962"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0047_engine_sql_acquire_group_reads"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
