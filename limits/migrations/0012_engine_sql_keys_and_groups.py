"""limits/sql/engine.sql for keys and several limits per acquisition (SPEC 9, 10): a new function,
limits_acquire_group (a keyed acquisition, or several limits, granted busy at once when nobody
waits and every total and key pool has room, limits_pool_room), and the others keep the key
pools' counters (confirm, release) and answer 'slow' where the freed capacity must go by the
rules of limits.engine.keys (a limit that is not plain, limits_is_plain: per_key in force, or a
keyed or group entry waiting). No change for plain limits.

Reverse: a noop (the functions of 0010 would not know the new columns, but leave them alone)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "e9a03b68d9f7c8cd6bc989bb6ba5bdb386e39c7e58d810818d8f1286e00ec567"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0011_keys_and_groups"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
