"""Fair shares between keys (SPEC 13, issue 28): a limit's share (declared 'fifo' or 'fair', an
operator's override), each key's weight and min, an index of the keys with runs waiting, the
audit's new actions, and limits/sql/engine.sql whose limits_grant orders a fair limit's grants.

Reverse: the fields go; the functions stay."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "9deada3485e2b870e78a2308b99f2e81c94390dda46226456efea88421c0dc92"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0030_whole_run_base"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="declared_share",
            field=models.CharField(
                db_default="fifo",
                default="fifo",
                help_text="SPEC 13.1: 'fifo' (first come, first served) or 'fair' (fair shares between keys).",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="limit",
            name="share_override",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="An operator's share; empty: the declared one.",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="limitkey",
            name="minimum",
            field=models.IntegerField(
                db_default=0, default=0, help_text="On a fair limit, slots it is served first below (SPEC 13.1)."
            ),
        ),
        migrations.AddField(
            model_name="limitkey",
            name="weight",
            field=models.IntegerField(
                db_default=1, default=1, help_text="Its weight on a fair limit (SPEC 13.1): 1-100."
            ),
        ),
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
                    ("share", "switched fifo/fair"),
                    ("weight", "changed a key's weight"),
                    ("min", "changed a key's min"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="limitkey",
            index=models.Index(
                condition=models.Q(("waiting_count__gt", 0)), fields=["limit", "key"], name="limitkey_waiting"
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
