"""limits/sql/engine.sql with `SET enable_bitmapscan = off` beside `enable_seqscan = off` on every
PL/pgSQL function (issue 17).

Why: the functions probe the live slots and the waiting entries through partial indexes
(`slot_live_by_limit`, `slot_one_live_per_request`, the queue's waiting index) whose entries die
at every change of a row's state. A plain index scan marks the dead entries it meets, so later
probes skip them; a bitmap scan never does. Between two vacuums every bitmap probe walked all the
entries that died since the last one: `limits_release`'s check for a reserved group slot read
3,761 dead entries and 415 heap pages to find none, 3.7 ms, after 30 s of one client, which then
ran 211, 160, 140 cycles/s in three 10 s runs; with plain index scans 269, 273, 278
(docs/performance.md, "Dead index entries").

Reverse: a noop (the previous text answers the same)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "9072c5be094a6d5b01d057598d35b8175629aadaf6bb916006c575daf33b8007"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0017_check_diet"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
