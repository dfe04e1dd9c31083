"""Migration operations shared by the apps' migrations."""

from __future__ import annotations

from django.db import migrations


def drop_like_index(model_name: str, column: str) -> migrations.RunPython:
    """Drop the `varchar_pattern_ops` index Django adds on PostgreSQL beside an indexed CharField
    (a primary key, or a foreign key to one) for LIKE 'prefix%' lookups. Ids are only ever looked
    up whole, so it is one more index to write on every insert and state change, for nothing.
    Reversible; does nothing on other databases."""

    def name(apps, schema_editor) -> tuple[str, str]:  # type: ignore[no-untyped-def]
        table = apps.get_model(model_name)._meta.db_table
        return table, schema_editor._create_index_name(table, [column], suffix="_like")

    def drop(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name(apps, schema_editor)[1])}")

    def create(apps, schema_editor) -> None:  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            table, index = name(apps, schema_editor)
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {schema_editor.quote_name(index)} "
                f"ON {schema_editor.quote_name(table)} ({schema_editor.quote_name(column)} varchar_pattern_ops)"
            )

    return migrations.RunPython(drop, create)
