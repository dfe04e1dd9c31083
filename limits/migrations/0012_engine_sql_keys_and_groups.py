"""limits/sql/engine.sql for keys and several limits per acquisition (SPEC 9, 10): a new function,
limits_acquire_group (a keyed acquisition, or several limits, granted busy at once when nobody
waits and every total and key pool has room, limits_pool_room), and the others keep the key
pools' counters (confirm, release) and answer 'slow' where the freed capacity must go by the
rules of limits.engine.keys (a limit that is not plain, limits_is_plain: per_key in force, or a
keyed or group entry waiting). No change for plain limits.

Reverse: a noop (the functions of 0010 would not know the new columns, but leave them alone)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "3c8662df271f9dd9cd14874fe6d152b6c68dc0433fbd60e86ab24bb5be2c94bf"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0011_keys_and_groups"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
