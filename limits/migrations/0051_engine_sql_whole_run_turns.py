"""limits/sql/engine.sql with a run's start held back at the box's base dealt with by a fair limit's
stream (SPEC 13.2, 12.3): limits_fair_next gives it like any entry and limits_grant passes it, as
grant._Grant does, so the younger runs of its key are no longer left to it
(tests/model/test_found_whole_run_turns.py). And the front band (SPEC 14.4) read from the lowest
position in two more places: a fair limit's no-key stream in limits_grant (a canceller without a
key on a fair bound, tests/runs/test_cancel_running.py) and a key's head after a grant that was not
its head (limits_reserve).

Reverse: a noop (no function's parameters or results changed)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "d47055960e63c797be2dac5ac63a0fc6f66c2f8485b4cafaf1a57b27631b5736"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0050_engine_sql_replace_starts"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
