"""limits/sql/engine.sql with the procedure `limits_sweep` (issue 26): a sweep pass on PostgreSQL
is one statement whatever the number of limits with work (it finds them, sweeps each with
limits_sweep_limit and commits each before the next), where it was four queries and one call per
limit. engine.sql's install drops procedures as well as functions from now on.

Reverse: a noop (limits_sweep stays beside the older code, which never calls it)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "3d82b03912a4e1245cb9be69ceafcfdd3b4119be88306c1b38b72b44597df8c6"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0034_live_apart_from_history"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
