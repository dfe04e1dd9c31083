"""limits/sql/engine.sql again: limits_grant leaves a group to another of its limits that is fair
when the limit that met it is fifo and the run is not owed, or when an older run of its key waits
there undealt (SPEC 13.2 under the box, keys._Grant._left_to_fairness).

Reverse: nothing to undo (the functions stay)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "241325d6ee98ca19337a5a56f2466699ad71d7cf6eaf7c2ee8c929c6a3d1a78c"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0031_fair_shares"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
