"""limits/sql/engine.sql with `limits_confirm_or_lapse` (issue 26): a confirm in every case in one
call on PostgreSQL (a group's reservations together, a late one lapsing them and handing the
freed capacity on), where a late confirm was the Python rules' ORM statements under the locks.

Reverse: a noop (the older functions are still there)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "856ff148822d5119351c1502d925ec675649029a120b5b279fd74e380a29f61f"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0025_engine_sql_sweep_limit"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
