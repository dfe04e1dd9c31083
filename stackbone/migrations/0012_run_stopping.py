from django.db import migrations, models

# SPEC 2.5, 11.4: a run cancelled while it executed keeps what it holds until its worker stops;
# recovery ends those whose worker died (stackbone.runs.dispatch.end_stopped_cancels). The partial
# index holds only such runs (cancelled, not yet ended): recovery's pass reads a handful of
# entries, never every cancelled run.


class Migration(migrations.Migration):
    dependencies = [
        ("studio", "0011_run_end_cause"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", True), ("status", "cancelled")),
                fields=["lease_until"],
                name="run_stopping",
            ),
        ),
    ]
