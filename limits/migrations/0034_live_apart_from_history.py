"""Live state apart from history on PostgreSQL (issue 26, part 2).

limits_slot and limits_queueentry become tables partitioned by state, each with a live partition
and a history partition:

- limits_slot_live holds the reserved and busy slots, limits_slot_history every other
  (released, expired, lapsed, run ended);
- limits_queueentry_live holds the waiting entries, limits_queueentry_history every other.

A slot freed or an entry granted, timed out or cancelled moves to its history partition in the
same UPDATE (PostgreSQL moves a row whose partition key changes). Every reader keeps reading the
parent table, so Studio, the CLI, the API, verify, insights and the model test read the same
rows as before; a query that names a state reads one partition only.

The live partitions carry only the indexes the grant, the sweep and the live pages read (their
names unchanged); the history partitions carry the ones activity, retention, verify and the run
layer read. The live partitions stay as small as what is live, however long the history grows,
and the grant's index reads and writes stay in them.

What partitioning costs, said once here:
- A unique constraint on the parent must name the partition key, so each partition has its
  own: its primary key on `id`, and the slot's one-to-one with its entry. Across the two they
  hold because a row only ever moves, never copies, and an id is made once (a slot's by the
  engine, an entry's by the identity, whose counter this migration carries over both ways,
  past ids of rows deleted since). queue_position_unique likewise (positions come from a
  counter and are never reused).
- limits_slot.queue_entry_id can no longer be a foreign key (a foreign key needs a unique
  target); its index stays, and `limits verify` checks what the constraints held (check d:
  a slot's entry is one of its limit's queue, and no other slot names it).
- Django's migration state still describes one table of each (models.py, for SQLite): a later
  migration that alters one of these indexes or constraints on PostgreSQL writes its own SQL
  against the partitions, as this one does.
- The copy holds both tables for its length: 16.5 s for 1,000,000 + 1,000,000 history rows on
  the bench machine (docs/operations.md, upgrading).

What it bought, measured against the one-table shape in the same sittings (docs/performance.md,
"Live state apart from history"): no change in speed this machine can tell from its noise.

Every live slot, queue position and history row is kept: the rows are copied into the new
table, in one transaction (a migration test puts rows in every state through it).

SQLite keeps one table of each: the embedded default's sizes do not need the split.

Reverse: one table of each again, the rows kept."""

from django.db import migrations

from limits import sql

ENGINE_SQL_FINGERPRINT = "9c55690606801ea3ef61c040539258ad641f1eb4fd86d34285f49c2a6e76ec13"

# Index name -> definition, the indexes of migration 0033's schema on the partition that reads
# them. On a live partition every row is live, so its indexes need no `state` predicate (and serve
# a query that names no state, e.g. by limit alone); they keep only what tells rows apart there.
SLOT_LIVE_INDEXES = {
    "slot_live_by_limit": "(limit_id, state, granted_at)",
    "slot_live_by_key": "(limit_id, key, granted_at) WHERE key <> ''",
    "slot_live_by_run": "(run_id)",
    "slot_live_whole_run": "(limit_id) WHERE request LIKE '%:start'",
    "slot_busy_expiry": "(expires_at) WHERE state = 'busy'",
    "slot_reservation_expiry": "(reserved_until) WHERE state = 'reserved'",
}
SLOT_HISTORY_INDEXES = {
    "limits_slot_limit_id_40b7606f": "(limit_id)",
}
ENTRY_LIVE_INDEXES = {
    "queue_waiting_deadline": "(deadline)",
    "queue_waiting_run": "(run_id)",
    "queue_waiting_by_key": "(limit_id, key, position) WHERE key <> ''",
    "queue_waiting_passed_over": "(limit_id, position) WHERE passed_over_at IS NOT NULL",
    "queue_waiting_groups": "(limit_id, position) WHERE group_size > 1",
}
ENTRY_HISTORY_INDEXES = {
    "queue_history_age": "(finished_at) WHERE state <> 'waiting'",
}
# One table again (reverse): the predicates of migration 0033's schema.
SINGLE_INDEXES = {
    "limits_slot": {
        "slot_live_by_limit": "(limit_id, state, granted_at) WHERE state IN ('reserved', 'busy')",
        "slot_live_by_key": "(limit_id, key, granted_at) WHERE state IN ('reserved', 'busy') AND key <> ''",
        "slot_live_by_run": "(run_id) WHERE state IN ('reserved', 'busy')",
        "slot_live_whole_run": "(limit_id) WHERE state IN ('reserved', 'busy') AND request LIKE '%:start'",
        "slot_busy_expiry": "(expires_at) WHERE state = 'busy'",
        "slot_reservation_expiry": "(reserved_until) WHERE state = 'reserved'",
        "slot_history_age": "(freed_at) WHERE freed_at IS NOT NULL",
    }
    | SLOT_HISTORY_INDEXES,
    "limits_queueentry": {
        "queue_waiting_order": "(limit_id, position) WHERE state = 'waiting'",
        "queue_waiting_deadline": "(deadline) WHERE state = 'waiting'",
        "queue_waiting_run": "(run_id) WHERE state = 'waiting'",
        "queue_waiting_by_key": "(limit_id, key, position) WHERE state = 'waiting' AND key <> ''",
        "queue_waiting_passed_over": "(limit_id, position) WHERE state = 'waiting' AND passed_over_at IS NOT NULL",
        "queue_waiting_groups": "(limit_id, position) WHERE state = 'waiting' AND group_size > 1",
    }
    | ENTRY_HISTORY_INDEXES,
}


def _partition(table: str, live_states: tuple[str, ...]) -> str:
    """The statements that rebuild `table` partitioned by state, its rows kept."""
    states = ", ".join(f"'{state}'" for state in live_states)
    return f"""
    ALTER TABLE {table} RENAME TO {table}_single;
    CREATE TABLE {table} (LIKE {table}_single INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
        PARTITION BY LIST (state);
    CREATE TABLE {table}_live PARTITION OF {table} FOR VALUES IN ({states});
    CREATE TABLE {table}_history PARTITION OF {table} DEFAULT;
    INSERT INTO {table} SELECT * FROM {table}_single;
    """


def _identity_kept(table: str, old: str) -> str:
    """Move `table`'s new identity on past every id `old`'s ever made (its counter, which may be
    past the newest row left: forget and the demo's reset delete rows), so no id is made twice."""
    return f"""
    DO $identity$
    DECLARE
        made bigint;  -- the last id the old counter handed out (is_called false: none yet at last_value)
    BEGIN
        EXECUTE format(
            'SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
            pg_get_serial_sequence('{old}', 'id')
        ) INTO made;
        PERFORM setval(
            pg_get_serial_sequence('{table}', 'id'),
            greatest(made, (SELECT coalesce(max(id), 0) FROM {table})) + 1,
            false
        );
    END
    $identity$;
    """


FORWARD = (
    # the slots first: they point at the entries
    _partition("limits_slot", ("reserved", "busy"))
    + "DROP TABLE limits_slot_single;"
    + _partition("limits_queueentry", ("waiting",))
    + _identity_kept("limits_queueentry", "limits_queueentry_single")
    + """
    DROP TABLE limits_queueentry_single;
    -- Each partition's own primary key on id alone (a parent's would have to include state); an id
    -- is unique across the two as a row only moves. The slot's one-to-one with its entry likewise.
    ALTER TABLE limits_slot_live ADD CONSTRAINT limits_slot_live_pkey PRIMARY KEY (id);
    ALTER TABLE limits_slot_history ADD CONSTRAINT limits_slot_history_pkey PRIMARY KEY (id);
    ALTER TABLE limits_queueentry_live ADD CONSTRAINT limits_queueentry_live_pkey PRIMARY KEY (id);
    ALTER TABLE limits_queueentry_history ADD CONSTRAINT limits_queueentry_history_pkey PRIMARY KEY (id);
    CREATE UNIQUE INDEX limits_slot_live_queue_entry_id_key ON limits_slot_live (queue_entry_id);
    CREATE UNIQUE INDEX limits_slot_history_queue_entry_id_key ON limits_slot_history (queue_entry_id);
    ALTER TABLE limits_slot ADD CONSTRAINT limits_slot_limit_id_40b7606f_fk_limits_limit_id
        FOREIGN KEY (limit_id) REFERENCES limits_limit (id) DEFERRABLE INITIALLY DEFERRED;
    ALTER TABLE limits_queueentry ADD CONSTRAINT limits_queueentry_limit_id_092451ec_fk_limits_limit_id
        FOREIGN KEY (limit_id) REFERENCES limits_limit (id) DEFERRABLE INITIALLY DEFERRED;
    -- a request's live rows: slot_one_live_per_request and queue_one_waiting_entry_per_request
    CREATE INDEX slot_request ON limits_slot_history (request);
    CREATE INDEX queue_request ON limits_queueentry_history (request);
    -- freed_at is set as a slot leaves the live partition: the index is on the parent, so that
    -- a reader of frees that names no state (activity, insights, retention) reads it on both
    -- partitions (the live one's is empty); the history partition's keeps the name plans show.
    CREATE INDEX slot_freed_at ON ONLY limits_slot (freed_at) WHERE freed_at IS NOT NULL;
    CREATE INDEX slot_history_age ON limits_slot_history (freed_at) WHERE freed_at IS NOT NULL;
    CREATE INDEX slot_history_age_live ON limits_slot_live (freed_at) WHERE freed_at IS NOT NULL;
    ALTER INDEX slot_freed_at ATTACH PARTITION slot_history_age;
    ALTER INDEX slot_freed_at ATTACH PARTITION slot_history_age_live;
    CREATE UNIQUE INDEX slot_one_live_per_request ON limits_slot_live (request, limit_id);
    CREATE UNIQUE INDEX queue_one_waiting_entry_per_request ON limits_queueentry_live (request, limit_id);
    CREATE UNIQUE INDEX queue_waiting_order ON limits_queueentry_live (limit_id, position);
    CREATE UNIQUE INDEX queue_position_unique ON limits_queueentry_history (limit_id, position);
    """
    + "".join(
        f"CREATE INDEX {name} ON {table} {definition};\n"
        for table, indexes in (
            ("limits_slot_live", SLOT_LIVE_INDEXES),
            ("limits_slot_history", SLOT_HISTORY_INDEXES),
            ("limits_queueentry_live", ENTRY_LIVE_INDEXES),
            ("limits_queueentry_history", ENTRY_HISTORY_INDEXES),
        )
        for name, definition in indexes.items()
    )
    + "ANALYZE limits_slot; ANALYZE limits_queueentry;"
)


def _single(table: str) -> str:
    return f"""
    ALTER TABLE {table} RENAME TO {table}_parts;
    CREATE TABLE {table} (LIKE {table}_parts INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY);
    INSERT INTO {table} SELECT * FROM {table}_parts;
    """


BACKWARD = (
    _single("limits_queueentry")
    + _identity_kept("limits_queueentry", "limits_queueentry_parts")
    + "DROP TABLE limits_queueentry_parts;"
    + _single("limits_slot")
    + "DROP TABLE limits_slot_parts;"
    + """
    ALTER TABLE limits_queueentry ADD CONSTRAINT limits_queueentry_pkey PRIMARY KEY (id);
    ALTER TABLE limits_slot ADD CONSTRAINT limits_slot_pkey PRIMARY KEY (id);
    ALTER TABLE limits_slot ADD CONSTRAINT limits_slot_queue_entry_id_key UNIQUE (queue_entry_id);
    ALTER TABLE limits_queueentry ADD CONSTRAINT queue_position_unique UNIQUE (limit_id, position);
    ALTER TABLE limits_slot ADD CONSTRAINT limits_slot_limit_id_40b7606f_fk_limits_limit_id
        FOREIGN KEY (limit_id) REFERENCES limits_limit (id) DEFERRABLE INITIALLY DEFERRED;
    ALTER TABLE limits_queueentry ADD CONSTRAINT limits_queueentry_limit_id_092451ec_fk_limits_limit_id
        FOREIGN KEY (limit_id) REFERENCES limits_limit (id) DEFERRABLE INITIALLY DEFERRED;
    ALTER TABLE limits_slot ADD CONSTRAINT limits_slot_queue_entry_id_ae310c78_fk_limits_queueentry_id
        FOREIGN KEY (queue_entry_id) REFERENCES limits_queueentry (id) DEFERRABLE INITIALLY DEFERRED;
    CREATE INDEX slot_request ON limits_slot (request);
    CREATE INDEX queue_request ON limits_queueentry (request);
    CREATE UNIQUE INDEX slot_one_live_per_request ON limits_slot (request, limit_id)
        WHERE state IN ('reserved', 'busy');
    CREATE UNIQUE INDEX queue_one_waiting_entry_per_request ON limits_queueentry (request, limit_id)
        WHERE state = 'waiting';
    """
    + "".join(
        f"CREATE INDEX {name} ON {table} {definition};\n"
        for table, indexes in SINGLE_INDEXES.items()
        for name, definition in indexes.items()
    )
)


def forward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        # the functions take the tables' row types: dropped first, installed on the new tables
        schema_editor.execute(sql.DROP_ENGINE_FUNCTIONS, params=None)
        schema_editor.execute(FORWARD, params=None)
        sql.install(schema_editor)


def backward(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(sql.DROP_ENGINE_FUNCTIONS, params=None)
        schema_editor.execute(BACKWARD, params=None)
        sql.install(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("limits", "0033_key_heads_and_owed_partners"),
    ]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
