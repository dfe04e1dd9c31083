"""The engine's SQL, kept as SQL: `engine.sql` in this package is the current definition of every
`limits_` PL/pgSQL function limits installs on PostgreSQL (CREATE OR REPLACE FUNCTION statements,
and one PROCEDURE: limits_sweep, which commits). The one other function, the trigger that holds
a limit's configuration ranges, is generated from the model's constraints by `bounds.py` in this
package.

Migrations install it with `install(schema_editor)`; tests/services/test_sql_file.py fails when the
functions of the migrated database differ from the file, or when the database holds a `limits_`
function the file does not define.

How a change is made:
1. Edit the function in engine.sql.
2. Add a migration that runs `install` (RunPython, like limits/migrations/0009_engine_sql_file.py),
   so a database migrated before the edit gets it too, and that records the file it was written for:
   a module constant `ENGINE_SQL_FINGERPRINT = "<fingerprint()>"`. tests/services/test_sql_file.py
   fails while the newest such migration records another fingerprint (an edit with no migration).
   Its reverse reinstalls the previous text (copy it into the migration) or is a noop.

`install` drops every `limits_` function of the schema before it runs the file, in the migration's
transaction, so the database is left with exactly the file's functions: a change of a function's
arguments or result type, or a function taken out of the file, needs nothing more (CREATE OR
REPLACE alone would fail on the first and leave the old function behind for the others).

A fresh database runs every migration that calls `install`, and each installs the file as it is
now, not as it was when that migration was written. So the file must install at the first such
migration: PL/pgSQL checks a function's syntax and the row types it declares (`l limits_limit`)
when it is created, the tables and columns of its statements only when it runs. A column a later
migration adds is fine; a table whose row type a function declares must exist by limits/0009.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

ENGINE_SQL = "engine.sql"


def engine_sql() -> str:
    """The text of engine.sql, read from the installed package."""
    return resources.files(__package__).joinpath(ENGINE_SQL).read_text(encoding="utf-8")


def fingerprint(text: str | None = None) -> str:
    """The sha256 of engine.sql (or of `text`) without its blank lines, its comment-only lines and
    trailing spaces: an edit of the comments alone needs no migration, any other edit does."""
    lines = (line.rstrip() for line in (engine_sql() if text is None else text).splitlines())
    kept = [line for line in lines if line and not line.lstrip().startswith("--")]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


# Every limits_ function and procedure in the schema the functions are created in (the first of search_path).
# No CASCADE: if anything came to depend on one, the migration fails rather than drop that too.
DROP_ENGINE_FUNCTIONS = r"""
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema() AND p.proname LIKE 'limits\_%' AND p.prokind IN ('f', 'p')
    LOOP
        EXECUTE format('DROP ROUTINE %s', f);
    END LOOP;
END
$$
"""


def install(schema_editor: Any) -> None:
    """Leave the schema with exactly the functions engine.sql defines: drop its `limits_`
    functions, then run the whole file in one execute (no parameters, so PostgreSQL runs its
    statements in turn). Call it from a migration (atomic on PostgreSQL: callers never see the
    functions missing). Does nothing on other databases."""
    if schema_editor.connection.vendor == "postgresql":
        # params=None: the texts are sent as they are, never parsed for %s placeholders.
        schema_editor.execute(DROP_ENGINE_FUNCTIONS, params=None)
        schema_editor.execute(engine_sql(), params=None)
