from django.db import migrations

from stackbone.plumbing.migration_ops import drop_like_index


class Migration(migrations.Migration):
    dependencies = [
        ("studio", "0002_signinfailure"),
    ]

    operations = [
        drop_like_index("studio.Run", "id"),
        drop_like_index("studio.Step", "run_id"),
    ]
