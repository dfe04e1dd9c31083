"""limits/sql/engine.sql with a deploy as one call (issue 26): limits_sync_workspace and
limits_sync_bounds lock, write the declared values, grant and audit in the server, where
sync_workspace and sync_workflow_bounds sent ORM statements under every limit's lock and a
limits_grant per changed limit.

Reverse: a noop (the older functions run as they did)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "a17c8524e50316d073e182cbe48685f784baa5763425f204c31199896c2972dd"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0037_live_partitions_hold_the_limit_keys"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
