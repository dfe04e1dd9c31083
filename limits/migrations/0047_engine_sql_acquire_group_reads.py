"""limits/sql/engine.sql whose limits_acquire_group, for an acquisition it cannot grant at once,
reads its limits' rows again for their on_full and queue caps (SPEC 14.1, 14.5) only when one of
the rows it read for the room skips, replaces or caps its queue, the call names an on_full other
than 'wait', or it holds a box slot (issue 48's hot path: the common acquisition that waits
uncapped costs what it cost before issue 47). Answers unchanged.

Reverse: a noop (no function's parameters or results changed)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "aa82365c98b73504fc05575d6726c39a60669e6a55b33c7189fefdeeedc1d5c9"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0046_replace_on_full"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
