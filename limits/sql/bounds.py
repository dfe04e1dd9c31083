"""The bounds of a limit's configuration on PostgreSQL, held by a trigger generated from their one
home, `Limit.Meta.constraints`.

Why not CHECK constraints: PostgreSQL evaluates every CHECK of a row at every UPDATE of it, and
reads each one back from its stored text each time a statement starts. The engine's functions
update the limit's row at every acquire, confirm and release, never its configuration; the six
range checks on the configuration (capacity, max hold, per_key, declared and overridden) were
8-12 % of PostgreSQL's CPU in an uncontended queued cycle (pgbench; docs/performance.md, "The
CHECK diet"). A trigger `BEFORE INSERT OR UPDATE OF <those columns>` runs only when a statement names
one of them: a sync of the workspace config, an operator's override, the admin.

What stays the same: the database refuses an out-of-range value with a check_violation (SQLSTATE
23514, an IntegrityError in Django) that names the constraint, and changes nothing; Django's model
validation still runs the Meta constraints; SQLite keeps them as CHECK constraints (no hot path
there to spare). The trigger's conditions are those constraints' own SQL, rendered by Django for
this database (`CheckConstraint.constraint_sql`), so nothing is written twice:
tests/services/test_row_bounds.py fails when the installed trigger differs from what the current
Meta constraints generate, and checks that every bound is still refused.

Changing them later, in a migration (its RunPython gets the model as `apps.get_model("limits",
"Limit")`, and names the bounds as a literal tuple, as migration 0019 does, so that it keeps
meaning what it meant when the code here moves on):
- one of these constraints: change it in the state only (SeparateDatabaseAndState: on
  PostgreSQL there is no CHECK to drop), then run `install` again;
- the type or the name of one of the columns they read: `uninstall` first, then the schema
  change, then `install` (PostgreSQL refuses to alter the type of a column a trigger names, and
  a renamed column would leave the old name in the function's body);
- a column dropped: `uninstall` first (DROP COLUMN ... CASCADE would drop the trigger silently).
Like every trigger, it does not run under `session_replication_role = replica` (a logical
replica, `pg_restore --disable-triggers`), where the CHECKs did: the rows it would refuse can only
come from a source that refused them already.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def constraints(model: Any, names: Sequence[str] = CONFIG_BOUNDS) -> list[Any]:
    """The CheckConstraints of `model` (Limit, or its migration-state version) named in `names`."""
    found = [c for c in model._meta.constraints if c.name in names]
    if sorted(c.name for c in found) != sorted(names):
        raise LookupError(f"Limit.Meta lacks {sorted(set(names) - {c.name for c in found})}")
    return found


def columns(model: Any, names: Sequence[str] = CONFIG_BOUNDS) -> list[str]:
    """The columns the bounds read, F() expressions included, in the model's order: the trigger
    fires when a statement names one of them."""
    read: set[str] = set()
    for constraint in constraints(model, names):
        read |= constraint.condition.referenced_base_fields
    return [field.column for field in model._meta.concrete_fields if field.name in read]


def body(model: Any, schema_editor: Any, names: Sequence[str] = CONFIG_BOUNDS) -> str:
    """The trigger function's body: each bound's condition as Django renders its CHECK on this
    database, evaluated on the new row; the first one broken raises check_violation naming it."""
    table = model._meta.db_table
    steps = []
    for constraint in constraints(model, names):
        sql = constraint.constraint_sql(model, schema_editor)  # CONSTRAINT "name" CHECK (<condition>)
        condition = sql[sql.index(" CHECK (") + len(" CHECK (") : sql.rindex(")")]
        steps.append(
            f"    IF EXISTS (SELECT FROM (SELECT NEW.*) AS new_row WHERE NOT ({condition})) THEN\n"
            f"        RAISE check_violation USING CONSTRAINT = '{constraint.name}', TABLE = '{table}',\n"
            f'            MESSAGE = \'new row for relation "{table}" violates check constraint '
            f'"{constraint.name}"\';\n'
            "    END IF;\n"
        )
    return "\nBEGIN\n" + "".join(steps) + "    RETURN NEW;\nEND\n"


def install(schema_editor: Any, model: Any, names: Sequence[str] = CONFIG_BOUNDS) -> None:
    """On PostgreSQL: drop the CHECK constraints `names` of `model`'s table (if there) and create
    (or replace) the trigger that holds them. Does nothing on other databases."""
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(model._meta.db_table)
    for name in names:
        schema_editor.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {schema_editor.quote_name(name)}")
    schema_editor.execute(
        f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql "
        f"AS $${body(model, schema_editor, names)}$$",
        params=None,
    )
    watched = ", ".join(schema_editor.quote_name(column) for column in columns(model, names))
    schema_editor.execute(
        f"CREATE OR REPLACE TRIGGER {FUNCTION} BEFORE INSERT OR UPDATE OF {watched} ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()",
        params=None,
    )


def uninstall(schema_editor: Any, model: Any, names: Sequence[str] = CONFIG_BOUNDS) -> None:
    """The reverse of install: the trigger and its function dropped, the CHECK constraints back."""
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(model._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {FUNCTION} ON {table}")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    for constraint in constraints(model, names):
        schema_editor.execute(constraint.create_sql(model, schema_editor))
