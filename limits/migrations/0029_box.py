"""The box's own run concurrency (SPEC 12, issue 27): the limit kind 'box', its burst factor
(declared and an operator's override), and limits/sql/engine.sql whose limits_acquire_group takes
each limit's key pool and the box bound (a run gives its box slot back while it waits).

Reverse: the fields go; the functions stay (the older ones are replaced, not kept)."""

from django.db import migrations, models

from limits import sql

ENGINE_SQL_FINGERPRINT = "fa9394f858cd46ea3f483a72f0d5c09fc87c7d5ad98fd19e1005334826e840d9"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0028_wait_peaks"),
    ]

    operations = [
        migrations.AddField(
            model_name="limit",
            name="burst_override",
            field=models.FloatField(blank=True, help_text="The box bound only: an operator's burst.", null=True),
        ),
        migrations.AddField(
            model_name="limit",
            name="declared_burst",
            field=models.FloatField(
                blank=True, help_text="The box bound only (SPEC 12.1): its burst factor from the config.", null=True
            ),
        ),
        migrations.AlterField(
            model_name="limit",
            name="kind",
            field=models.CharField(
                choices=[("limit", "Limit"), ("workflow", "Workflow"), ("box", "Box")],
                db_default="limit",
                default="limit",
                max_length=16,
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
