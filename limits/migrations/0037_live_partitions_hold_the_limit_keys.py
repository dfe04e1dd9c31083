"""The foreign keys from a slot and a queue entry to their limit sit on the live partitions only
(PostgreSQL; issue 26).

A row that ends moves from its live partition to its history partition in one UPDATE, which
PostgreSQL runs as a delete and an insert, and the insert fired the foreign key's check at
commit: one lookup of the limit's row per slot freed and per entry granted, timed out or
cancelled. Every row enters through a live partition (a slot is made reserved or busy, an entry
waiting), where the key is still checked, and only ever moves to history; so the history's check
found what the live one had. Measured on 100,000 busy slots past expiry + 100,000 waiting runs
(`CALL limits_sweep`, the same rows, three shapes alternated twice; docs/performance.md): the key
on the parent table 4.40-4.55 s, on the live partitions 3.69-3.83 s, none 3.31-3.52 s.

What the database no longer holds: a limit deleted by raw SQL while history rows still name it.
Only limits.forget deletes a limit, and it deletes the limit's rows first (Django's PROTECT
holds the rest, through the ORM).

Django's migration state still describes one table with its key (models.py, for SQLite), as
migration 0034 says.

Reverse: the keys on the parent tables again."""

from django.db import migrations

KEYS = {
    "limits_slot": "limits_slot_limit_id_40b7606f_fk_limits_limit_id",
    "limits_queueentry": "limits_queueentry_limit_id_092451ec_fk_limits_limit_id",
}
REFERENCE = "FOREIGN KEY (limit_id) REFERENCES limits_limit (id) DEFERRABLE INITIALLY DEFERRED"


def forward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, key in KEYS.items():
        schema_editor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {key}")
        schema_editor.execute(f"ALTER TABLE {table}_live ADD CONSTRAINT {table}_live_limit_id_fk {REFERENCE}")


def backward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, key in KEYS.items():
        schema_editor.execute(f"ALTER TABLE {table}_live DROP CONSTRAINT {table}_live_limit_id_fk")
        schema_editor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {key} {REFERENCE}")


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0036_engine_sql_no_jit"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
