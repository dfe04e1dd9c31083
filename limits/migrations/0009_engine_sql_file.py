"""The engine's functions from limits/sql/engine.sql, their current definition (limits/sql/__init__.py
says how a change is made). The file holds the text of migration 0006 unchanged, so this changes
nothing a caller can see: the functions are dropped and created again, the same, and the file is
the source from here on.

ENGINE_SQL_FINGERPRINT is the file this migration was written for (limits.sql.fingerprint()): the
newest migration that installs the file must carry the fingerprint of the file as it is
(tests/services/test_sql_file.py), so an edit of engine.sql comes with a migration that installs it.

Reverse: drop the functions and install 0006's text again (the functions as they were before this
migration: 0007 and 0008 do not touch them). On SQLite both directions do nothing.
"""

import importlib

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "93025b030d694459abbfdcdc902db9edde283f216dbba650b89063a0b7404d88"


def install(apps, schema_editor) -> None:
    sql.install(schema_editor)


def install_0006(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        previous = importlib.import_module("limits.migrations.0006_engine_functions")
        schema_editor.execute(sql.DROP_ENGINE_FUNCTIONS, params=None)
        for statement in previous.CREATE_STATEMENTS:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0008_slot_ends_with_run"),
    ]

    operations = [
        migrations.RunPython(install, install_0006),
    ]
