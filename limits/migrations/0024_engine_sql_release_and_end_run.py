"""limits/sql/engine.sql with the rest of the common operations in one call each on PostgreSQL
(issue 26): `limits_release` also releases a reservation (its run back to the queue, a group's
whole: `limits_take_back`) and an operator's release, audited (a new p_actor argument), and
`limits_end_run` ends a run on every limit it touched. They were the Python rules, 10-40 ORM
statements under the limits' locks.

Reverse: a noop (the older functions are still there)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "7b853318545a217fc148539759a523c7507273a55cffbffd40b6595dad395235"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0023_one_grant_and_pause"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
