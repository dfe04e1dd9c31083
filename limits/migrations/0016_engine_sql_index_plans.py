"""limits/sql/engine.sql with `SET enable_seqscan = off` on every PL/pgSQL function (issue 17).

Why: PL/pgSQL caches a plan per statement and per session, and after a few calls keeps a generic
plan made with the tables' sizes at that moment. A connection that first called the engine while
limits_queueentry and limits_slot held a page or two kept sequential scans for as long as it
lived (Django keeps a connection CONN_MAX_AGE, workers too) or until an ANALYZE of the table:
every acquire then read the whole queue history to check that its request was new. The bench
measured 9,626 sequential scans reading 9.0 M rows of limits_queueentry in 8 s of scenario 1, and
`perf` put 40 % of PostgreSQL's CPU in those scans after 20 s of scenario 10 (docs/performance.md).
Every statement of these functions has an index to use: with sequential scans priced out, the
cached plan is the index plan whatever the tables' sizes were when it was made.

Reverse: a noop (the previous text answers the same)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "e0ce954cda5decfa529d83da6813a52598365272c463d7c48dd2a35a1f1a68bf"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0015_engine_sql_no_key_locks"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
