-- The engine's hot operations as PostgreSQL functions, one round trip each: the CURRENT
-- definition of every function limits installs (limits.services calls them on PostgreSQL; see its
-- docstring). Each takes the limit's row lock inside the server, so the lock is held for the
-- statements and the commit only, never across a round trip to Python. A case a function does not
-- handle (an unknown or undeclared limit, a late confirm, releasing a reservation, free capacity
-- beside waiting runs, an earlier outcome of the request other than a live slot, a limit that is
-- not plain or a slot with a key or a group: SPEC 9, 10) answers 'slow' (limits.engine.server: NOT_HANDLED_HERE)
-- before it changes anything, and the service goes on in Python in the same transaction.
--
-- A function that answers 'slow' after it took a limit's row lock gives the lock back first: the
-- lock is taken inside a BEGIN ... EXCEPTION block (a subtransaction), and 'slow' is raised out of
-- it (SQLSTATE LMSLW), which rolls the subtransaction and its row locks back. The Python rules
-- then lock every limit they need in id order (limits.engine.keys.lock); a lock kept from here
-- could be out of that order, and two such transactions deadlock (found by the chaos run). The
-- writes of a handled case happen inside that same block: a row locked by a subtransaction and
-- written by its parent gets a MultiXact as its xmax on every write (docs/performance.md measured
-- that shape slower on the durable FIFO reference); locked and written by the one subtransaction,
-- it keeps a plain xmax.
--
-- Limit rows are locked FOR NO KEY UPDATE, never FOR UPDATE: the foreign key checks at COMMIT
-- (KEY SHARE on the referenced limit) must never wait for them, or a commit that wrote rows for
-- limits it does not hold (the sweep's insights rollup) deadlocks with these (migration 0015).
--
-- Every function that reads or writes the tables runs with enable_seqscan = off (migration 0016):
-- PL/pgSQL caches a generic plan per session, and one made while the tables held a page would
-- scan the whole queue or slot history for as long as the connection lives. Each statement here
-- has an index to use. tests/services/test_sql_file.py fails on such a function without it.
--
-- And with enable_bitmapscan = off (migration 0018): the probes of the live slots and the
-- waiting entries go through partial indexes (state in 'busy', 'reserved'; state = 'waiting')
-- whose entries die at every change of state. A plain index scan marks the dead entries it meets
-- (LP_DEAD), so the next probe skips them; a bitmap scan never does, and between two vacuums each
-- probe walked every entry that died since the last one: one uncontended client lost a third of
-- its cycles in 30 s (211, 160, 140 cycles/s; 269, 273, 278 with plain index scans;
-- docs/performance.md, "Dead index entries").
--
-- Times come from the database's clock, the box's one clock (studio/plumbing/clock.py): the caller
-- passes p_now NULL, and limits_clock reads clock_timestamp() after the function took the limit's
-- lock, so no worker's clock ever stamps a grant, an expiry or a deadline. A function writes
-- limits_clock(p_now, limits_limit.last_event_at): one limit's timestamps never go back in lock
-- order (limits.verify relies on it). Tests that move the clock with time_machine (the test setting
-- STACKBONE_CLOCK = "process") pass their time as p_now instead.
--
-- They name tables and columns directly: a migration that renames one must replace them too (the
-- PostgreSQL test suite fails at once if it does not). On SQLite the services run every rule in
-- Python (writers serialize there anyway).
--
-- How a change is made (limits/sql/__init__.py says more): edit the function here, then add a
-- migration that calls limits.sql.install (as limits/migrations/0009_engine_sql_file.py does).
-- tests/services/test_sql_file.py fails while the migrated database differs from this file.
-- Only CREATE OR REPLACE FUNCTION statements belong here: limits.sql.install drops every
-- limits_ function of the schema before it runs this file.

-- The rules every function below shares, one home each in SQL. Each mirrors its home in Python,
-- named beside it; tests/services/test_sql_file.py holds each pair to the same answers. Plain
-- SQL expressions the planner inlines where they are called.

-- Limit.capacity: an override wins over the declared value until it is reset (SPEC 5.2).
CREATE OR REPLACE FUNCTION limits_capacity(l limits_limit) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(l.capacity_override, l.declared_capacity) $$;

-- Limit.max_hold_ms, as an interval: a slot's expiry is its grant + this (SPEC 4.3).
CREATE OR REPLACE FUNCTION limits_max_hold(l limits_limit) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(l.max_hold_override_ms, l.declared_max_hold_ms) * interval '1 millisecond'
$$;

-- Limit.is_plain: no per_key in force and no keyed or group entry waiting. Only a plain limit's
-- capacity is handed out here; the rest is limits.engine.keys in Python (SPEC 9, 10).
-- PL/pgSQL, not SQL: an SQL function's body is checked at creation, and these columns come with
-- limits/0011, after the first migration that installs this file (limits/sql/__init__.py).
CREATE OR REPLACE FUNCTION limits_is_plain(l limits_limit) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN l.declared_per_key IS NULL AND l.per_key_override IS NULL
           AND l.keyed_waiting_count = 0 AND l.group_waiting_count = 0;
END
$$;

-- limits.engine.keys.Pools.has_room: the key's pool (its own size, else the limit's per_key) has
-- room; '' is the no-key pool, whose figures are the limit's counters minus the keyed ones.
CREATE OR REPLACE FUNCTION limits_pool_room(l limits_limit, p_key text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_override integer;
    v_used integer := 0;
BEGIN
    IF p_key = '' THEN
        RETURN l.declared_per_key IS NULL AND l.per_key_override IS NULL
            OR l.busy_count + l.reserved_count - l.keyed_busy_count - l.keyed_reserved_count
               < coalesce(l.per_key_override, l.declared_per_key);
    END IF;
    -- Variables, not a limits_limitkey row: that table comes with limits/0011 (see above).
    SELECT pool_override, busy_count + reserved_count INTO v_override, v_used
    FROM limits_limitkey WHERE limit_id = l.id AND key = p_key;
    IF coalesce(v_override, l.per_key_override, l.declared_per_key) IS NULL THEN
        RETURN true;
    END IF;
    RETURN coalesce(v_used, 0) < coalesce(v_override, l.per_key_override, l.declared_per_key);
END
$$;

-- limits.engine.rules.clock: a change to a locked limit is stamped with the database's clock
-- (p_now NULL; the process's time in tests), never before the limit's last change.
CREATE OR REPLACE FUNCTION limits_clock(p_now timestamptz, p_last timestamptz) RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$ SELECT greatest(coalesce(p_now, clock_timestamp()), p_last) $$;

-- limits.models.new_slot_id: 'slot_' and 32 hex digits.
CREATE OR REPLACE FUNCTION limits_new_slot_id() RETURNS text
LANGUAGE sql VOLATILE AS $$ SELECT 'slot_' || replace(gen_random_uuid()::text, '-', '') $$;

-- PL/pgSQL rather than SQL functions: their plans are cached per session (an SQL function with a
-- data-modifying CTE is planned again on every call: +0.3 ms per hand-off, measured).
CREATE OR REPLACE FUNCTION limits_time_out(p_limit bigint, p_now timestamptz) RETURNS text[]
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    result text[];
BEGIN
    WITH stale AS (
        UPDATE limits_queueentry SET state = 'timed_out', finished_at = p_now
        WHERE limit_id = p_limit AND state = 'waiting' AND deadline <= p_now
        RETURNING run_id, position
    )
    SELECT coalesce(array_agg(run_id ORDER BY position), '{}') INTO result FROM stale;
    RETURN result;
END
$$;

CREATE OR REPLACE FUNCTION limits_grant_heads(
    p_limit bigint, p_count integer, p_now timestamptz, p_reserved_until timestamptz, p_expires_at timestamptz
) RETURNS text[]
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    result text[];
BEGIN
    WITH heads AS (
        UPDATE limits_queueentry SET state = 'granted', finished_at = p_now
        WHERE id IN (
            SELECT id FROM limits_queueentry
            WHERE limit_id = p_limit AND state = 'waiting' ORDER BY position LIMIT p_count
        )
        RETURNING id, run_id, request, label, position
    ), slots AS (
        INSERT INTO limits_slot (
            id, limit_id, run_id, request, label, state, queue_entry_id, granted_at, reserved_until, expires_at,
            freed_by
        )
        SELECT limits_new_slot_id(), p_limit, run_id, request, label, 'reserved',
               id, p_now, p_reserved_until, p_expires_at, ''
        FROM heads
    )
    SELECT coalesce(array_agg(run_id ORDER BY position), '{}') INTO result FROM heads;
    RETURN result;
END
$$;

-- Hand free capacity to the queue (SPEC 3.3-3.4): time out the waits past their deadline, then
-- reserve a slot for each run at the head, in queue order, while busy + reserved < capacity.
-- The caller holds the limit's lock and has written its counters; this writes them again.
CREATE OR REPLACE FUNCTION limits_settle(
    p_limit bigint, p_now timestamptz, p_reservation_ms bigint, OUT timed_out text[], OUT granted text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    l limits_limit;
    v_free integer;
BEGIN
    timed_out := '{}';
    granted := '{}';
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    v_free := limits_capacity(l) - l.busy_count - l.reserved_count;
    IF l.waiting_count = 0 OR v_free <= 0 THEN
        RETURN;
    END IF;
    timed_out := limits_time_out(p_limit, p_now);
    IF l.waiting_count > cardinality(timed_out) THEN
        granted := limits_grant_heads(
            p_limit,
            least(v_free, l.waiting_count - cardinality(timed_out)),
            p_now,
            p_now + p_reservation_ms * interval '1 millisecond',
            p_now + limits_max_hold(l)
        );
    END IF;
    UPDATE limits_limit
    SET waiting_count = waiting_count - cardinality(timed_out) - cardinality(granted),
        reserved_count = reserved_count + cardinality(granted)
    WHERE id = p_limit;
END
$$;

-- Confirm a reservation in time: 'busy'; not reserved (any more), or unknown: 'gone'; late: 'slow'.
CREATE OR REPLACE FUNCTION limits_confirm(p_slot text, p_now timestamptz) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_limit bigint;
    v_now timestamptz;
    v_state text;
    v_reserved_until timestamptz;
    v_key text;
    v_group smallint;
BEGIN
    SELECT limit_id, key, group_size INTO v_limit, v_key, v_group FROM limits_slot WHERE id = p_slot;
    IF NOT FOUND THEN
        RETURN 'gone';
    END IF;
    IF v_group > 1 THEN
        RETURN 'slow';  -- a group is confirmed together: the Python rules
    END IF;
    BEGIN
        SELECT limits_clock(p_now, last_event_at) INTO v_now FROM limits_limit WHERE id = v_limit FOR NO KEY UPDATE;
        SELECT state, reserved_until INTO v_state, v_reserved_until FROM limits_slot WHERE id = p_slot;
        IF v_state = 'reserved' AND v_now > v_reserved_until THEN
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';  -- late: the Python rules lapse it
        END IF;
        IF v_state <> 'reserved' THEN
            RETURN 'gone';
        END IF;
        UPDATE limits_slot SET state = 'busy', confirmed_at = v_now WHERE id = p_slot;
        UPDATE limits_limit
        SET reserved_count = reserved_count - 1, busy_count = busy_count + 1, last_event_at = v_now,
            keyed_reserved_count = keyed_reserved_count - (v_key <> '')::integer,
            keyed_busy_count = keyed_busy_count + (v_key <> '')::integer
        WHERE id = v_limit;
        IF v_key <> '' THEN
            UPDATE limits_limitkey SET reserved_count = reserved_count - 1, busy_count = busy_count + 1
            WHERE limit_id = v_limit AND key = v_key;
        END IF;
        RETURN 'busy';
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        RETURN 'slow';
    END;
END
$$;

-- Release a busy slot and hand the capacity to the queue: 'released' with the runs to wake;
-- already free or unknown: 'gone'; a reservation: 'slow'.
CREATE OR REPLACE FUNCTION limits_release(
    p_slot text, p_now timestamptz, p_reservation_ms bigint, OUT outcome text, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_limit bigint;
    v_now timestamptz;
    v_state text;
    v_key text;
    l limits_limit;
    settled record;
BEGIN
    woken := '{}';
    SELECT limit_id INTO v_limit FROM limits_slot WHERE id = p_slot;
    IF NOT FOUND THEN
        outcome := 'gone';
        RETURN;
    END IF;
    BEGIN
        SELECT * INTO l FROM limits_limit WHERE id = v_limit FOR NO KEY UPDATE;
        SELECT state, key INTO v_state, v_key FROM limits_slot WHERE id = p_slot;
        IF v_state = 'reserved' OR (l.waiting_count > 0 AND NOT limits_is_plain(l))
           OR EXISTS (
               SELECT 1 FROM limits_slot
               WHERE limit_id = v_limit AND state = 'reserved' AND group_size > 1
           ) THEN
            -- a reservation, freed capacity that goes by the rules of keys and groups, or a
            -- group reserved from this limit (Python settles its other limits with it)
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';
        END IF;
        v_now := limits_clock(p_now, l.last_event_at);
        IF v_state <> 'busy' THEN
            outcome := 'gone';
            RETURN;
        END IF;
        UPDATE limits_slot SET state = 'released', freed_at = v_now, freed_by = '' WHERE id = p_slot;
        UPDATE limits_limit
        SET busy_count = busy_count - 1, keyed_busy_count = keyed_busy_count - (v_key <> '')::integer,
            last_event_at = v_now
        WHERE id = v_limit;
        IF v_key <> '' THEN
            UPDATE limits_limitkey SET busy_count = busy_count - 1 WHERE limit_id = v_limit AND key = v_key;
        END IF;
        IF l.waiting_count > 0 THEN  -- the row is locked: nobody joined since it was read
            SELECT * INTO settled FROM limits_settle(v_limit, v_now, p_reservation_ms);
            woken := settled.timed_out || settled.granted;
        END IF;
        outcome := 'released';
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        outcome := 'slow';
        RETURN;
    END;
END
$$;

-- Acquire (SPEC 2.2-2.4, 3.1): a request already holding a live slot answers it (confirming a
-- reservation in time); a new request on a declared limit is granted a busy slot when nobody
-- waits and a slot is free, or joins the end of the queue when every slot is taken.
CREATE OR REPLACE FUNCTION limits_acquire(
    p_name text, p_run text, p_request text, p_label text, p_timeout_ms bigint, p_now timestamptz,
    OUT outcome text, OUT limit_name text, OUT slot_id text, OUT deadline timestamptz
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    l limits_limit;
    v_now timestamptz;
    v_state text;
BEGIN
    SELECT s.id, s.state, m.name INTO slot_id, v_state, limit_name
    FROM limits_slot s JOIN limits_limit m ON m.id = s.limit_id
    WHERE s.request = p_request AND s.state IN ('busy', 'reserved');
    IF FOUND THEN
        outcome := CASE WHEN v_state = 'busy' THEN 'busy' ELSE limits_confirm(slot_id, p_now) END;
        IF outcome <> 'busy' THEN
            outcome := 'slow';
        END IF;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request)
       OR EXISTS (SELECT 1 FROM limits_queueentry WHERE request = p_request) THEN
        outcome := 'slow';
        RETURN;
    END IF;
    BEGIN
        SELECT * INTO l FROM limits_limit WHERE name = p_name FOR NO KEY UPDATE;
        IF NOT FOUND OR NOT l.declared OR NOT limits_is_plain(l)
           OR (l.waiting_count > 0
               AND l.busy_count + l.reserved_count < limits_capacity(l)) THEN
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';
        END IF;
        limit_name := l.name;
        v_now := limits_clock(p_now, l.last_event_at);
        IF l.busy_count + l.reserved_count < limits_capacity(l) THEN
            slot_id := limits_new_slot_id();
            INSERT INTO limits_slot (
                id, limit_id, run_id, request, label, state, granted_at, confirmed_at, expires_at, freed_by
            ) VALUES (
                slot_id, l.id, p_run, p_request, p_label, 'busy', v_now, v_now,
                v_now + limits_max_hold(l), ''
            );
            UPDATE limits_limit SET busy_count = busy_count + 1, last_event_at = v_now WHERE id = l.id;
            outcome := 'busy';
            RETURN;
        END IF;
        deadline := v_now + p_timeout_ms * interval '1 millisecond';
        INSERT INTO limits_queueentry (
            limit_id, run_id, request, label, position, state, enqueued_at, deadline, timeout_ms
        ) VALUES (l.id, p_run, p_request, p_label, l.next_position, 'waiting', v_now, deadline, p_timeout_ms);
        UPDATE limits_limit
        SET waiting_count = waiting_count + 1, next_position = next_position + 1, last_event_at = v_now
        WHERE id = l.id;
        outcome := 'waiting';
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        outcome := 'slow';
        RETURN;
    END;
END
$$;

-- Acquire with a key, or one slot of each of several limits (SPEC 9, 10), when the answer needs
-- no queue: a new request, every limit declared, nobody waiting on any of them, and each with
-- room in its total and in the key's pool (limits_pool_room). Then busy slots of all of them at
-- once, in one statement, with the pool counters; the slot ids come back in the order of
-- p_names. Anything else answers 'slow' before changing anything: the rules of
-- limits.engine.keys (joining the queues, the grant, owed runs) take over in Python.
CREATE OR REPLACE FUNCTION limits_acquire_group(
    p_names text[], p_run text, p_request text, p_label text, p_key text, p_now timestamptz,
    OUT outcome text, OUT slot_ids text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    l limits_limit;
    v_now timestamptz := p_now;
    v_count integer := 0;
    v_slot text;
    v_size integer := cardinality(p_names);
    i integer;
BEGIN
    outcome := 'slow';
    slot_ids := '{}';
    IF EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request)
       OR EXISTS (SELECT 1 FROM limits_queueentry WHERE request = p_request) THEN
        RETURN;
    END IF;
    BEGIN
        FOR l IN SELECT * FROM limits_limit WHERE name = ANY (p_names) ORDER BY id FOR NO KEY UPDATE LOOP
            IF NOT l.declared OR l.waiting_count > 0
               OR l.busy_count + l.reserved_count >= limits_capacity(l)
               OR NOT limits_pool_room(l, p_key) THEN
                RAISE EXCEPTION USING ERRCODE = 'LMSLW';
            END IF;
            v_now := limits_clock(v_now, l.last_event_at);
            v_count := v_count + 1;
        END LOOP;
        IF v_count <> v_size THEN
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';  -- an unknown name (or a repeated one): Python says which
        END IF;
        FOR i IN 1 .. v_size LOOP
            SELECT * INTO l FROM limits_limit WHERE name = p_names[i];
            v_slot := limits_new_slot_id();
            INSERT INTO limits_slot (
                id, limit_id, run_id, request, label, key, group_size, state, granted_at, confirmed_at,
                expires_at, freed_by
            ) VALUES (
                v_slot, l.id, p_run, p_request, p_label, p_key, v_size, 'busy', v_now, v_now,
                v_now + limits_max_hold(l), ''
            );
            UPDATE limits_limit
            SET busy_count = busy_count + 1, keyed_busy_count = keyed_busy_count + (p_key <> '')::integer,
                last_event_at = v_now
            WHERE id = l.id;
            IF p_key <> '' THEN
                INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at)
                VALUES (l.id, p_key, 1, 0, 0, v_now)
                ON CONFLICT (limit_id, key) DO UPDATE SET busy_count = limits_limitkey.busy_count + 1;
            END IF;
            slot_ids := slot_ids || v_slot;
        END LOOP;
        outcome := 'busy';
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        RETURN;  -- outcome is 'slow'
    END;
END
$$;
