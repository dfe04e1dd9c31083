"""limits/sql/engine.sql for keys and several limits per acquisition (SPEC 9, 10): the fast path
answers 'slow' for a limit that is not plain (limits_is_plain: per_key in force, or a keyed or
group entry waiting) and for a slot with a key or of a group, so limits.engine.keys hands out
that capacity in Python. No change for plain limits.

Reverse: a noop (the functions of 0010 would not know the new columns, but leave them alone)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "20495645e9ecdf944683940b3869bed8cc04febdce62579691093c36fddbbe4a"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0011_keys_and_groups"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
