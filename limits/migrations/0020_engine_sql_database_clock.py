"""limits/sql/engine.sql on the database's clock (issue 25): `limits_clock` reads
`clock_timestamp()` when the caller passes no time (production; studio/plumbing/clock.py), so a
grant, an expiry, a reservation or a deadline is never stamped by a worker whose clock is off.

Reverse: a noop (the functions answer the same whenever the caller passes a time)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "61fbd903dddad67d2e30b7a487a8a1a9bef0eb64ad11e84afe4b71e9ea7d8515"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0019_config_bounds_trigger"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
