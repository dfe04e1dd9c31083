"""When a limit is full (SPEC 14, issue 47): a limit's on_full ('wait' or 'skip') and the caps
on its queue (max_waiting, max_waiting_per_key), declared and an operator's override each; the
counts of acquisitions answered 'skipped' or 'refused' beside the limit's other counters; and
limits/sql/engine.sql whose limits_acquire and limits_acquire_group answer them (limits_on_full,
limits_max_waiting, limits_max_waiting_per_key, limits_queue_full, limits_refusal). The fields
default to what every limit did before: wait, no cap.

Reverse: the fields go; the functions stay (the older code calls them with the arguments it knows,
each new argument has a default)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "03a1af3da0cd8a77312fd7e4ec089c57c455df5af3cd2bf560a4d0dbd82ce682"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0041_engine_sql_one_home_per_rule"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="declared_max_waiting",
            field=models.IntegerField(
                blank=True, help_text="SPEC 14.5: the most runs its queue holds; empty: no cap.", null=True
            ),
        ),
        migrations.AddField(
            model_name="limit",
            name="declared_max_waiting_per_key",
            field=models.IntegerField(
                blank=True, help_text="SPEC 14.5: the most runs of one key its queue holds; empty: no cap.", null=True
            ),
        ),
        migrations.AddField(
            model_name="limit",
            name="declared_on_full",
            field=models.CharField(
                db_default="wait",
                default="wait",
                help_text="SPEC 14.1: 'wait' (the default: queue), or 'skip' (answer at once, queue nothing).",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="limit",
            name="max_waiting_override",
            field=models.IntegerField(blank=True, help_text="An operator's max_waiting.", null=True),
        ),
        migrations.AddField(
            model_name="limit",
            name="max_waiting_per_key_override",
            field=models.IntegerField(blank=True, help_text="An operator's max_waiting_per_key.", null=True),
        ),
        migrations.AddField(
            model_name="limit",
            name="on_full_override",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="An operator's on_full; empty: the declared one.",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="limit",
            name="refused_count",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                editable=False,
                help_text="Acquisitions refused: the queue was full (SPEC 14.5).",
            ),
        ),
        migrations.AddField(
            model_name="limit",
            name="skipped_count",
            field=models.BigIntegerField(
                db_default=0, default=0, editable=False, help_text="Acquisitions answered 'skip' (SPEC 14.2, 14.6)."
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
                    ("on_full", "changed what a full limit does"),
                    ("max_waiting", "changed the queue's cap"),
                    ("max_waiting_key", "changed each key's cap of the queue"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
