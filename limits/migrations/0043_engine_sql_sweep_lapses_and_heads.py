"""limits/sql/engine.sql with the sweep's lapse of single runs in one statement (issue 44):
limits_lapse_singles takes back every reservation of a single run past its 2 minutes on a limit at
once, where limits_sweep_limit called limits_take_back once per run (each call wrote the limit's
row again: 10,000 lapses took 10-35 s). The same slots, entries, positions and counters (SPEC
3.6). And limits_grant_heads finds its heads as one range of the queue's order (up to the
p_count-th waiting position) instead of an `id IN (... LIMIT p_count)` join, which statistics
that found the live queue empty planned as a scan of the whole queue per head. The same heads.

Reverse: a noop (the older code calls limits_take_back, which keeps its name, arguments and
answers; the older limits_sweep_limit does not call the new function)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "c92163184089d6a78cc9f51ac7eddb66563759c38a9bf78ce124eaa39ab87f4b"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0042_on_full_and_queue_caps"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
