"""limits/sql/engine.sql with one home in SQL for the rules its functions share: the capacity
and max hold in force (limits_capacity, limits_max_hold), the clock that never goes back
(limits_clock) and the slot id (limits_new_slot_id), each the mirror of its Python home. No
change a caller can see.

Reverse: a noop (the functions of 0009 answer the same)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "2079e6bf8f9829c6eb4a2d7af50ae99d56092bd3094642e43527364a2f0ea0ca"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0009_engine_sql_file"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
