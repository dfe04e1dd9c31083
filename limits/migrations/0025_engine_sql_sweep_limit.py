"""limits/sql/engine.sql with `limits_sweep_limit` (issue 26): the sweep of one limit with work
(expiries, lapses, time-outs, the grant) in one call on PostgreSQL, where it was the Python
rules' 6-40 ORM statements under the limit's lock.

Reverse: a noop (the older functions are still there)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "9956375a336b706cadfd8d05d09fcc9def8aa18ae8c6a48727f4c70d264cabee"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0024_engine_sql_release_and_end_run"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
