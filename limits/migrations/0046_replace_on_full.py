"""When a limit is full, replace (SPEC 14.3, 14.7, issue 47): a limit's on_full may be 'replace';
a queue entry a newer acquisition of its key replaced ends 'replaced', naming that acquisition's
request (replaced_by), counted on its limit (replaced_count); and limits/sql/engine.sql whose
limits_acquire_group takes the replaced entries out of the queue and joins in the oldest one's
place (limits_previous answers 'replaced' to their runs; limits_stricter_on_full). The fields
default to what every entry and limit had before.

Reverse: the fields go; the functions stay (the older code calls them with the arguments it knows;
their new results are extra columns it does not read)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "06848298a7a551c2cb3738d28642a3e28b427b41f71156b5ff8fab6a4d4c1e0a"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0045_engine_sql_start_skips"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="replaced_count",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                editable=False,
                help_text="Entries of its queue a newer acquisition of their key replaced (SPEC 14.3, 14.6).",
            ),
        ),
        migrations.AddField(
            model_name="queueentry",
            name="replaced_by",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="SPEC 14.3: the request of the acquisition that replaced it (state 'replaced').",
                max_length=128,
            ),
        ),
        migrations.AddField(
            model_name="queueentry",
            name="replacing",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="SPEC 14.3: joined with on_full 'replace' in force: no other entry of its key waiting for "
                "the same limits stayed (limits verify, check n).",
            ),
        ),
        migrations.AlterField(
            model_name="limit",
            name="declared_on_full",
            field=models.CharField(
                db_default="wait",
                default="wait",
                help_text="SPEC 14.1: 'wait' (the default: queue), 'skip' (answer at once, queue nothing), or "
                "'replace' (take the place of its key's runs waiting).",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="queueentry",
            name="state",
            field=models.CharField(
                choices=[
                    ("waiting", "Waiting"),
                    ("granted", "Granted"),
                    ("timed_out", "timed out"),
                    ("cancelled", "Cancelled"),
                    ("replaced", "Replaced"),
                ],
                default="waiting",
                max_length=16,
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
