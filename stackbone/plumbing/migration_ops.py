"""Migration operations shared by the apps' migrations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import migrations

if TYPE_CHECKING:
    from django.db.backends.base.schema import BaseDatabaseSchemaEditor
    from django.db.migrations.state import StateApps


def drop_like_index(model_name: str, column: str) -> migrations.RunPython:
    """Drop the `varchar_pattern_ops` index Django adds on PostgreSQL beside an indexed CharField
    (a primary key, or a foreign key to one) for LIKE 'prefix%' lookups. Ids are only ever looked
    up whole, so it is one more index to write on every insert and state change, for nothing.
    Reversible; does nothing on other databases."""

    def name(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> tuple[str, str]:
        table = apps.get_model(model_name)._meta.db_table
        return table, schema_editor._create_index_name(table, [column], suffix="_like")  # type: ignore[attr-defined]  # Django's, not in the stubs

    def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name(apps, schema_editor)[1])}")

    def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            table, index = name(apps, schema_editor)
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {schema_editor.quote_name(index)} "
                f"ON {schema_editor.quote_name(table)} ({schema_editor.quote_name(column)} varchar_pattern_ops)"
            )

    return migrations.RunPython(drop, create)
