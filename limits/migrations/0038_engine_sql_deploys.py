"""limits/sql/engine.sql with a deploy as one call (issue 26): limits_sync_workspace and
limits_sync_bounds lock, write the declared values, grant and audit in the server, where
sync_workspace and sync_workflow_bounds sent ORM statements under every limit's lock and a
limits_grant per changed limit where runs waited. limits_acquire goes on in limits_acquire_group
itself on a limit that is not plain, and the acquire functions answer an unknown or undeclared
limit (limits_acquire_group names it in a new column, bad_name).

Reverse: a noop. The older code runs against these functions: limits_acquire's two new arguments
have defaults, and limits_acquire_group's new column is one the older code does not ask for."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "dec5b6b7ba4f46f8a4fb558f5175ed735313f416ee7b5a23a74ac5677ba0baa0"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0037_live_partitions_hold_the_limit_keys"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
