"""limits/sql/engine.sql with `limits_operate` (issue 26): an operator's capacity change, pause
or resume in one call on PostgreSQL (the change, its grant and its audit row), where it was ORM
statements under the limits' locks before the grant's call.

Reverse: a noop (the older functions are still there)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "a0d2d03c71c9c66549ac65959d567adbe5a985219dcde912cd2dd1e948d974d5"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0026_engine_sql_confirm_or_lapse"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
