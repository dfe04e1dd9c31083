"""limits/sql/engine.sql with `limits_grant` (issue 26): the grant over locked limits with key
pools or waiting groups (limits.engine.keys.settle: time-outs, passed-over and owed runs, all or
nothing for a group) in one call on PostgreSQL, where it was 10-40 ORM statements under the
limits' locks.

Reverse: a noop (the older functions are still there and unchanged)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "a5b46ed1dbaf314629ab6687c68a52c8863393c41df38b3b816e01f39a717aee"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0020_engine_sql_database_clock"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
