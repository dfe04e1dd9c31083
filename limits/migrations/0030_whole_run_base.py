"""SPEC 12.3: no limit serves more than the box's base of whole runs at once. limits/sql/engine.sql
gains limits_box_base and limits_whole_run_room (asked by limits_acquire_group and limits_grant),
a partial index counts a limit's live whole-run slots, and the audit's actions name the box's.
limits_partners also locks the groups waiting in the limits a released reservation frees.
limits_operate also does set_per_key (a limit's or one key's) and set_max_hold in one call (issue 26).

Reverse: the index goes; the functions stay."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "662ba94e934509a97eb53bdb9ee5ddd1e8db1141a22c089683a5c32d1948628f"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0029_box"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("release", "released a slot"),
                    ("capacity", "changed capacity"),
                    ("max_hold", "changed max hold"),
                    ("sync", "synced declared values"),
                    ("expire", "took back slots past max hold"),
                    ("per_key", "changed per-key pool size"),
                    ("pause", "paused the limit"),
                    ("resume", "resumed the limit"),
                    ("box", "changed the box's run concurrency"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="slot",
            index=models.Index(
                condition=models.Q(("state__in", ("reserved", "busy")), ("request__endswith", ":start")),
                fields=["limit"],
                name="slot_live_whole_run",
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
