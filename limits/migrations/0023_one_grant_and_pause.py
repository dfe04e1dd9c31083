"""Pause and resume (SPEC 5.6): Limit.paused_at, two audit actions, and limits/sql/engine.sql with
limits_room (the one question every grant asks: none while paused), limits_grant granting a
plain limit's heads set-based (the grant over locked limits is one function for every case, and
the Python track of plain limits, rules.settle, is gone: issue 26), and every settle timing out
stale waits, room or not.

Reverse: the column goes; the functions stay (they read paused_at only when called)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "36c0b3cc806701d469f66d20db8b410d5bbecf9dfab9a39ec68fe0c58405b0f9"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0022_forgotten_limit"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="paused_at",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="When an operator paused it (SPEC 5.6): it grants nothing until resumed; empty: running.",
                null=True,
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
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
