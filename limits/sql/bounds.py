"""The bounds of a limit's configuration on PostgreSQL, held by a trigger generated from their one
home, `Limit.Meta.constraints`.

Why not CHECK constraints: PostgreSQL evaluates every CHECK of a row at every UPDATE of it, and
reads each one back from its stored text each time a statement starts. The engine's functions
update the limit's row at every acquire, confirm and release, never its configuration; the six
range checks on the configuration (capacity, max hold, per_key, declared and overridden) were 12 %
of PostgreSQL's CPU in an uncontended queued cycle (pgbench, docs/performance.md, "The CHECK
diet"). A trigger `BEFORE INSERT OR UPDATE OF <those columns>` runs only when a statement names
one of them: a sync of the workspace config, an operator's override, the admin.

What stays the same: the database refuses an out-of-range value with a check_violation (SQLSTATE
23514, an IntegrityError in Django) that names the constraint, and changes nothing; Django's model
validation still runs the Meta constraints; SQLite keeps them as CHECK constraints (no hot path
there to spare). The trigger's conditions are those constraints' own SQL, rendered by Django for
this database (`CheckConstraint.constraint_sql`), so nothing is written twice:
tests/services/test_row_bounds.py fails when the installed trigger differs from what the current
Meta constraints generate, and checks that every bound is still refused.

A migration that changes one of these constraints must also run `install(schema_editor, model)`
again (RemoveConstraint would find no constraint to drop on PostgreSQL: drop it from the state
only, with SeparateDatabaseAndState).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

# The Meta constraints of Limit the trigger holds on PostgreSQL: the configuration's ranges. The
# counters' bound (limit_counters_not_negative) stays a CHECK: the hot path writes the counters.
CONFIG_BOUNDS = (
    "limit_declared_capacity_range",
    "limit_capacity_override_range",
    "limit_declared_max_hold_range",
    "limit_max_hold_override_range",
    "limit_declared_per_key_range",
    "limit_per_key_override_range",
)
FUNCTION = "limit_config_bounds"  # not limits_*: limits.sql.install drops those


def constraints(model: Any) -> list[Any]:
    """The CheckConstraints of `model` (Limit, or its migration-state version) named in CONFIG_BOUNDS."""
    found = [c for c in model._meta.constraints if c.name in CONFIG_BOUNDS]
    if sorted(c.name for c in found) != sorted(CONFIG_BOUNDS):
        raise LookupError(f"Limit.Meta lacks {sorted(set(CONFIG_BOUNDS) - {c.name for c in found})}")
    return found


def _fields(condition: Q) -> list[str]:
    """The field names a Q refers to, in order of first mention ("capacity_override__gte" and
    "capacity_override__isnull" both name capacity_override)."""
    names: list[str] = []
    for child in condition.children:
        found = _fields(child) if isinstance(child, Q) else [child[0].split("__", 1)[0]]
        names += [name for name in found if name not in names]
    return names


def columns(model: Any) -> list[str]:
    """The columns the bounds read: the trigger fires when a statement names one of them."""
    names: list[str] = []
    for constraint in constraints(model):
        names += [name for name in _fields(constraint.condition) if name not in names]
    return [model._meta.get_field(name).column for name in names]


def body(model: Any, schema_editor: Any) -> str:
    """The trigger function's body: each bound's condition as Django renders its CHECK on this
    database, evaluated on the new row; the first one broken raises check_violation naming it."""
    table = model._meta.db_table
    steps = []
    for constraint in constraints(model):
        sql = constraint.constraint_sql(model, schema_editor)  # CONSTRAINT "name" CHECK (<condition>)
        condition = sql[sql.index(" CHECK (") + len(" CHECK (") : sql.rindex(")")]
        steps.append(
            f"    IF EXISTS (SELECT FROM (SELECT NEW.*) AS new_row WHERE NOT ({condition})) THEN\n"
            f"        RAISE check_violation USING CONSTRAINT = '{constraint.name}', TABLE = '{table}',\n"
            f"            MESSAGE = 'new row for relation \"{table}\" violates check constraint "
            f"\"{constraint.name}\"';\n"
            "    END IF;\n"
        )
    return "\nBEGIN\n" + "".join(steps) + "    RETURN NEW;\nEND\n"


def install(schema_editor: Any, model: Any) -> None:
    """On PostgreSQL: drop the CONFIG_BOUNDS CHECK constraints of `model`'s table (if there) and
    create (or replace) the trigger that holds them. Does nothing on other databases."""
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(model._meta.db_table)
    for name in CONFIG_BOUNDS:
        schema_editor.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {schema_editor.quote_name(name)}")
    schema_editor.execute(
        f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $${body(model, schema_editor)}$$",
        params=None,
    )
    watched = ", ".join(schema_editor.quote_name(column) for column in columns(model))
    schema_editor.execute(
        f"CREATE OR REPLACE TRIGGER {FUNCTION} BEFORE INSERT OR UPDATE OF {watched} ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()",
        params=None,
    )


def uninstall(schema_editor: Any, model: Any) -> None:
    """The reverse of install: the trigger and its function dropped, the CHECK constraints back."""
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(model._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {FUNCTION} ON {table}")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    for constraint in constraints(model):
        schema_editor.execute(constraint.create_sql(model, schema_editor))
