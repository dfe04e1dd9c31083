"""limits/sql/engine.sql with `limits_confirm_or_lapse` (issue 26): a confirm in every case in one
call on PostgreSQL (a group's reservations together, a late one lapsing them and handing the
freed capacity on), where a late confirm was the Python rules' ORM statements under the locks.

Reverse: a noop (the older functions are still there)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "d86a6cb26538d81976e28e088ae8f2b4ae52731447179977c553a042fae84ac3"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0025_engine_sql_sweep_limit"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
