"""limits/sql/engine.sql with its comments naming the Python homes where they live now (issue 48):
the grant's Python track in limits.engine.grant (`grant._Grant`, `grant.settle`,
`grant.grant_heads`, where the comments said `keys.`), the operator actions' in
limits.engine.python_operators, the acquisition's helpers in limits.engine.python, the clock in
stackbone/plumbing/clock.py. No function's code changes; but three of those comments stand on a
line of code (limits_settle, limits_operate, limits_acquire), which the fingerprint reads, so the
file is installed again and the database holds the text it names (tests/services/test_sql_file.py).

Reverse: a noop (the older text defines the same functions)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "6ce5d35b4070e12630a8de23458ae23cea09d7c336f92a60944a1fe272837ed1"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0043_engine_sql_sweep_lapses_and_heads"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
