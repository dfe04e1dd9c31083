"""limits/sql/engine.sql with every limit row locked FOR NO KEY UPDATE instead of FOR UPDATE (the
Python rules changed the same way: limits.engine.keys.lock).

Why: a row that references a limit (a slot, a queue entry, an insights minute) is checked against
it at COMMIT (Django's foreign keys are DEFERRABLE INITIALLY DEFERRED), and the check locks the
limit row FOR KEY SHARE, in the order the rows were written. FOR UPDATE blocks that lock; FOR NO KEY
UPDATE does not. With FOR UPDATE, a sweep committing its insights rollup (rows for every limit,
none of them locked) held KEY SHARE on one limit while it waited for another that an acquisition
held, and that acquisition waited for the first: a deadlock (tests/concurrency/test_stress.py saw
it once in a few runs). Engine transactions still exclude each other (NO KEY UPDATE conflicts with
itself). Limits are never deleted and their id never changes, which is what FOR UPDATE adds.

The same migration installs two changes of the hot path that change no answer (issue 17): each
function writes the rows of a case it handles inside the block that locked the limit (no MultiXact
on every write of the limit's row), and a release calls limits_settle only when its locked row
says somebody waits.

Reverse: a noop (the previous text locked FOR UPDATE; the rules hold with either)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "3446760192cb7e88c781cf3bab1f58f774d04be9da9ec7ea818d72039c7f83df"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0014_insights"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
