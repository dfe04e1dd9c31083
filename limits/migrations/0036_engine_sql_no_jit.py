"""limits/sql/engine.sql with `SET jit = off` on every function that reads the tables (issue 26):
a plan whose sequential scan is priced out by `enable_seqscan = off` (the sweep's search for limits
with room and runs waiting reads the 1,000-row limits table whole) costs over jit_above_cost, and
PostgreSQL spent ~150 ms compiling it on every idle sweep. The engine's statements are short OLTP
ones: JIT never pays for itself here. And limits_operate takes the box's base and burst (action
'box'): set_box is one call on PostgreSQL, where it was the Python rules under the box's lock.
An empty actor is audited as 'system', as the Python track records it.

Reverse: a noop (the older functions run as they did)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "e6691cb0409e81c6e46901251a08f06769f8a8ccbc701aa85ba8c62286dec93f"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0035_engine_sql_sweep_pass"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
