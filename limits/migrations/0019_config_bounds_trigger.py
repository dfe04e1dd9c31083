"""On PostgreSQL, the configuration ranges of a limit (capacity, max hold, per_key: declared and
overridden) move from six CHECK constraints to one trigger generated from the same Meta
constraints, which fires only when a statement names one of those columns (limits/sql/bounds.py
says why: the CHECKs were re-read and evaluated at every hot-path UPDATE of the limit's row, 8-12 %
of PostgreSQL's CPU in an uncontended queued cycle). The migration state keeps the constraints:
Django's model validation runs them as before, and SQLite keeps them as CHECKs."""

from django.db import migrations

from limits.sql import bounds


# The bounds as they were when this migration was written (bounds.CONFIG_BOUNDS may move on).
BOUNDS = (
    "limit_declared_capacity_range",
    "limit_capacity_override_range",
    "limit_declared_max_hold_range",
    "limit_max_hold_override_range",
    "limit_declared_per_key_range",
    "limit_per_key_override_range",
)


def install(apps, schema_editor) -> None:
    bounds.install(schema_editor, apps.get_model("limits", "Limit"), BOUNDS)


def uninstall(apps, schema_editor) -> None:
    bounds.uninstall(schema_editor, apps.get_model("limits", "Limit"), BOUNDS)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0018_engine_sql_index_scans"),
    ]

    operations = [
        migrations.RunPython(install, uninstall),
    ]
