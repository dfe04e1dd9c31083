"""limits/sql/engine.sql with one home per repeated rule (issue 48): limits_lock (the limits and
their groups' other limits locked in id order, then the clock read), which eight functions spelled
out each (seven with the partners); limits_per_key and limits_pool_size (the per_key and a key's
pool size in force, spelled twelve times), limits_share, limits_burst, limits_box_ceiling and
limits_box_override (the box's floor(base x burst), spelled twice), limits_min_capacity and
limits_max_capacity (the caps, a literal 100000 before). The small rules are SQL functions the
planner inlines; limits_room, limits_is_plain and limits_is_fair stay PL/pgSQL (engine.sql says
why). No behaviour changes.

Reverse: a noop (the older code calls none of the new functions, and every function it calls keeps
its name, arguments and answers)."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "73a59b6abc1d56e4fabdbf9e2c234b4835420c00a2e795ba235cb2d04f497dd2"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0040_engine_sql_start_runs"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
