-- The engine's hot operations as PostgreSQL functions, one round trip each: the CURRENT
-- definition of every function limits installs (limits.services calls them on PostgreSQL; see its
-- docstring). Each takes the limit's row lock inside the server, so the lock is held for the
-- statements and the commit only, never across a round trip to Python. Every case of every
-- operation is handled here (keys, groups, owed runs, confirm, lapse, requeue, a release handing
-- over to a group, an earlier request's outcome, operators' changes, deploys, the sweep; an
-- unknown or undeclared limit is answered as such, and Python words the error).
-- limits_acquire_group answers 'slow' (limits.engine.server: NOT_HANDLED_HERE) for a list of
-- names that repeats a limit, which limits.engine.slots refuses before the call, before it
-- changes anything. Inside this file a function may answer 'slow' to its caller here
-- (limits_confirm and limits_confirm_group to a caller that lapses; limits_acquire's non-plain
-- case goes on in limits_acquire_group).
--
-- A function that answers 'slow' or refuses after it took a limit's row lock gives the lock back
-- first: the
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
-- Times come from the database's clock, the box's one clock (stackbone/plumbing/clock.py): the caller
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
-- Only CREATE OR REPLACE FUNCTION statements belong here (and the two settings of
-- check_function_bodies around the shared rules below): limits.sql.install drops every limits_
-- function of the schema before it runs this file.

-- The rules every function below shares, one home each in SQL. Each mirrors its home in Python,
-- named beside it; tests/services/test_sql_file.py holds each pair to the same answers.
--
-- Most are SQL functions of one expression (LANGUAGE sql, one SELECT with no FROM, no SET
-- clause), which the planner inlines into a plan it makes once: a PL/pgSQL expression (`x :=
-- ...`, `IF ...` without a table) or a query planned once for the session. There they cost what
-- their expression costs. Where a statement is planned again at each execution (PostgreSQL makes a
-- custom plan for a query whose parameters it can fold, e.g. limits_acquire's settle check,
-- limits_grant's candidates), an SQL function is parsed again at each planning, or, given
-- constant arguments, run through the SQL-function executor: there a PL/pgSQL function, compiled
-- once per session, is cheaper. So limits_room, limits_is_plain and limits_is_fair, which those
-- statements call, stay PL/pgSQL, their bodies spelled with the SQL ones; the SQL ones are called
-- only in expressions, in queries planned once, and in operators' and deploys' functions
-- (docs/performance.md, "One home per rule in engine.sql").
--
-- check_function_bodies is off while the SQL ones are created, for this transaction only: an SQL
-- function's body is checked at creation, this file installs from limits/0009 on
-- (limits/sql/__init__.py), and these read columns that later migrations add (per_key with
-- limits/0011, share with 0031, burst with the box's). Their bodies are parsed where they are
-- first inlined; tests/services/test_sql_file.py calls each.
SET LOCAL check_function_bodies = off;

-- Limit.capacity: an override wins over the declared value until it is reset (SPEC 5.2).
CREATE OR REPLACE FUNCTION limits_capacity(l limits_limit) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(l.capacity_override, l.declared_capacity) $$;

-- Limit.per_key: each key's pool size in force (SPEC 9.1, 9.4), NULL when the total alone
-- applies; the box's base (SPEC 12.1, 12.5).
CREATE OR REPLACE FUNCTION limits_per_key(l limits_limit) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(l.per_key_override, l.declared_per_key) $$;

-- keys.Pools.size: a key's pool size in force, its own (p_pool_override, the key's
-- LimitKey.pool_override; NULL for none, and for the no-key pool) else the limit's per_key.
CREATE OR REPLACE FUNCTION limits_pool_size(l limits_limit, p_pool_override integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(p_pool_override, limits_per_key(l)) $$;

-- Limit.share (SPEC 13.1): 'fifo' or 'fair', an operator's choice ('' for none) else the declared one.
CREATE OR REPLACE FUNCTION limits_share(l limits_limit) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(nullif(l.share_override, ''), l.declared_share) $$;

-- Limit.on_full (SPEC 14.1): what an acquisition that cannot be granted at once does, 'wait',
-- 'skip' or 'replace', an operator's choice ('' for none) else the declared one.
CREATE OR REPLACE FUNCTION limits_on_full(l limits_limit) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(nullif(l.on_full_override, ''), l.declared_on_full) $$;

-- config.strictest_on_full (SPEC 14.7): the stricter of two on_full, skip before replace before
-- cancel_running (a workflow's own bound's, 14.4) before wait.
CREATE OR REPLACE FUNCTION limits_stricter_on_full(p_a text, p_b text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN array_position(ARRAY['skip', 'replace', 'cancel_running', 'wait'], p_b)
                     < array_position(ARRAY['skip', 'replace', 'cancel_running', 'wait'], p_a) THEN p_b ELSE p_a END
$$;

-- Limit.max_waiting, Limit.max_waiting_per_key (SPEC 14.5): the caps on its queue, NULL for none.
CREATE OR REPLACE FUNCTION limits_max_waiting(l limits_limit) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(l.max_waiting_override, l.declared_max_waiting) $$;

CREATE OR REPLACE FUNCTION limits_max_waiting_per_key(l limits_limit) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(l.max_waiting_per_key_override, l.declared_max_waiting_per_key) $$;

-- Limit.max_hold_ms, as an interval: a slot's expiry is its grant + this (SPEC 4.3).
CREATE OR REPLACE FUNCTION limits_max_hold(l limits_limit) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(l.max_hold_override_ms, l.declared_max_hold_ms) * interval '1 millisecond'
$$;

-- config.MIN_CAPACITY and config.MAX_CAPACITY: the range of a capacity, a per_key's floor, and
-- the box's ceiling's cap.
CREATE OR REPLACE FUNCTION limits_min_capacity() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 1 $$;

CREATE OR REPLACE FUNCTION limits_max_capacity() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 100000 $$;

-- Limit.burst: the box's burst factor in force (SPEC 12.1, 12.5).
CREATE OR REPLACE FUNCTION limits_burst(l limits_limit) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(l.burst_override, l.declared_burst) $$;

-- config.box_ceiling: floor(base x burst), the runs the box executes at once (SPEC 12.2).
CREATE OR REPLACE FUNCTION limits_box_ceiling(p_base integer, p_burst double precision) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT floor(p_base * p_burst + 1e-9)::bigint $$;

-- python_operators._keep_box_capacity: the box's capacity_override, its ceiling from the base and
-- burst in force while an operator overrides either (SPEC 12.5), else NULL (the declared ceiling).
CREATE OR REPLACE FUNCTION limits_box_override(l limits_limit) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN l.per_key_override IS NOT NULL OR l.burst_override IS NOT NULL
                THEN limits_box_ceiling(limits_per_key(l), limits_burst(l)) END
$$;

-- full.replaceable (SPEC 14.3, 14.7): the requests a new acquisition (p_request) of the limits
-- p_ids, each with its key pool p_keys[i] ('' the runs without a key), replaces: every other
-- request waiting for exactly these limits (the same group size), with the same key in each; a
-- run holding a slot waits for nothing. Oldest first in the first limit's queue. A set-returning
-- SQL function, STABLE, with no SET clause: the planner inlines it into the query that reads it
-- (limits_acquire_group's replace, before and after it joins).
CREATE OR REPLACE FUNCTION limits_replaceable(p_ids bigint[], p_keys text[], p_request text) RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT r.request FROM (
        SELECT e.request, e.position FROM limits_queueentry e  -- a key's entries: queue_waiting_by_key
        WHERE p_keys[1] <> '' AND e.limit_id = p_ids[1] AND e.key = p_keys[1] AND e.key <> ''
          AND e.state = 'waiting' AND e.group_size = cardinality(p_ids) AND e.request <> p_request
        UNION ALL
        SELECT e.request, e.position FROM limits_queueentry e
        WHERE p_keys[1] = '' AND e.limit_id = p_ids[1] AND e.key = ''
          AND e.state = 'waiting' AND e.group_size = cardinality(p_ids) AND e.request <> p_request
    ) AS r
    WHERE NOT EXISTS (  -- waiting in each other limit too, with its key there
        SELECT 1 FROM unnest(p_ids[2:], p_keys[2:]) AS m(limit_id, key)
        WHERE NOT EXISTS (
            SELECT 1 FROM limits_queueentry o
            WHERE o.request = r.request AND o.limit_id = m.limit_id AND o.key = m.key AND o.state = 'waiting'
        )
    )
    ORDER BY r.position
$$;

SET LOCAL check_function_bodies = on;

-- Limit.room: the slots a grant may hand out now: none while the limit is paused (SPEC 5.6), else
-- its capacity in force less busy and reserved (never below 0: a lowered capacity takes nothing
-- back, 5.3). Every grant below asks this, and only this.
CREATE OR REPLACE FUNCTION limits_room(l limits_limit) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF l.paused_at IS NOT NULL THEN
        RETURN 0;
    END IF;
    RETURN greatest(limits_capacity(l) - l.busy_count - l.reserved_count, 0);
END
$$;

-- Limit.is_fair (SPEC 13.1): its capacity is shared fairly between keys.
CREATE OR REPLACE FUNCTION limits_is_fair(l limits_limit) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN limits_share(l) = 'fair';
END
$$;

-- Limit.is_plain: no per_key in force, no keyed or group entry waiting, and not fair (a fair limit
-- keeps turns). Only a plain limit's heads are granted set-based (limits_grant_heads); the rest is
-- the grant rules of limits.engine.keys (SPEC 9, 10, 13).
CREATE OR REPLACE FUNCTION limits_is_plain(l limits_limit) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN limits_per_key(l) IS NULL AND l.keyed_waiting_count = 0 AND l.group_waiting_count = 0
           AND limits_share(l) <> 'fair';
END
$$;

-- python_operators._box_text: the box's audit text, "base N, burst B, ceiling C", B a float8's own
-- text (the shortest that reads back as the same float, as config.burst_text writes it).
CREATE OR REPLACE FUNCTION limits_box_text(l limits_limit) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN format('base %s, burst %s, ceiling %s', limits_per_key(l), limits_burst(l)::text, limits_capacity(l));
END
$$;

-- limits.engine.keys.Pools.has_room: the key's pool (limits_pool_size) has room, or there is no
-- pool (no per_key in force, no size of its own); '' is the no-key pool, of the limit's per_key,
-- whose figures are the limit's counters minus the keyed ones.
CREATE OR REPLACE FUNCTION limits_pool_room(l limits_limit, p_key text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_override integer;
    v_used integer := 0;
BEGIN
    IF p_key = '' THEN
        RETURN limits_per_key(l) IS NULL
            OR l.busy_count + l.reserved_count - l.keyed_busy_count - l.keyed_reserved_count < limits_per_key(l);
    END IF;
    -- Variables, not a limits_limitkey row: PL/pgSQL checks a declared row type at creation, and
    -- that table comes with limits/0011, after the first migration that installs this file.
    SELECT pool_override, busy_count + reserved_count INTO v_override, v_used
    FROM limits_limitkey WHERE limit_id = l.id AND key = p_key;
    RETURN limits_pool_size(l, v_override) IS NULL OR coalesce(v_used, 0) < limits_pool_size(l, v_override);
END
$$;

-- full.queue_full (SPEC 14.5): 'queue_full' when the limit's queue holds max_waiting runs,
-- 'key_queue_full' when p_key's runs hold max_waiting_per_key of it ('' is the no-key runs'
-- share: the limit's counters minus the keyed ones), else NULL: one more may join.
CREATE OR REPLACE FUNCTION limits_queue_full(l limits_limit, p_key text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_waiting integer;
BEGIN
    IF l.waiting_count >= limits_max_waiting(l) THEN
        RETURN 'queue_full';
    END IF;
    IF limits_max_waiting_per_key(l) IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_key = '' THEN
        v_waiting := l.waiting_count - l.keyed_waiting_count;
    ELSE
        SELECT waiting_count INTO v_waiting FROM limits_limitkey WHERE limit_id = l.id AND key = p_key;
    END IF;
    RETURN CASE WHEN coalesce(v_waiting, 0) >= limits_max_waiting_per_key(l) THEN 'key_queue_full' END;
END
$$;

-- full.refusal (SPEC 14.2, 6.5): why an acquisition of l (p_key's pool) cannot be granted at once
-- now that the runs waiting have had their turn (limits_grant ran), as a results.REASONS code;
-- NULL when it can. Capacity held for an owed run (10.4) is not free for it.
CREATE OR REPLACE FUNCTION limits_refusal(
    l limits_limit, p_key text, p_request text, p_base integer, p_now timestamptz, p_owed_after_ms bigint
) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF l.paused_at IS NOT NULL THEN
        RETURN 'limit_paused';
    ELSIF limits_room(l) = 0 THEN
        RETURN CASE WHEN l.kind = 'box' THEN 'box_full' ELSE 'limit_full' END;
    ELSIF NOT limits_pool_room(l, p_key) THEN
        RETURN CASE WHEN l.kind = 'box' THEN 'workflow_at_base' ELSE 'key_pool_full' END;
    ELSIF NOT limits_whole_run_room(l, p_request, p_base) THEN
        RETURN 'whole_runs_at_base';
    ELSIF l.waiting_count > 0 AND limits_owed_position(l, p_now, p_owed_after_ms) IS NOT NULL THEN
        RETURN 'held_for_owed';
    END IF;
    RETURN NULL;
END
$$;

-- LimitKey.head (keys.Pools.save): the position of the key's oldest waiting entry after p_after
-- (every one by default: a canceller's entry in the front band, SPEC 14.4, has a position below 0),
-- NULL when none waits; `key <> ''` as written lets the planner use the partial index
-- queue_waiting_by_key.
CREATE OR REPLACE FUNCTION limits_key_head(p_limit bigint, p_key text, p_after bigint DEFAULT -9223372036854775808)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        SELECT h.position FROM limits_queueentry h
        WHERE h.limit_id = p_limit AND h.key = p_key AND h.key <> '' AND h.state = 'waiting'
          AND h.position > p_after
        ORDER BY h.position
        LIMIT 1
    );
END
$$;

-- The heads of the pools (p_limits[i], p_keys[i]) read again, after a statement took entries of
-- theirs out of the queue (a statement's own subqueries still see them waiting).
CREATE OR REPLACE FUNCTION limits_read_heads(p_limits bigint[], p_keys text[]) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
BEGIN
    IF p_limits IS NULL THEN
        RETURN;
    END IF;
    UPDATE limits_limitkey k SET head = limits_key_head(k.limit_id, k.key)
    FROM (SELECT DISTINCT * FROM unnest(p_limits, p_keys) AS u (limit_id, key)) c
    WHERE k.limit_id = c.limit_id AND k.key = c.key;
END
$$;

-- limits.engine.slots.tie_to_run (with_limit, SPEC 2.5): a busy slot of the run is freed when
-- the run ends. No limit's lock: the run marks its own slot. A slot freed while this waited for
-- its row has moved to the history partition (migration 0034), which PostgreSQL reports as a
-- serialization failure where one table had the row no longer match: not busy, so false.
CREATE OR REPLACE FUNCTION limits_tie_to_run(p_slot text, p_run text) RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
BEGIN
    UPDATE limits_slot SET ends_with_run = true WHERE id = p_slot AND run_id = p_run AND state = 'busy';
    RETURN FOUND;
EXCEPTION WHEN serialization_failure THEN
    -- again, on a fresh snapshot (READ COMMITTED): a slot moved to history is not busy (false);
    -- any other conflict is raised again
    UPDATE limits_slot SET ends_with_run = true WHERE id = p_slot AND run_id = p_run AND state = 'busy';
    RETURN FOUND;
END
$$;

-- keys.stride (SPEC 13.2): what one grant adds to a key's pass, 1 / weight of a turn in whole units
-- (keys.PASS_STRIDE, lcm(1..20)), so both engines add the same.
CREATE OR REPLACE FUNCTION limits_stride(p_weight integer) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT 232792560::bigint / p_weight $$;

-- keys.enter_turns (SPEC 13.2): a key of a fair limit that starts holding or waiting when it had
-- nothing held or waiting there enters the turns at the smallest pass among the keys holding or
-- waiting (0 if none): one probe of limitkey_active_pass. The caller holds the limit's lock and
-- calls this before it counts the key's new slot or entry; the key's row exists when p_key <> ''.
CREATE OR REPLACE FUNCTION limits_enter_turns(p_limit bigint, p_key text) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_pass bigint;
BEGIN
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    IF NOT limits_is_fair(l) THEN
        RETURN;
    END IF;
    IF p_key = '' THEN
        IF l.busy_count + l.reserved_count + l.waiting_count
           - l.keyed_busy_count - l.keyed_reserved_count - l.keyed_waiting_count > 0 THEN
            RETURN;
        END IF;
    ELSIF EXISTS (
        SELECT 1 FROM limits_limitkey k
        WHERE k.limit_id = p_limit AND k.key = p_key AND k.busy_count + k.reserved_count + k.waiting_count > 0
    ) THEN
        RETURN;
    END IF;
    SELECT min(p) INTO v_pass FROM (
        (SELECT k.fair_pass AS p FROM limits_limitkey k
         WHERE k.limit_id = p_limit AND k.key <> p_key
           AND (k.busy_count > 0 OR k.reserved_count > 0 OR k.waiting_count > 0)
         ORDER BY k.fair_pass LIMIT 1)
        UNION ALL
        SELECT l.nokey_fair_pass
        WHERE p_key <> '' AND l.busy_count + l.reserved_count + l.waiting_count
              - l.keyed_busy_count - l.keyed_reserved_count - l.keyed_waiting_count > 0
    ) a;
    IF p_key = '' THEN
        UPDATE limits_limit SET nokey_fair_pass = coalesce(v_pass, 0) WHERE id = p_limit;
    ELSE
        UPDATE limits_limitkey SET fair_pass = coalesce(v_pass, 0) WHERE limit_id = p_limit AND key = p_key;
    END IF;
END
$$;

-- keys.take_turn (SPEC 13.2): a grant to this key of a fair limit adds its stride to its pass;
-- returns the pass it was ranked at (the slot keeps it for limits verify), NULL on a fifo limit.
CREATE OR REPLACE FUNCTION limits_take_turn(l limits_limit, p_key text) RETURNS bigint
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_pass bigint;
BEGIN
    IF NOT limits_is_fair(l) THEN
        RETURN NULL;
    END IF;
    IF p_key = '' THEN
        UPDATE limits_limit SET nokey_fair_pass = nokey_fair_pass + limits_stride(1) WHERE id = l.id
        RETURNING nokey_fair_pass - limits_stride(1) INTO v_pass;
    ELSE
        UPDATE limits_limitkey SET fair_pass = fair_pass + limits_stride(weight)
        WHERE limit_id = l.id AND key = p_key
        RETURNING fair_pass - limits_stride(weight) INTO v_pass;
    END IF;
    RETURN v_pass;
END
$$;

-- keys.Pools.fair_pass: the key's pass now (on the queue entry it joins with), NULL on a fifo limit.
CREATE OR REPLACE FUNCTION limits_fair_pass(p_limit bigint, p_key text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM limits_limit m WHERE m.id = p_limit AND limits_is_fair(m)) THEN
        RETURN NULL;
    ELSIF p_key = '' THEN
        RETURN (SELECT nokey_fair_pass FROM limits_limit WHERE id = p_limit);
    END IF;
    RETURN coalesce((SELECT fair_pass FROM limits_limitkey WHERE limit_id = p_limit AND key = p_key), 0);
END
$$;

-- keys.restart_turns (SPEC 13.2, docs/concurrency.md): a switch between fifo and fair starts every
-- key's turns afresh, all at pass 0.
CREATE OR REPLACE FUNCTION limits_restart_turns(p_limit bigint) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
BEGIN
    UPDATE limits_limit SET nokey_fair_pass = 0 WHERE id = p_limit AND nokey_fair_pass <> 0;
    UPDATE limits_limitkey SET fair_pass = 0 WHERE limit_id = p_limit AND fair_pass <> 0;
END
$$;

-- limits.engine.keys.box_base: the base of the box's run concurrency in force (SPEC 12.1, 12.5),
-- NULL without one. PL/pgSQL: its query's plan is kept for the session (an SQL function that
-- reads a table is not inlined, and is planned again at every call).
CREATE OR REPLACE FUNCTION limits_box_base() RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT limits_per_key(b) FROM limits_limit b WHERE b.name = 'box' AND b.kind = 'box' AND b.declared);
END
$$;

-- limits.engine.keys.whole_run_room (SPEC 12.3): a limit serves at most p_base runs for their
-- whole run at once (its live slots of requests '<run>:start'); the box itself is capped by its
-- ceiling and pools instead. True without a box (p_base NULL) or for another acquisition.
CREATE OR REPLACE FUNCTION limits_whole_run_room(l limits_limit, p_request text, p_base integer) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_base IS NULL OR l.kind = 'box' OR right(p_request, 6) <> ':start' THEN
        RETURN true;
    END IF;
    RETURN (
        SELECT count(*) FROM limits_slot
        WHERE limit_id = l.id AND state IN ('busy', 'reserved') AND request LIKE '%:start'
    ) < p_base;
END
$$;

-- limits.engine.rules.clock: a change to a locked limit is stamped with the database's clock
-- (p_now NULL; the process's time in tests), never before the limit's last change.
CREATE OR REPLACE FUNCTION limits_clock(p_now timestamptz, p_last timestamptz) RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$ SELECT greatest(coalesce(p_now, clock_timestamp()), p_last) $$;

-- limits.engine.keys.lock and rules.clock_all: the limits p_limits locked FOR NO KEY UPDATE in id
-- order, with (p_partners) the other limits of every group waiting in one of them or reserved
-- from it (limits_partners, read first without a lock: only a limit where a group waits, or
-- holds a reservation, has any), then the clock read after the locks: `clock`, the latest
-- limits_clock of them (one time for the change to them all, never before any one's last). `ids`:
-- the limits locked (p_limits first; it may name one twice), for the caller's rules.clock_all
-- UPDATE and its grant. `plain`: every one is plain (limits_is_plain); `waiting`: one has runs
-- waiting (what limits_release asks). Every function that locks several limits locks them here.
-- Its statements keep one plan for the session (plan_cache_mode): left to choose, PostgreSQL
-- planned the lock's query again at every call (a custom plan for each array of ids), which cost
-- more than the call of this function (docs/performance.md, "One home per rule in engine.sql").
CREATE OR REPLACE FUNCTION limits_lock(
    p_limits bigint[], p_now timestamptz, p_partners boolean DEFAULT true,
    OUT ids bigint[], OUT clock timestamptz, OUT plain boolean, OUT waiting boolean
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l limits_limit;
    i integer;
BEGIN
    ids := p_limits;
    plain := true;
    waiting := false;
    FOR i IN 1 .. CASE WHEN p_partners THEN coalesce(cardinality(p_limits), 0) ELSE 0 END LOOP
        IF EXISTS (SELECT 1 FROM limits_limit WHERE id = p_limits[i] AND group_waiting_count > 0)
           OR EXISTS (
               SELECT 1 FROM limits_slot WHERE limit_id = p_limits[i] AND state = 'reserved' AND group_size > 1
           ) THEN
            ids := ids || limits_partners(p_limits[i]);
        END IF;
    END LOOP;
    FOR l IN SELECT * FROM limits_limit WHERE id = ANY (ids) ORDER BY id FOR NO KEY UPDATE LOOP
        clock := greatest(clock, limits_clock(p_now, l.last_event_at));
        plain := plain AND limits_is_plain(l);
        waiting := waiting OR l.waiting_count > 0;
    END LOOP;
END
$$;

-- limits.models.new_slot_id: 'slot_' and 32 hex digits.
CREATE OR REPLACE FUNCTION limits_new_slot_id() RETURNS text
LANGUAGE sql VOLATILE AS $$ SELECT 'slot_' || replace(gen_random_uuid()::text, '-', '') $$;

-- PL/pgSQL rather than SQL functions: their plans are cached per session (an SQL function with a
-- data-modifying CTE is planned again on every call: +0.3 ms per hand-off, measured).
CREATE OR REPLACE FUNCTION limits_time_out(p_limit bigint, p_now timestamptz) RETURNS text[]
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
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

-- The heads are the waiting entries up to the p_count-th position (a subquery run once), one
-- range of queue_waiting_order: no join to plan. An `id IN (... LIMIT p_count)` join planned from
-- statistics that found the live queue empty probed the whole of it once per head (a lapse pass's
-- 5,000 heads: 6.7 s, 20,000: over 2 minutes; issue 44).
CREATE OR REPLACE FUNCTION limits_grant_heads(
    p_limit bigint, p_count integer, p_now timestamptz, p_reserved_until timestamptz, p_expires_at timestamptz
) RETURNS text[]
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    result text[];
BEGIN
    WITH heads AS (
        UPDATE limits_queueentry SET state = 'granted', finished_at = p_now
        WHERE limit_id = p_limit AND state = 'waiting' AND position <= (
            SELECT max(h.position) FROM (
                SELECT position FROM limits_queueentry
                WHERE limit_id = p_limit AND state = 'waiting' ORDER BY position LIMIT p_count
            ) h
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

-- Hand free capacity to the queue (SPEC 3.3, 3.5): time out the waits past their deadline, then
-- reserve a slot for each run at the head, in queue order, while busy + reserved < capacity.
-- The caller holds the limit's lock and has written its counters; this writes them again.
CREATE OR REPLACE FUNCTION limits_settle(
    p_limit bigint, p_now timestamptz, p_reservation_ms bigint, OUT timed_out text[], OUT granted text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_free integer;
BEGIN
    timed_out := '{}';
    granted := '{}';
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    IF l.waiting_count = 0 THEN
        RETURN;
    END IF;
    timed_out := limits_time_out(p_limit, p_now);  -- at every settle, room or not (grant.settle)
    v_free := limits_room(l);
    IF v_free > 0 AND l.waiting_count > cardinality(timed_out) THEN
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
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
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
        RETURN 'slow';  -- a group is confirmed together: limits_confirm_or_lapse
    END IF;
    BEGIN
        SELECT limits_clock(p_now, last_event_at) INTO v_now FROM limits_limit WHERE id = v_limit FOR NO KEY UPDATE;
        SELECT state, reserved_until INTO v_state, v_reserved_until FROM limits_slot WHERE id = p_slot;
        IF v_state = 'reserved' AND v_now > v_reserved_until THEN
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';  -- late: limits_confirm_or_lapse lapses it
        END IF;
        IF v_state IS DISTINCT FROM 'reserved' THEN  -- NULL: the purge deleted it meanwhile
            RETURN 'gone';
        END IF;
        UPDATE limits_slot SET state = 'busy', confirmed_at = v_now WHERE id = p_slot AND state = 'reserved';
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

-- keys.confirm_group: the reservations of one acquisition turn busy together (3.5, 10.2), with the
-- counters of their limits and pools. The caller holds the locks and checked they are in time.
-- Returns (slot id, limit id) of each slot confirmed.
CREATE OR REPLACE FUNCTION limits_confirm_together(p_request text, p_now timestamptz)
RETURNS TABLE (slot_id text, limit_id bigint)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
BEGIN
    RETURN QUERY
    WITH confirmed AS (
        UPDATE limits_slot s SET state = 'busy', confirmed_at = p_now
        WHERE s.request = p_request AND s.state = 'reserved'
        RETURNING s.id, s.limit_id, s.key
    ), counted AS (
        UPDATE limits_limit t
        SET reserved_count = t.reserved_count - 1, busy_count = t.busy_count + 1,
            keyed_reserved_count = t.keyed_reserved_count - (c.key <> '')::integer,
            keyed_busy_count = t.keyed_busy_count + (c.key <> '')::integer
        FROM confirmed c WHERE t.id = c.limit_id
    ), pooled AS (
        UPDATE limits_limitkey k SET reserved_count = k.reserved_count - 1, busy_count = k.busy_count + 1
        FROM confirmed c WHERE k.limit_id = c.limit_id AND k.key = c.key AND c.key <> ''
    )
    SELECT c.id::text, c.limit_id FROM confirmed c;
END
$$;

-- limits.engine.slots.confirm in every case: a single reservation in time (limits_confirm, its own
-- lock only); otherwise, under the lock of the slot's limit with its groups' other limits (id
-- order), the acquisition's reservations confirmed together if all are in time ('busy'), else all
-- lapse, the run goes back to the end of each queue (limits_take_back) and the freed capacity is
-- granted ('lapsed', with the runs to wake). Not reserved (any more), or unknown: 'gone'.
CREATE OR REPLACE FUNCTION limits_confirm_or_lapse(
    p_slot text, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    OUT outcome text, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_limit bigint;
    v_request text;
    v_ids bigint[];
    v_now timestamptz;
BEGIN
    woken := '{}';
    outcome := limits_confirm(p_slot, p_now);
    IF outcome <> 'slow' THEN
        RETURN;
    END IF;
    SELECT limit_id, request INTO v_limit, v_request FROM limits_slot WHERE id = p_slot;
    SELECT k.ids, k.clock INTO v_ids, v_now FROM limits_lock(ARRAY[v_limit], p_now) k;
    UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
    IF NOT EXISTS (SELECT 1 FROM limits_slot WHERE id = p_slot AND state = 'reserved') THEN
        outcome := 'gone';
        RETURN;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM limits_slot WHERE request = v_request AND state = 'reserved' AND v_now > reserved_until
    ) THEN  -- all in time, all busy
        PERFORM limits_confirm_together(v_request, v_now);
        outcome := 'busy';
        RETURN;
    END IF;
    PERFORM limits_take_back(v_request, v_now, 'lapsed', '');  -- keys.lapse (3.6, 10.2)
    SELECT g.woken INTO woken FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) g;
    outcome := 'lapsed';
END
$$;

-- keys.lapse for the reserved slots of one acquisition (a group's all together, 10.2): freed as
-- p_state ('lapsed', or 'released' by p_freed_by), and the run back at the end of each queue with
-- its deadline, timeout, key and group (3.6), the counters of the limits and pools with them. The
-- caller holds the locks of every limit of the acquisition. Returns how many slots it freed.
CREATE OR REPLACE FUNCTION limits_take_back(p_request text, p_now timestamptz, p_state text, p_freed_by text)
RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    s record;
    v_position bigint;
    v_count integer := 0;
BEGIN
    FOR s IN
        SELECT sl.id, sl.limit_id, sl.run_id, sl.label, sl.key, sl.group_size, q.deadline, q.timeout_ms
        FROM limits_slot sl JOIN limits_queueentry q ON q.id = sl.queue_entry_id AND q.state = 'granted'
        WHERE sl.request = p_request AND sl.state = 'reserved'
        ORDER BY sl.limit_id
    LOOP
        UPDATE limits_slot SET state = p_state, freed_at = p_now, freed_by = p_freed_by
        WHERE id = s.id AND state = 'reserved';
        UPDATE limits_limit
        SET reserved_count = reserved_count - 1, keyed_reserved_count = keyed_reserved_count - (s.key <> '')::integer,
            waiting_count = waiting_count + 1, keyed_waiting_count = keyed_waiting_count + (s.key <> '')::integer,
            group_waiting_count = group_waiting_count + (s.group_size > 1)::integer,
            next_position = next_position + 1
        WHERE id = s.limit_id
        RETURNING next_position - 1 INTO v_position;
        INSERT INTO limits_queueentry (
            limit_id, run_id, request, label, key, group_size, position, state, enqueued_at, deadline, timeout_ms,
            fair_pass
        ) VALUES (
            s.limit_id, s.run_id, p_request, s.label, s.key, s.group_size, v_position, 'waiting', p_now,
            s.deadline, s.timeout_ms, limits_fair_pass(s.limit_id, s.key)
        );
        IF s.key <> '' THEN
            UPDATE limits_limitkey
            SET reserved_count = reserved_count - 1, waiting_count = waiting_count + 1,
                head = coalesce(head, v_position)  -- the newest position: the head only of an empty key
            WHERE limit_id = s.limit_id AND key = s.key;
        END IF;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;

-- limits.engine.slots.release: free a busy or reserved slot and hand the capacity to the queue:
-- 'released' with the runs to wake; already free or unknown: 'gone'. A reservation sends its run
-- back to the end of the queue (a group's whole, 10.2: limits_take_back). With p_actor (an
-- operator, 5.1) the slot is freed by that name and the release audited. The slot's limit is
-- locked with the other limits of the groups waiting in it or reserved from it (keys.lock: read
-- without a lock, then locked in id order, so crossing groups never deadlock; a group that joined
-- meanwhile with a limit not locked here stays waiting, as in Python), the slot freed, and the
-- free capacity granted: by limits_settle when every locked limit is plain, else by limits_grant
-- over them all (issue 26: one call in every case).
CREATE OR REPLACE FUNCTION limits_release(
    p_slot text, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint, p_actor text,
    OUT outcome text, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_limit bigint;
    v_ids bigint[];
    v_now timestamptz;
    v_state text;
    v_key text;
    v_request text;
    v_plain boolean := true;
    v_waiting boolean := false;
    l limits_limit;
    settled record;
BEGIN
    woken := '{}';
    SELECT limit_id INTO v_limit FROM limits_slot WHERE id = p_slot;
    IF NOT FOUND THEN
        outcome := 'gone';
        RETURN;
    END IF;
    SELECT k.ids, k.clock, k.plain, k.waiting INTO v_ids, v_now, v_plain, v_waiting
    FROM limits_lock(ARRAY[v_limit], p_now) k;
    SELECT state, key, request INTO v_state, v_key, v_request FROM limits_slot WHERE id = p_slot;
    IF v_state IS NULL OR v_state NOT IN ('busy', 'reserved') THEN  -- NULL: the purge deleted it meanwhile
        outcome := 'gone';
        RETURN;
    END IF;
    IF v_state = 'reserved' THEN
        PERFORM limits_take_back(v_request, v_now, 'released', coalesce(p_actor, ''));
        v_waiting := true;
        v_plain := false;  -- the run is back in the queue: limits_grant takes it (a group's, all its limits)
    ELSE
        UPDATE limits_slot SET state = 'released', freed_at = v_now, freed_by = coalesce(p_actor, '')
        WHERE id = p_slot AND state = 'busy';
        UPDATE limits_limit
        SET busy_count = busy_count - 1, keyed_busy_count = keyed_busy_count - (v_key <> '')::integer
        WHERE id = v_limit;
        IF v_key <> '' THEN
            UPDATE limits_limitkey SET busy_count = busy_count - 1 WHERE limit_id = v_limit AND key = v_key;
        END IF;
    END IF;
    -- rules.clock_all: one time for the change to every locked limit
    UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);
    IF v_waiting AND v_plain THEN  -- the rows are locked: nobody joined since they were read
        FOR l IN SELECT * FROM limits_limit WHERE id = ANY (v_ids) AND waiting_count > 0 ORDER BY id LOOP
            SELECT * INTO settled FROM limits_settle(l.id, v_now, p_reservation_ms);
            woken := woken || settled.timed_out || settled.granted;
        END LOOP;
    ELSIF v_waiting THEN
        SELECT g.woken INTO woken FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) g;
    END IF;
    IF p_actor IS NOT NULL THEN  -- rules.audit (5.5)
        INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value)
        VALUES (v_now, coalesce(nullif(p_actor, ''), 'system'), 'release', v_limit, p_slot, '', v_state, 'released');
    END IF;
    outcome := 'released';
END
$$;

-- limits.engine.slots.release_slots (issue 44): several slots freed at once, a with_limits block's
-- release, as limits_release frees each (a reservation's run back to the end of its queues, a
-- group's whole; a busy slot released on its own), under one set of locks (every limit of the
-- slots, with their groups' other limits, in id order) and one grant over them all, so a group
-- waiting for the same limits is granted in this call. released: each slot's answer, in the
-- order given (a slot named twice: released once); woken: the runs to wake.
CREATE OR REPLACE FUNCTION limits_release_slots(
    p_slots text[], p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint, p_actor text,
    OUT released boolean[], OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_ids bigint[];
    v_now timestamptz;
    s record;
    i integer;
BEGIN
    released := '{}';
    woken := '{}';
    SELECT k.ids, k.clock INTO v_ids, v_now
    FROM limits_lock(ARRAY(SELECT DISTINCT limit_id FROM limits_slot WHERE id = ANY (p_slots)), p_now) k;
    FOR i IN 1 .. coalesce(cardinality(p_slots), 0) LOOP
        SELECT id, limit_id, state, key, request INTO s FROM limits_slot
        WHERE id = p_slots[i] AND state IN ('busy', 'reserved');
        IF NOT FOUND THEN
            released := released || false;
            CONTINUE;
        END IF;
        IF s.state = 'reserved' THEN
            PERFORM limits_take_back(s.request, v_now, 'released', coalesce(p_actor, ''));
        ELSE
            UPDATE limits_slot SET state = 'released', freed_at = v_now, freed_by = coalesce(p_actor, '')
            WHERE id = s.id AND state = 'busy';
            UPDATE limits_limit
            SET busy_count = busy_count - 1, keyed_busy_count = keyed_busy_count - (s.key <> '')::integer
            WHERE id = s.limit_id;
            IF s.key <> '' THEN
                UPDATE limits_limitkey SET busy_count = busy_count - 1 WHERE limit_id = s.limit_id AND key = s.key;
            END IF;
        END IF;
        IF p_actor IS NOT NULL THEN  -- rules.audit (5.5)
            INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value)
            VALUES (v_now, coalesce(nullif(p_actor, ''), 'system'), 'release', s.limit_id, s.id, '', s.state, 'released');
        END IF;
        released := released || true;
    END LOOP;
    IF cardinality(v_ids) > 0 THEN
        UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
        SELECT g.woken INTO woken FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) g;
    END IF;
END
$$;

-- limits.engine.slots.end_run: a run ended. Its waits are cancelled, its reservations and the busy
-- slots tied to it (with_limit, 2.5) freed as run_ended, on every limit it touched, locked with
-- their groups' other limits in id order; the free capacity granted over them all (limits_grant).
-- How many entries and slots it ended, and the runs to wake.
CREATE OR REPLACE FUNCTION limits_end_run(
    p_run text, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    OUT ended integer, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_mine bigint[];
    v_ids bigint[];
    v_now timestamptz;
    v_cancelled integer;
    v_freed integer;
    v_head_limits bigint[];
    v_head_keys text[];
BEGIN
    ended := 0;
    woken := '{}';
    SELECT coalesce(array_agg(DISTINCT limit_id), '{}') INTO v_mine FROM (
        SELECT limit_id FROM limits_queueentry WHERE run_id = p_run AND state = 'waiting'
        UNION ALL
        SELECT limit_id FROM limits_slot
        WHERE run_id = p_run AND (state = 'reserved' OR (state = 'busy' AND ends_with_run))
    ) t;
    IF cardinality(v_mine) = 0 THEN
        RETURN;
    END IF;
    SELECT k.ids, k.clock INTO v_ids, v_now FROM limits_lock(v_mine, p_now) k;
    WITH cancelled AS (
        UPDATE limits_queueentry SET state = 'cancelled', finished_at = v_now
        WHERE run_id = p_run AND state = 'waiting' AND limit_id = ANY (v_ids)
        RETURNING limit_id, key, group_size
    ), counted AS (
        UPDATE limits_limit t
        SET waiting_count = t.waiting_count - c.n, keyed_waiting_count = t.keyed_waiting_count - c.keyed,
            group_waiting_count = t.group_waiting_count - c.grouped
        FROM (
            SELECT limit_id, count(*) AS n, count(*) FILTER (WHERE key <> '') AS keyed,
                   count(*) FILTER (WHERE group_size > 1) AS grouped
            FROM cancelled GROUP BY limit_id
        ) c
        WHERE t.id = c.limit_id
    ), pools AS (
        UPDATE limits_limitkey k SET waiting_count = k.waiting_count - c.n
        FROM (SELECT limit_id, key, count(*) AS n FROM cancelled WHERE key <> '' GROUP BY limit_id, key) c
        WHERE k.limit_id = c.limit_id AND k.key = c.key
    )
    SELECT count(*), array_agg(limit_id) FILTER (WHERE key <> ''), array_agg(key) FILTER (WHERE key <> '')
    INTO v_cancelled, v_head_limits, v_head_keys
    FROM cancelled;
    PERFORM limits_read_heads(v_head_limits, v_head_keys);  -- after the statement: it sees them gone
    WITH freed AS (
        UPDATE limits_slot s SET state = 'run_ended', freed_at = v_now
        FROM limits_slot o
        WHERE s.id = o.id AND s.run_id = p_run AND s.limit_id = ANY (v_ids)
          AND (s.state = 'reserved' OR (s.state = 'busy' AND s.ends_with_run))
        RETURNING s.limit_id, s.key, o.state AS was
    ), counted AS (
        UPDATE limits_limit t
        SET busy_count = t.busy_count - c.busy, reserved_count = t.reserved_count - c.reserved,
            keyed_busy_count = t.keyed_busy_count - c.keyed_busy,
            keyed_reserved_count = t.keyed_reserved_count - c.keyed_reserved
        FROM (
            SELECT limit_id,
                   count(*) FILTER (WHERE was = 'busy') AS busy,
                   count(*) FILTER (WHERE was = 'reserved') AS reserved,
                   count(*) FILTER (WHERE was = 'busy' AND key <> '') AS keyed_busy,
                   count(*) FILTER (WHERE was = 'reserved' AND key <> '') AS keyed_reserved
            FROM freed GROUP BY limit_id
        ) c
        WHERE t.id = c.limit_id
    ), pools AS (
        UPDATE limits_limitkey k
        SET busy_count = k.busy_count - c.busy, reserved_count = k.reserved_count - c.reserved
        FROM (
            SELECT limit_id, key, count(*) FILTER (WHERE was = 'busy') AS busy,
                   count(*) FILTER (WHERE was = 'reserved') AS reserved
            FROM freed WHERE key <> '' GROUP BY limit_id, key
        ) c
        WHERE k.limit_id = c.limit_id AND k.key = c.key
    )
    SELECT count(*) INTO v_freed FROM freed;
    ended := v_cancelled + v_freed;
    UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
    SELECT g.woken INTO woken FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) g;
END
$$;

-- keys.lapse for the sweep (3.6): the reservations of single runs (one limit each) past their time,
-- as limits_take_back would take each back in queue order, in one statement: each slot lapsed, each
-- run back at the end of the queue with its deadline, timeout and key, in the order of the entries
-- they were granted from, and the counters of the limit and its key pools changed once. A loop of
-- limits_take_back, writing the limit's row once per run, took time growing with the square of
-- the lapses (2,500: 2 s, 5,000: 9 s, 10,000: 35 s; issue 44). The caller holds the limit's lock.
-- Returns how many slots it freed.
CREATE OR REPLACE FUNCTION limits_lapse_singles(p_limit bigint, p_now timestamptz) RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_fair boolean;
    v_count integer;
BEGIN
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    v_fair := limits_is_fair(l);
    WITH due AS (  -- each slot's entry found by its id (LIMIT 1: never a join over the history)
        SELECT s.id, q.deadline, q.timeout_ms, q.position
        FROM limits_slot s
        CROSS JOIN LATERAL (
            SELECT e.deadline, e.timeout_ms, e.position FROM limits_queueentry e
            WHERE e.id = s.queue_entry_id AND e.state = 'granted'
            LIMIT 1
        ) q
        WHERE s.limit_id = l.id AND s.state = 'reserved' AND s.reserved_until <= p_now AND s.group_size = 1
    ), gone AS (
        UPDATE limits_slot s SET state = 'lapsed', freed_at = p_now, freed_by = ''
        FROM due d
        WHERE s.id = d.id AND s.state = 'reserved'
        RETURNING s.run_id, s.request, s.label, s.key, d.deadline, d.timeout_ms, d.position
    ), entries AS (
        INSERT INTO limits_queueentry (
            limit_id, run_id, request, label, key, group_size, position, state, enqueued_at, deadline, timeout_ms,
            fair_pass
        )
        SELECT l.id, g.run_id, g.request, g.label, g.key, 1,
               l.next_position + row_number() OVER (ORDER BY g.position) - 1, 'waiting', p_now, g.deadline,
               g.timeout_ms, CASE WHEN v_fair THEN limits_fair_pass(l.id, g.key) END
        FROM gone g
        ORDER BY g.position
        RETURNING key, position
    ), pools AS (
        UPDATE limits_limitkey k
        SET reserved_count = k.reserved_count - c.n, waiting_count = k.waiting_count + c.n,
            head = coalesce(k.head, c.first)  -- the first position: the head only of an empty key
        FROM (SELECT key, count(*) AS n, min(position) AS first FROM entries WHERE key <> '' GROUP BY key) c
        WHERE k.limit_id = l.id AND k.key = c.key
    ), counted AS (
        UPDATE limits_limit t
        SET reserved_count = t.reserved_count - c.n, keyed_reserved_count = t.keyed_reserved_count - c.keyed,
            waiting_count = t.waiting_count + c.n, keyed_waiting_count = t.keyed_waiting_count + c.keyed,
            next_position = t.next_position + c.n
        FROM (SELECT count(*) AS n, count(*) FILTER (WHERE key <> '') AS keyed FROM entries) c
        WHERE t.id = l.id AND c.n > 0
    )
    SELECT count(*) INTO v_count FROM entries;
    RETURN v_count;
END
$$;

-- limits.engine.sweeper.sweep for one limit with work, in one call (issue 26): under the locks of
-- the limit and of its groups' other limits (id order), take back the busy slots past their expiry
-- (not a workflow's own bound, 11.4; one audit row for the lot), lapse the reservations past their
-- 2 minutes (single runs in queue order, then each group whole: limits_take_back), then time out
-- and grant over the locked limits (limits_grant). The figures of the SweepReport, and the runs to
-- wake.
CREATE OR REPLACE FUNCTION limits_sweep_limit(
    p_limit bigint, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    OUT expired integer, OUT lapsed integer, OUT timed_out integer, OUT granted integer, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_ids bigint[];
    v_now timestamptz;
    g record;
BEGIN
    expired := 0;
    lapsed := 0;
    timed_out := 0;
    granted := 0;
    woken := '{}';
    SELECT k.ids, k.clock INTO v_ids, v_now FROM limits_lock(ARRAY[p_limit], p_now) k;
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    IF l.kind <> 'workflow' THEN
        WITH gone AS (
            UPDATE limits_slot SET state = 'expired', freed_at = v_now, freed_by = 'sweep'
            WHERE limit_id = p_limit AND state = 'busy' AND expires_at <= v_now
            RETURNING key
        ), counted AS (
            UPDATE limits_limit t
            SET busy_count = t.busy_count - c.n, keyed_busy_count = t.keyed_busy_count - c.keyed
            FROM (SELECT count(*) AS n, count(*) FILTER (WHERE key <> '') AS keyed FROM gone) c
            WHERE t.id = p_limit AND c.n > 0
        ), pools AS (
            UPDATE limits_limitkey k SET busy_count = k.busy_count - c.n
            FROM (SELECT key, count(*) AS n FROM gone WHERE key <> '' GROUP BY key) c
            WHERE k.limit_id = p_limit AND k.key = c.key
        )
        SELECT count(*) INTO expired FROM gone;
        IF expired > 0 THEN  -- rules.audit: one row for the lot
            INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value)
            VALUES (v_now, 'sweep', 'expire', p_limit, '', '', '', expired || ' slot(s)');
        END IF;
    END IF;
    -- keys.lapse: single runs first, in queue order (one statement), then each group whole (10.2)
    lapsed := limits_lapse_singles(p_limit, v_now);
    FOR g IN
        SELECT s.request, min(q.position) AS first
        FROM limits_slot s JOIN limits_queueentry q ON q.id = s.queue_entry_id AND q.state = 'granted'
        WHERE s.limit_id = p_limit AND s.state = 'reserved' AND s.reserved_until <= v_now AND s.group_size > 1
        GROUP BY s.request ORDER BY first
    LOOP
        lapsed := lapsed + limits_take_back(g.request, v_now, 'lapsed', '');
    END LOOP;
    UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
    SELECT t.timed_out, t.granted, t.woken INTO timed_out, granted, woken
    FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) t;
END
$$;

-- limits.engine.sweeper.sweep, step 1: the limits with work, in id order: busy slots past their
-- expiry, reservations past their time, waits past their deadline (each from its partial index on
-- the live partition), and free capacity with runs waiting (the counters). p_now NULL: the
-- database's clock.
CREATE OR REPLACE FUNCTION limits_sweep_work(p_now timestamptz) RETURNS bigint[]
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    RETURN ARRAY(
        SELECT limit_id FROM limits_slot WHERE state = 'busy' AND expires_at <= v_now
        UNION SELECT limit_id FROM limits_slot WHERE state = 'reserved' AND reserved_until <= v_now
        UNION SELECT limit_id FROM limits_queueentry WHERE state = 'waiting' AND deadline <= v_now
        UNION SELECT id FROM limits_limit l WHERE l.waiting_count > 0 AND limits_room(l) > 0
        ORDER BY 1
    );
END
$$;

-- limits.engine.sweeper.sweep, step 2, as one statement whatever the number of limits (issue 26):
-- each limit with work swept by limits_sweep_limit, then, with p_commit, committed before the next
-- (so no limit stays locked while another is swept; the sweep task calls it in autocommit). Without
-- p_commit the pass is one transaction, the caller's (a test's). The figures are summed and the
-- runs to wake gathered for the caller to wake after the call. A failure part way leaves the limits
-- before it swept and committed; their runs' wakes are then lost, and the run layer's recovery
-- wakes them (a slot reserved for a suspended run over 5 s ago: limits.apps, find_stuck_waits).
-- A procedure, not a function: only a procedure may COMMIT, and only one with no SET clause, so
-- it reads no table itself (limits_sweep_work and limits_sweep_limit plan with their settings).
CREATE OR REPLACE PROCEDURE limits_sweep(
    p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint, p_commit boolean,
    INOUT limits integer DEFAULT NULL, INOUT expired integer DEFAULT NULL, INOUT lapsed integer DEFAULT NULL,
    INOUT timed_out integer DEFAULT NULL, INOUT granted integer DEFAULT NULL, INOUT woken text[] DEFAULT NULL
)
LANGUAGE plpgsql AS $$
DECLARE
    v_limit bigint;
    r record;
BEGIN
    limits := 0;
    expired := 0;
    lapsed := 0;
    timed_out := 0;
    granted := 0;
    woken := '{}';
    FOREACH v_limit IN ARRAY limits_sweep_work(p_now) LOOP
        SELECT * INTO r FROM limits_sweep_limit(v_limit, p_now, p_reservation_ms, p_owed_after_ms);
        limits := limits + 1;
        expired := expired + r.expired;
        lapsed := lapsed + r.lapsed;
        timed_out := timed_out + r.timed_out;
        granted := granted + r.granted;
        woken := woken || r.woken;
        IF p_commit THEN
            COMMIT;
        END IF;
    END LOOP;
END
$$;

-- limits.engine.operator_actions.set_capacity, pause_limit / resume_limit, set_per_key and
-- set_max_hold, in one call each (issue 26): the limit locked with its groups' other limits (id
-- order, as keys.lock; a max hold locks the limit alone, as locked_limit), the change written, the
-- free capacity granted over them all (limits_grant; a max hold grants nothing) and the audit row
-- (5.5), with capacity_after for a capacity or a pause. p_value is the new capacity, per_key or
-- max hold (ms); NULL resets the override (5.2, 9.4). The caller checked a capacity's and a max
-- hold's range; a per_key outside 1..the capacity in force is refused here, under the lock
-- ('bad_per_key', with that `capacity`: operator_actions words the error, as on SQLite). p_key:
-- that key's pool size instead of the limit's per_key (its row created if new, as Pools.row).
-- p_paused: pause (true) or resume (false); a limit already so changes nothing ('same').
-- 'unknown' for a name no limit has; 'bound' for a max hold of a workflow's own bound (11.5).
-- 'box' (set_box, SPEC 12.5): p_value the base and p_burst the burst, each written only when given
-- (NULL resets it), the ceiling kept in capacity_override; 'unknown' unless the limit is the
-- declared box, 'bad_ceiling' (with that ceiling as `capacity`) past 100,000.
CREATE OR REPLACE FUNCTION limits_operate(
    p_name text, p_action text, p_value bigint, p_key text, p_paused boolean, p_actor text, p_now timestamptz,
    p_reservation_ms bigint, p_owed_after_ms bigint, p_share text DEFAULT NULL,
    p_base_given boolean DEFAULT false, p_burst double precision DEFAULT NULL, p_burst_given boolean DEFAULT false,
    OUT outcome text, OUT woken text[], OUT capacity integer
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
SET extra_float_digits = 1 AS $$  -- limits_box_text: a float's shortest exact text, whatever the server's setting
DECLARE
    v_limit bigint;
    v_ids bigint[];
    v_now timestamptz;
    v_old text;
    v_new text;
    l limits_limit;
BEGIN
    woken := '{}';
    SELECT id INTO v_limit FROM limits_limit WHERE name = p_name;
    IF NOT FOUND THEN
        outcome := 'unknown';
        RETURN;
    END IF;
    -- a max hold locks the limit alone (locked_limit): it grants nothing
    SELECT k.ids, k.clock INTO v_ids, v_now FROM limits_lock(ARRAY[v_limit], p_now, p_action <> 'max_hold') k;
    SELECT * INTO l FROM limits_limit WHERE id = v_limit;
    capacity := limits_capacity(l);
    IF p_action = 'capacity' THEN
        v_old := limits_capacity(l)::text;
        UPDATE limits_limit SET capacity_override = p_value, updated_at = v_now WHERE id = v_limit;
    ELSIF p_action = 'pause' THEN
        IF (l.paused_at IS NOT NULL) = p_paused THEN
            outcome := 'same';
            RETURN;
        END IF;
        v_old := CASE WHEN p_paused THEN 'running' ELSE 'paused' END;
        v_new := CASE WHEN p_paused THEN 'paused' ELSE 'running' END;
        UPDATE limits_limit SET paused_at = CASE WHEN p_paused THEN v_now END, updated_at = v_now WHERE id = v_limit;
    ELSIF p_action = 'max_hold' THEN
        IF l.kind = 'workflow' THEN
            outcome := 'bound';
            RETURN;
        END IF;
        v_old := coalesce(l.max_hold_override_ms, l.declared_max_hold_ms)::text;
        v_new := coalesce(p_value, l.declared_max_hold_ms)::text || CASE WHEN p_value IS NULL THEN ' (declared)' ELSE '' END;
        UPDATE limits_limit SET max_hold_override_ms = p_value, last_event_at = v_now, updated_at = v_now
        WHERE id = v_limit;
        INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value, capacity_after)
        VALUES (v_now, coalesce(nullif(p_actor, ''), 'system'), 'max_hold', v_limit, '', '', v_old, v_new, NULL);
        outcome := 'done';
        RETURN;
    ELSIF p_action = 'box' THEN  -- operator_actions.set_box: p_value the base, p_burst the burst
        IF l.kind <> 'box' OR NOT l.declared THEN
            outcome := 'unknown';
            RETURN;
        END IF;
        v_old := limits_box_text(l);
        IF p_base_given THEN
            l.per_key_override := p_value;
        END IF;
        IF p_burst_given THEN
            l.burst_override := p_burst;
        END IF;
        capacity := limits_box_override(l);  -- the ceiling, kept in capacity_override while overridden
        IF capacity > limits_max_capacity() THEN  -- check_ceiling words the refusal
            outcome := 'bad_ceiling';
            RETURN;
        END IF;
        UPDATE limits_limit SET per_key_override = l.per_key_override, burst_override = l.burst_override,
            capacity_override = capacity, updated_at = v_now
        WHERE id = v_limit;
    ELSIF p_action = 'share' THEN  -- operator_actions.set_share: p_share, NULL for the declared one
        v_old := limits_share(l);
        v_new := coalesce(p_share, l.declared_share) || CASE WHEN p_share IS NULL THEN ' (declared)' ELSE '' END;
        UPDATE limits_limit SET share_override = coalesce(p_share, ''), updated_at = v_now WHERE id = v_limit;
        IF coalesce(p_share, l.declared_share) <> v_old THEN
            PERFORM limits_restart_turns(v_limit);  -- keys.restart_turns: a switch starts the turns afresh
        END IF;
    ELSIF p_action = 'on_full' THEN  -- operator_actions.set_on_full: p_share the value, NULL for the declared one
        v_old := limits_on_full(l);
        v_new := coalesce(p_share, l.declared_on_full) || CASE WHEN p_share IS NULL THEN ' (declared)' ELSE '' END;
        UPDATE limits_limit SET on_full_override = coalesce(p_share, ''), updated_at = v_now WHERE id = v_limit;
    ELSIF p_action IN ('max_waiting', 'max_waiting_key') THEN  -- operator_actions.set_max_waiting: NULL resets
        IF p_action = 'max_waiting' THEN
            v_old := coalesce(limits_max_waiting(l)::text, 'none');
            UPDATE limits_limit SET max_waiting_override = p_value, updated_at = v_now WHERE id = v_limit
            RETURNING * INTO l;
            v_new := coalesce(limits_max_waiting(l)::text, 'none');
        ELSE
            v_old := coalesce(limits_max_waiting_per_key(l)::text, 'none');
            UPDATE limits_limit SET max_waiting_per_key_override = p_value, updated_at = v_now WHERE id = v_limit
            RETURNING * INTO l;
            v_new := coalesce(limits_max_waiting_per_key(l)::text, 'none');
        END IF;
        v_new := v_new || CASE WHEN p_value IS NULL THEN ' (declared)' ELSE '' END;
    ELSIF p_action IN ('weight', 'min') THEN  -- python_operators._set_key_field: p_key's, NULL resets
        IF p_action = 'min' AND p_value IS NOT NULL AND p_value NOT BETWEEN 0 AND limits_capacity(l) THEN
            outcome := 'bad_min';
            RETURN;
        END IF;
        v_old := coalesce(
            (SELECT CASE WHEN p_action = 'weight' THEN k.weight ELSE k.minimum END
             FROM limits_limitkey k WHERE k.limit_id = v_limit AND k.key = p_key),
            CASE WHEN p_action = 'weight' THEN 1 ELSE 0 END
        )::text;
        v_new := coalesce(p_value, CASE WHEN p_action = 'weight' THEN 1 ELSE 0 END)::text
                 || CASE WHEN p_value IS NULL THEN ' (default)' ELSE '' END;
        p_value := coalesce(p_value, CASE WHEN p_action = 'weight' THEN 1 ELSE 0 END);
        INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at, weight, minimum)
        VALUES (
            v_limit, p_key, 0, 0, 0, v_now,
            CASE WHEN p_action = 'weight' THEN p_value ELSE 1 END, CASE WHEN p_action = 'min' THEN p_value ELSE 0 END
        )
        ON CONFLICT (limit_id, key) DO UPDATE SET
            weight = CASE WHEN p_action = 'weight' THEN excluded.weight ELSE limits_limitkey.weight END,
            minimum = CASE WHEN p_action = 'min' THEN excluded.minimum ELSE limits_limitkey.minimum END;
    ELSE  -- 'per_key'
        IF p_value IS NOT NULL AND p_value NOT BETWEEN limits_min_capacity() AND limits_capacity(l) THEN
            outcome := 'bad_per_key';
            RETURN;
        END IF;
        IF p_key IS NULL THEN
            v_old := coalesce(limits_per_key(l)::text, 'none');
            v_new := CASE WHEN p_value IS NULL THEN coalesce(l.declared_per_key::text, 'none') || ' (declared)'
                          ELSE p_value::text END;
            UPDATE limits_limit SET per_key_override = p_value, updated_at = v_now WHERE id = v_limit;
        ELSE
            v_old := coalesce(limits_pool_size(
                l, (SELECT k.pool_override FROM limits_limitkey k WHERE k.limit_id = v_limit AND k.key = p_key)
            )::text, 'none');
            v_new := coalesce(limits_pool_size(l, p_value::integer)::text, 'none')
                     || CASE WHEN p_value IS NULL THEN ' (per_key)' ELSE '' END;
            INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at, pool_override)
            VALUES (v_limit, p_key, 0, 0, 0, v_now, p_value)
            ON CONFLICT (limit_id, key) DO UPDATE SET pool_override = excluded.pool_override;
        END IF;
    END IF;
    UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
    SELECT g.woken INTO woken FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) g;
    SELECT * INTO l FROM limits_limit WHERE id = v_limit;
    IF p_action = 'capacity' THEN
        v_new := limits_capacity(l)::text || CASE WHEN p_value IS NULL THEN ' (declared)' ELSE '' END;
    ELSIF p_action = 'box' THEN
        v_new := limits_box_text(l);
    END IF;
    INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value, capacity_after)
    VALUES (
        v_now, coalesce(nullif(p_actor, ''), 'system'),
        CASE WHEN p_action <> 'pause' THEN p_action WHEN p_paused THEN 'pause' ELSE 'resume' END,
        v_limit, '', coalesce(p_key, ''), v_old, v_new,
        CASE WHEN p_action IN ('capacity', 'pause', 'box') THEN limits_capacity(l) END
    );
    capacity := limits_capacity(l);
    outcome := 'done';
END
$$;

-- python_operators._declared_text: a declared limit's audit text in a deploy.
-- PL/pgSQL, whose body is checked when it runs: declared_share comes with a later migration.
CREATE OR REPLACE FUNCTION limits_declared_text(l limits_limit) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN format('capacity %s, max hold %s ms', l.declared_capacity, l.declared_max_hold_ms)
        || coalesce(', per_key ' || l.declared_per_key, '')
        || CASE WHEN l.declared_share <> 'fifo' THEN ', share ' || l.declared_share ELSE '' END
        || CASE WHEN l.declared_on_full <> 'wait' THEN ', on_full ' || l.declared_on_full ELSE '' END
        || coalesce(', max_waiting ' || l.declared_max_waiting, '')
        || coalesce(', max_waiting_per_key ' || l.declared_max_waiting_per_key, '')
        || CASE WHEN l.declared THEN '' ELSE ', undeclared' END;
END
$$;

-- python_operators._bound_text: a workflow's own bound's audit text in a deploy.
CREATE OR REPLACE FUNCTION limits_bound_text(l limits_limit) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN 'total ' || l.declared_capacity || coalesce(', per_key ' || l.declared_per_key, '')
        || CASE WHEN l.declared_on_full <> 'wait' THEN ', on_full ' || l.declared_on_full ELSE '' END
        || coalesce(', max_waiting ' || l.declared_max_waiting, '')
        || coalesce(', max_waiting_per_key ' || l.declared_max_waiting_per_key, '')
        || CASE WHEN l.declared THEN '' ELSE ', undeclared' END;
END
$$;

-- A deploy's change of one limit's declared values, after the caller wrote them (the limit and
-- every limit in p_locked are locked by the caller): the limit with the other limits of its groups
-- that the caller holds (keys.partners, as sync_workspace keeps them) get one time (rules.clock_all),
-- the free capacity is granted (a raise grants waiting runs at once, 1.4), and the audit row says
-- what changed: old p_old, new the text p_text_of names ('declared', 'bound' or 'box') read after
-- the grant. Returns the runs to wake.
CREATE OR REPLACE FUNCTION limits_sync_one(
    p_limit bigint, p_locked bigint[], p_old text, p_text_of text, p_actor text, p_now timestamptz,
    p_reservation_ms bigint, p_owed_after_ms bigint
) RETURNS text[]
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
SET extra_float_digits = 1 AS $$
DECLARE
    v_ids bigint[];
    v_now timestamptz;
    v_woken text[];
    l limits_limit;
BEGIN
    v_ids := p_limit || ARRAY(
        SELECT DISTINCT p FROM unnest(limits_partners(p_limit)) p WHERE p = ANY (p_locked) AND p <> p_limit
    );
    SELECT max(limits_clock(p_now, m.last_event_at)) INTO v_now FROM limits_limit m WHERE m.id = ANY (v_ids);
    UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);
    UPDATE limits_limit SET updated_at = v_now WHERE id = p_limit;
    SELECT g.woken INTO v_woken FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms) g;
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value, capacity_after)
    VALUES (
        v_now, coalesce(nullif(p_actor, ''), 'system'), 'sync', p_limit, '', '', p_old,
        CASE p_text_of WHEN 'declared' THEN limits_declared_text(l) WHEN 'bound' THEN limits_bound_text(l)
                       ELSE limits_box_text(l) END,
        limits_capacity(l)
    );
    RETURN v_woken;
END
$$;

-- A deploy's "this limit left the config" (SPEC 1.5): kept, marked undeclared, audited.
CREATE OR REPLACE FUNCTION limits_sync_undeclare(p_limit bigint, p_actor text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_now timestamptz;
    l limits_limit;
BEGIN
    SELECT limits_clock(p_now, last_event_at) INTO v_now FROM limits_limit WHERE id = p_limit;  -- rules.clock
    UPDATE limits_limit SET declared = false, last_event_at = v_now, updated_at = v_now WHERE id = p_limit
    RETURNING * INTO l;
    INSERT INTO limits_auditevent (at, actor, action, limit_id, slot_id, key, old_value, new_value, capacity_after)
    VALUES (
        l.last_event_at, coalesce(nullif(p_actor, ''), 'system'), 'sync', p_limit, '', '', 'declared', 'undeclared',
        limits_capacity(l)
    );
END
$$;

-- operator_actions.sync_workspace in one call (issue 26): every limit locked in id order, then
-- each declared limit (p_names[i] in the order given: the Python track's sorted order) created,
-- or its declared capacity, max hold, per_key and share written where they changed, with the grant
-- and the audit row (limits_sync_one); the box's run concurrency likewise (p_box_base NULL: none
-- declared; p_box_ceiling its floor(base x burst), config.box_ceiling); and every other declared
-- limit (not a workflow's own bound, not the box) marked undeclared. Operator overrides survive.
-- A name that belongs to a workflow's own bound ('bound_taken', with bad_name) or to the box's run
-- concurrency ('box_taken_by_limit'), or a box whose name a plain limit holds ('box_taken'), is
-- refused before anything is written. The names created,
-- updated and undeclared come back in the order the Python track reports them; `woken`: the runs
-- the grants woke.
CREATE OR REPLACE FUNCTION limits_sync_workspace(
    p_names text[], p_capacities integer[], p_max_holds bigint[], p_per_keys integer[], p_shares text[],
    p_box_base integer, p_box_burst double precision, p_box_ceiling integer, p_no_max_hold bigint,
    p_actor text, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    -- SPEC 14.1: each limit's on_full, max_waiting, max_waiting_per_key; NULL arrays (a caller of
    -- the release before, in a rolling deploy, which knows none of them) keep what is declared
    p_on_fulls text[] DEFAULT NULL, p_max_waitings integer[] DEFAULT NULL, p_max_waitings_per_key integer[] DEFAULT NULL,
    OUT outcome text, OUT bad_name text, OUT created text[], OUT updated text[], OUT undeclared text[],
    OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
SET extra_float_digits = 1 AS $$  -- limits_box_text: a float's shortest exact text
DECLARE
    v_locked bigint[];
    v_old text;
    v_ceiling bigint;
    v_on_full text;
    v_max_waiting integer;
    v_max_waiting_per_key integer;
    l limits_limit;
    i integer;
BEGIN
    created := '{}';
    updated := '{}';
    undeclared := '{}';
    woken := '{}';
    v_locked := ARRAY(SELECT id FROM limits_limit ORDER BY id FOR NO KEY UPDATE);
    SELECT n.name, CASE m.kind WHEN 'workflow' THEN 'bound_taken' ELSE 'box_taken_by_limit' END
    INTO bad_name, outcome
    FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
    JOIN limits_limit m ON m.name = n.name AND m.kind <> 'limit' ORDER BY n.ord LIMIT 1;
    IF FOUND THEN
        RETURN;  -- a workflow's own bound's name, or the box's
    END IF;
    IF p_box_base IS NOT NULL AND EXISTS (SELECT 1 FROM limits_limit WHERE name = 'box' AND kind <> 'box') THEN
        outcome := 'box_taken';
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_names), 0) LOOP
        SELECT * INTO l FROM limits_limit WHERE name = p_names[i];
        IF p_on_fulls IS NULL THEN
            v_on_full := coalesce(l.declared_on_full, 'wait');
            v_max_waiting := l.declared_max_waiting;
            v_max_waiting_per_key := l.declared_max_waiting_per_key;
        ELSE
            v_on_full := p_on_fulls[i];
            v_max_waiting := p_max_waitings[i];
            v_max_waiting_per_key := p_max_waitings_per_key[i];
        END IF;
        IF l.id IS NULL THEN
            INSERT INTO limits_limit (
                name, kind, declared, declared_capacity, declared_max_hold_ms, declared_per_key, declared_share,
                declared_on_full, declared_max_waiting, declared_max_waiting_per_key,
                busy_count, reserved_count, waiting_count, next_position, created_at, updated_at
            ) VALUES (
                p_names[i], 'limit', true, p_capacities[i], p_max_holds[i], p_per_keys[i], p_shares[i],
                v_on_full, v_max_waiting, v_max_waiting_per_key,
                0, 0, 0, 1, coalesce(p_now, clock_timestamp()), coalesce(p_now, clock_timestamp())
            );
            created := created || p_names[i];
            CONTINUE;
        END IF;
        IF (l.declared, l.declared_capacity, l.declared_max_hold_ms, l.declared_per_key, l.declared_share::text,
            l.declared_on_full::text, l.declared_max_waiting, l.declared_max_waiting_per_key)
           IS NOT DISTINCT FROM (true, p_capacities[i], p_max_holds[i], p_per_keys[i], p_shares[i],
            v_on_full, v_max_waiting, v_max_waiting_per_key) THEN
            CONTINUE;
        END IF;
        v_old := limits_declared_text(l);
        UPDATE limits_limit SET declared = true, declared_capacity = p_capacities[i],
            declared_max_hold_ms = p_max_holds[i], declared_per_key = p_per_keys[i], declared_share = p_shares[i],
            declared_on_full = v_on_full, declared_max_waiting = v_max_waiting,
            declared_max_waiting_per_key = v_max_waiting_per_key
        WHERE id = l.id;
        IF l.share_override = '' AND l.declared_share::text IS DISTINCT FROM p_shares[i] THEN
            PERFORM limits_restart_turns(l.id);  -- keys.restart_turns: the share in force switched
        END IF;
        woken := woken || limits_sync_one(
            l.id, v_locked, v_old, 'declared', p_actor, p_now, p_reservation_ms, p_owed_after_ms
        );
        updated := updated || p_names[i];
    END LOOP;
    -- python_operators._sync_box (SPEC 12.1)
    SELECT * INTO l FROM limits_limit WHERE name = 'box' AND kind = 'box';
    IF p_box_base IS NULL THEN
        IF FOUND AND l.declared THEN
            PERFORM limits_sync_undeclare(l.id, p_actor, p_now);
            undeclared := undeclared || 'box'::text;
        END IF;
    ELSIF NOT FOUND THEN
        INSERT INTO limits_limit (
            name, kind, declared, declared_capacity, declared_max_hold_ms, declared_per_key, declared_burst,
            busy_count, reserved_count, waiting_count, next_position, created_at, updated_at
        ) VALUES (
            'box', 'box', true, p_box_ceiling, p_no_max_hold, p_box_base, p_box_burst,
            0, 0, 0, 1, coalesce(p_now, clock_timestamp()), coalesce(p_now, clock_timestamp())
        );
        created := created || 'box'::text;
    ELSIF (l.declared, l.declared_per_key, l.declared_burst) IS DISTINCT FROM (true, p_box_base, p_box_burst) THEN
        v_old := limits_box_text(l) || CASE WHEN l.declared THEN '' ELSE ', undeclared' END;
        -- _keep_box_capacity: an operator's base or burst keeps the ceiling in capacity_override;
        -- one that the new declared values would take past the maximum goes
        l.declared_per_key := p_box_base;
        l.declared_burst := p_box_burst;
        v_ceiling := limits_box_override(l);
        UPDATE limits_limit SET declared = true, declared_per_key = p_box_base, declared_burst = p_box_burst,
            declared_capacity = p_box_ceiling,
            per_key_override = CASE WHEN v_ceiling > limits_max_capacity() THEN NULL ELSE per_key_override END,
            burst_override = CASE WHEN v_ceiling > limits_max_capacity() THEN NULL ELSE burst_override END,
            capacity_override = CASE WHEN v_ceiling > limits_max_capacity() THEN NULL ELSE v_ceiling END
        WHERE id = l.id;
        woken := woken || limits_sync_one(l.id, v_locked, v_old, 'box', p_actor, p_now, p_reservation_ms, p_owed_after_ms);
        updated := updated || 'box'::text;
    END IF;
    FOR l IN SELECT * FROM limits_limit
             WHERE id = ANY (v_locked) AND kind = 'limit' AND declared AND NOT name = ANY (p_names) ORDER BY id LOOP
        PERFORM limits_sync_undeclare(l.id, p_actor, p_now);
        undeclared := undeclared || l.name::text;
    END LOOP;
    outcome := 'done';
END
$$;

-- operator_actions.sync_workflow_bounds in one call (SPEC 11.5): each workflow's own bound
-- (p_names[i], total p_capacities[i], per_key p_per_keys[i], and SPEC 14.1's on_full and caps:
-- p_on_fulls[i], p_max_waitings[i], p_max_waitings_per_key[i]; NULL arrays, a caller of the
-- release before in a rolling deploy, keep what is declared) created, or its declared values
-- written where they changed with the grant and the audit row (limits_sync_one); every other
-- declared bound marked undeclared. With p_only (ensure_workflow_bound, SPEC 11.6) only the bounds
-- named are locked and synced. A name a plain limit holds is refused ('bound_taken', bad_name)
-- before anything is written; two first starts at once create the bound once.
CREATE OR REPLACE FUNCTION limits_sync_bounds(
    p_names text[], p_capacities integer[], p_per_keys integer[], p_no_max_hold bigint, p_only boolean,
    p_actor text, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    p_on_fulls text[] DEFAULT NULL, p_max_waitings integer[] DEFAULT NULL, p_max_waitings_per_key integer[] DEFAULT NULL,
    OUT outcome text, OUT bad_name text, OUT created text[], OUT updated text[], OUT undeclared text[],
    OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_locked bigint[];
    v_old text;
    v_on_full text;
    v_max_waiting integer;
    v_max_waiting_per_key integer;
    l limits_limit;
    i integer;
BEGIN
    created := '{}';
    updated := '{}';
    undeclared := '{}';
    woken := '{}';
    IF p_only THEN
        v_locked := ARRAY(SELECT id FROM limits_limit WHERE name = ANY (p_names) ORDER BY id FOR NO KEY UPDATE);
    ELSE
        v_locked := ARRAY(SELECT id FROM limits_limit ORDER BY id FOR NO KEY UPDATE);
    END IF;
    SELECT n.name INTO bad_name FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
    JOIN limits_limit m ON m.name = n.name AND m.kind <> 'workflow' ORDER BY n.ord LIMIT 1;
    IF FOUND THEN
        outcome := 'bound_taken';
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_names), 0) LOOP
        SELECT * INTO l FROM limits_limit WHERE name = p_names[i] AND id = ANY (v_locked);
        IF p_on_fulls IS NULL THEN
            v_on_full := coalesce(l.declared_on_full, 'wait');
            v_max_waiting := l.declared_max_waiting;
            v_max_waiting_per_key := l.declared_max_waiting_per_key;
        ELSE
            v_on_full := p_on_fulls[i];
            v_max_waiting := p_max_waitings[i];
            v_max_waiting_per_key := p_max_waitings_per_key[i];
        END IF;
        IF l.id IS NULL THEN
            INSERT INTO limits_limit (
                name, kind, declared, declared_capacity, declared_max_hold_ms, declared_per_key,
                declared_on_full, declared_max_waiting, declared_max_waiting_per_key,
                busy_count, reserved_count, waiting_count, next_position, created_at, updated_at
            ) VALUES (
                p_names[i], 'workflow', true, p_capacities[i], p_no_max_hold, p_per_keys[i],
                v_on_full, v_max_waiting, v_max_waiting_per_key,
                0, 0, 0, 1, coalesce(p_now, clock_timestamp()), coalesce(p_now, clock_timestamp())
            ) ON CONFLICT (name) DO NOTHING;  -- two first starts at once: one creates it, both use it
            created := created || p_names[i];
            CONTINUE;
        END IF;
        IF (l.declared, l.declared_capacity, l.declared_per_key, l.declared_on_full::text, l.declared_max_waiting,
            l.declared_max_waiting_per_key)
           IS NOT DISTINCT FROM (
            true, p_capacities[i], p_per_keys[i], v_on_full, v_max_waiting, v_max_waiting_per_key
           ) THEN
            CONTINUE;
        END IF;
        v_old := limits_bound_text(l);
        UPDATE limits_limit SET declared = true, declared_capacity = p_capacities[i], declared_per_key = p_per_keys[i],
            declared_on_full = v_on_full, declared_max_waiting = v_max_waiting,
            declared_max_waiting_per_key = v_max_waiting_per_key
        WHERE id = l.id;
        woken := woken || limits_sync_one(l.id, v_locked, v_old, 'bound', p_actor, p_now, p_reservation_ms, p_owed_after_ms);
        updated := updated || p_names[i];
    END LOOP;
    IF NOT p_only THEN
        FOR l IN SELECT * FROM limits_limit
                 WHERE id = ANY (v_locked) AND kind = 'workflow' AND declared AND NOT name = ANY (p_names)
                 ORDER BY id LOOP
            PERFORM limits_sync_undeclare(l.id, p_actor, p_now);
            undeclared := undeclared || l.name::text;
        END LOOP;
    END IF;
    outcome := 'done';
END
$$;

-- keys.partners: the limits of every group waiting in, or reserved from, this limit (read without
-- locks: the caller locks them all in id order).
CREATE OR REPLACE FUNCTION limits_partners(p_limit bigint) RETURNS bigint[]
LANGUAGE plpgsql STABLE SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_freed bigint[];
    v_found bigint[];
    v_checked bigint[];
    v_new bigint[];
BEGIN
    -- keys.partners: the limits of the groups reserved from this limit (a release or a lapse
    -- frees each of them), then of the groups waiting in this limit or in those; then, again and
    -- again, of the groups waiting in a limit so found where a passed-over run waits (10.4).
    v_freed := ARRAY(
        SELECT s.limit_id FROM limits_slot s
        WHERE s.state = 'reserved' AND s.request IN (
            SELECT r.request FROM limits_slot r
            WHERE r.limit_id = p_limit AND r.state = 'reserved' AND r.group_size > 1
        )
    );
    v_found := v_freed || limits_waiting_groups_limits(p_limit || v_freed);
    v_checked := p_limit || v_freed;
    LOOP
        v_new := ARRAY(SELECT DISTINCT f FROM unnest(v_found) f WHERE NOT f = ANY (v_checked));
        EXIT WHEN cardinality(v_new) = 0;
        v_checked := v_checked || v_new;
        v_found := v_found || limits_waiting_groups_limits(ARRAY(
            SELECT n FROM unnest(v_new) n
            WHERE EXISTS (
                SELECT 1 FROM limits_queueentry p  -- queue_waiting_passed_over
                WHERE p.limit_id = n AND p.state = 'waiting' AND p.passed_over_at IS NOT NULL
            )
        ));
    END LOOP;
    RETURN v_found;
END
$$;

-- keys._waiting_groups_limits: the limits of every group waiting in these limits.
CREATE OR REPLACE FUNCTION limits_waiting_groups_limits(p_limits bigint[]) RETURNS bigint[]
LANGUAGE plpgsql STABLE SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_requests text[];
BEGIN
    IF cardinality(p_limits) = 0 THEN
        RETURN '{}';
    END IF;
    -- The groups first (queue_waiting_groups), then their entries by request: O(groups waiting
    -- here). Left to itself, the planner walked every waiting entry of the table per group, or
    -- once with each checked against every request (O(groups^2): 12 ms a call at 300 groups,
    -- 44 ms at 1,500).
    v_requests := ARRAY(
        SELECT DISTINCT w.request FROM limits_queueentry w
        WHERE w.limit_id = ANY (p_limits) AND w.state = 'waiting' AND w.group_size > 1
    );
    RETURN ARRAY(
        SELECT DISTINCT q.limit_id FROM unnest(v_requests) r (request) CROSS JOIN LATERAL (
            SELECT e.limit_id FROM limits_queueentry e  -- queue_one_waiting_entry_per_request
            WHERE e.request = r.request AND e.state = 'waiting'
            OFFSET 0  -- not flattened: one index descent per request, never a walk of the queue
        ) q
    );
END
$$;

-- limits.engine.python._previous_group_outcome: what became of an earlier acquire call with this
-- request, in one call (issue 26). The request's slots and queue entries are read in one
-- statement, so in one snapshot: a grant or a lapse that commits meanwhile is seen whole or not
-- at all (the Python track reads them in two statements and reads again when a grant fell
-- between them, tests/services/test_replay_races.py). A reservation is confirmed or lapsed first
-- (limits_confirm_or_lapse: a group's together; `woken`, the runs its grant woke), then all is
-- read again. Live busy slots: 'busy'. Else the latest round of its queue entries (the first
-- group_size by newest id): all waiting, 'waiting'; one timed out, 'timed_out'; one cancelled or
-- still waiting, 'cancelled' (each with the newest entry's timeout and deadline); all granted,
-- the slots answer: the newest confirmed ones, 'busy' (ended since: what it was granted), else
-- the newest ones, 'cancelled' (no slot). `names` and `slot_ids` in the order of p_names (the
-- rest after, in limit id order), `key` the first's. outcome NULL: no trace of the request.
CREATE OR REPLACE FUNCTION limits_previous(
    p_request text, p_names text[], p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    OUT outcome text, OUT names text[], OUT slot_ids text[], OUT deadline timestamptz, OUT timeout_ms bigint,
    OUT key text, OUT woken text[], OUT replaced_by text, OUT replaced_by_run text
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_slots limits_slot[];
    v_entries limits_queueentry[];
    v_latest limits_queueentry[];
    v_first limits_queueentry;
    v_answer limits_slot[];
    v_states text[];
    v_newest timestamptz;
    v_lapse record;
    v_round integer;
BEGIN
    woken := '{}';
    FOR v_round IN 1 .. 10 LOOP  -- read again after a confirm or a lapse
        SELECT ARRAY(SELECT s FROM limits_slot s WHERE s.request = p_request),
               ARRAY(SELECT e FROM limits_queueentry e WHERE e.request = p_request ORDER BY e.id DESC)
        INTO v_slots, v_entries;
        IF EXISTS (SELECT 1 FROM unnest(v_slots) s WHERE s.state = 'reserved') THEN
            SELECT * INTO v_lapse FROM limits_confirm_or_lapse(
                (SELECT s.id FROM unnest(v_slots) s WHERE s.state = 'reserved' LIMIT 1),
                p_now, p_reservation_ms, p_owed_after_ms
            );
            woken := woken || v_lapse.woken;
            CONTINUE;
        END IF;
        v_answer := ARRAY(SELECT s FROM unnest(v_slots) s WHERE s.state = 'busy');
        outcome := 'busy';
        IF cardinality(v_answer) = 0 AND cardinality(v_entries) > 0 THEN
            v_first := v_entries[1];
            v_latest := v_entries[1:v_first.group_size];
            v_states := ARRAY(SELECT DISTINCT e.state::text FROM unnest(v_latest) e);
            outcome := CASE
                WHEN v_states = ARRAY['waiting'] THEN 'waiting'
                WHEN 'replaced' = ANY (v_states) THEN 'replaced'  -- SPEC 14.3
                WHEN 'timed_out' = ANY (v_states) THEN 'timed_out'
                WHEN 'cancelled' = ANY (v_states) OR 'waiting' = ANY (v_states) THEN 'cancelled'
            END;
            IF outcome IS NOT NULL THEN
                SELECT array_agg(m.name::text ORDER BY coalesce(array_position(p_names, m.name::text), 2147483647), m.id)
                INTO names
                FROM unnest(v_latest) e JOIN limits_limit m ON m.id = e.limit_id;
                key := v_first.key;
                timeout_ms := v_first.timeout_ms;
                deadline := v_first.deadline;
                IF outcome = 'replaced' THEN  -- python._run_of: the replacing acquisition's run
                    replaced_by := v_first.replaced_by;
                    replaced_by_run := coalesce(
                        (SELECT e.run_id FROM limits_queueentry e WHERE e.request = v_first.replaced_by LIMIT 1),
                        (SELECT s.run_id FROM limits_slot s WHERE s.request = v_first.replaced_by LIMIT 1),
                        ''
                    );
                END IF;
                RETURN;
            END IF;
            outcome := 'busy';  -- granted (its slot in the same snapshot): the slots answer
        END IF;
        IF cardinality(v_answer) = 0 THEN  -- the slots it was granted: the newest confirmed, else the newest
            SELECT max(s.granted_at) INTO v_newest FROM unnest(v_slots) s WHERE s.confirmed_at IS NOT NULL;
            IF v_newest IS NULL THEN
                SELECT max(s.granted_at) INTO v_newest FROM unnest(v_slots) s;
                outcome := 'cancelled';
            END IF;
            IF v_newest IS NULL THEN
                outcome := NULL;
                RETURN;
            END IF;
            v_answer := ARRAY(
                SELECT s FROM unnest(v_slots) s
                WHERE s.granted_at = v_newest AND (outcome = 'cancelled' OR s.confirmed_at IS NOT NULL)
            );
        END IF;
        SELECT array_agg(m.name::text ORDER BY coalesce(array_position(p_names, m.name::text), 2147483647), m.id),
               array_agg(s.id::text ORDER BY coalesce(array_position(p_names, m.name::text), 2147483647), m.id),
               (array_agg(s.key::text ORDER BY coalesce(array_position(p_names, m.name::text), 2147483647), m.id))[1]
        INTO names, slot_ids, key
        FROM unnest(v_answer) s JOIN limits_limit m ON m.id = s.limit_id;
        IF outcome = 'cancelled' THEN
            slot_ids := NULL;  -- a request whose slots ended unconfirmed answers no slot
        END IF;
        RETURN;
    END LOOP;
    RAISE EXCEPTION 'limits_previous: request % kept changing while it was read', p_request;
END
$$;

-- Acquire (SPEC 2.2, 2.3, 3.1): a request already holding a live slot answers it (confirming a
-- reservation in time); a new request on a declared limit is granted a busy slot when nobody
-- waits and a slot is free, or joins the end of the queue when every slot is taken. A limit that
-- is not plain (per_key, keyed or group entries waiting), or whose queue a settle is due on, is
-- limits_acquire_group's case, called from here: one round trip whatever the limit (`woken`: the
-- runs its grant woke).
CREATE OR REPLACE FUNCTION limits_acquire(
    p_name text, p_run text, p_request text, p_label text, p_timeout_ms bigint, p_now timestamptz,
    -- results.RESERVATION_MS, keys.OWED_AFTER_MS: defaults, so that a caller of the older six
    -- arguments (a worker of the release before, during a rolling deploy) is answered as before
    p_reservation_ms bigint DEFAULT 120000, p_owed_after_ms bigint DEFAULT 120000,
    -- SPEC 14: this call's on_full ('wait', 'skip', 'replace'), NULL for the limit's own
    p_on_full text DEFAULT NULL,
    OUT outcome text, OUT limit_name text, OUT slot_id text, OUT deadline timestamptz, OUT woken text[],
    OUT answer_timeout_ms bigint, OUT answer_key text, OUT reason text, OUT replaced_by text,
    OUT replaced_by_run text
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_now timestamptz;
    v_state text;
    v_rules boolean := false;  -- the case of the grant rules: limits_acquire_group's
    v_problem text;  -- 'unknown', 'undeclared': the answer, once the lock is given back
    v_group record;
BEGIN
    woken := '{}';
    SELECT s.id, s.state, m.name, s.key INTO slot_id, v_state, limit_name, answer_key
    FROM limits_slot s JOIN limits_limit m ON m.id = s.limit_id
    WHERE s.request = p_request AND s.state IN ('busy', 'reserved')
    ORDER BY m.name <> p_name, s.limit_id  -- a group's: the limit named first (python._in_order)
    LIMIT 1;
    IF FOUND THEN
        outcome := CASE WHEN v_state = 'busy' THEN 'busy' ELSE limits_confirm(slot_id, p_now) END;
        IF outcome = 'busy' THEN
            RETURN;
        END IF;
        v_rules := true;  -- a late reservation, or a group's: limits_acquire_group (limits_previous)
    ELSIF EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request)
          OR EXISTS (SELECT 1 FROM limits_queueentry WHERE request = p_request) THEN
        v_rules := true;  -- an earlier outcome: limits_acquire_group reads it (limits_previous)
    END IF;
    IF NOT v_rules THEN
    BEGIN
        SELECT * INTO l FROM limits_limit WHERE name = p_name FOR NO KEY UPDATE;
        IF NOT FOUND OR NOT l.declared THEN  -- the caller words the error; the lock goes back
            v_problem := CASE WHEN l.id IS NULL THEN 'unknown' ELSE 'undeclared' END;
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';
        END IF;
        IF NOT limits_is_plain(l)
           OR (l.waiting_count > 0
               AND (limits_room(l) > 0 OR EXISTS (  -- a settle is due
                   SELECT 1 FROM limits_queueentry q
                   WHERE q.limit_id = l.id AND q.state = 'waiting'
                     AND q.deadline <= limits_clock(p_now, l.last_event_at)
               ))) THEN
            v_rules := true;
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';  -- the lock goes back: the rules lock in id order
        END IF;
        limit_name := l.name;
        v_now := limits_clock(p_now, l.last_event_at);
        IF limits_room(l) > 0 THEN
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
        -- SPEC 14.3: a replace with runs waiting (all without a key here) is the rules' case
        IF coalesce(p_on_full, limits_on_full(l)) = 'replace' AND l.waiting_count > 0 THEN
            v_rules := true;
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';
        END IF;
        -- SPEC 14.2, 14.5: a plain limit without room grants nothing to this run at once
        IF coalesce(p_on_full, limits_on_full(l)) = 'skip' THEN
            reason := CASE WHEN l.paused_at IS NOT NULL THEN 'limit_paused' ELSE 'limit_full' END;
        ELSE
            reason := limits_queue_full(l, '');
        END IF;
        IF reason IS NOT NULL THEN
            outcome := CASE WHEN coalesce(p_on_full, limits_on_full(l)) = 'skip' THEN 'skipped' ELSE 'refused' END;
            UPDATE limits_limit
            SET skipped_count = skipped_count + (outcome = 'skipped')::integer,
                refused_count = refused_count + (outcome = 'refused')::integer, last_event_at = v_now
            WHERE id = l.id;
            RETURN;
        END IF;
        deadline := v_now + p_timeout_ms * interval '1 millisecond';
        INSERT INTO limits_queueentry (
            limit_id, run_id, request, label, position, state, enqueued_at, deadline, timeout_ms, replacing
        ) VALUES (
            l.id, p_run, p_request, p_label, l.next_position, 'waiting', v_now, deadline, p_timeout_ms,
            coalesce(p_on_full, limits_on_full(l)) = 'replace'  -- SPEC 14.3: nobody of its key waits here
        );
        UPDATE limits_limit
        SET waiting_count = waiting_count + 1, next_position = next_position + 1, last_event_at = v_now
        WHERE id = l.id;
        outcome := 'waiting';
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        outcome := coalesce(v_problem, 'slow');
        limit_name := p_name;
    END;
    END IF;
    IF v_rules THEN
        SELECT * INTO v_group FROM limits_acquire_group(
            ARRAY[p_name], p_run, p_request, p_label, ARRAY[''], p_timeout_ms, p_now, p_reservation_ms,
            p_owed_after_ms, false, p_on_full
        );
        outcome := v_group.outcome;
        limit_name := coalesce(v_group.bad_name, v_group.answer_names[1], p_name);
        slot_id := v_group.slot_ids[1];
        deadline := v_group.deadline;
        woken := v_group.woken;
        answer_timeout_ms := v_group.answer_timeout_ms;
        answer_key := v_group.answer_key;
        reason := v_group.reason;
        replaced_by := v_group.replaced_by;
        replaced_by_run := v_group.replaced_by_run;
    END IF;
END
$$;

-- full.end_replaced_starts (SPEC 14.3 for a run's start): each run whose start acquisition
-- ('<run>:start') is among the requests p_replaced (those the acquisition p_request of run p_run
-- replaced), still queued, ends 'replaced', never started, at the run layer's time (p_now, else
-- the statement's): end_reason and end_limit the first of the replacing acquisition's limits
-- p_limits (locked, each with its key pool p_keys) that stops it once it joined (limits_refusal,
-- at the limits' clock p_clock), else its first limit, 'limit_full' ('box_full' for the box);
-- caused_by p_run. Its entries left the queues already and it holds nothing; it was woken (the
-- worker finds it finished). A run whose row another transaction holds is not waited for (that
-- one locked the run before the limits: waiting would deadlock): a cancel ends it, or its worker's
-- start gate finds its start replaced and ends it so (limits.runs.bounds.starting). How many runs
-- ended.
CREATE OR REPLACE FUNCTION limits_end_replaced_starts(
    p_replaced text[], p_run text, p_request text, p_limits bigint[], p_keys text[], p_base integer,
    p_clock timestamptz, p_now timestamptz, p_owed_after_ms bigint
) RETURNS integer
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_runs text[] := ARRAY(SELECT left(r, -6) FROM unnest(p_replaced) r WHERE right(r, 6) = ':start');
    v_reason text;
    v_limit text;
    v_ended integer;
    i integer;
BEGIN
    IF cardinality(v_runs) = 0 THEN
        RETURN 0;
    END IF;
    FOR i IN 1 .. cardinality(p_limits) LOOP
        SELECT * INTO l FROM limits_limit WHERE id = p_limits[i];
        v_reason := limits_refusal(l, p_keys[i], p_request, p_base, p_clock, p_owed_after_ms);
        IF v_reason IS NOT NULL THEN
            v_limit := l.name;
            EXIT;
        END IF;
    END LOOP;
    IF v_reason IS NULL THEN
        SELECT * INTO l FROM limits_limit WHERE id = p_limits[1];
        v_limit := l.name;
        v_reason := CASE WHEN l.kind = 'box' THEN 'box_full' ELSE 'limit_full' END;
    END IF;
    UPDATE studio_run
    SET status = 'replaced', end_reason = v_reason, end_limit = v_limit, caused_by = p_run, suspended = false,
        waiting_for = '', wait_deadline = NULL, lease_owner = '', lease_until = NULL,
        finished_at = coalesce(p_now, statement_timestamp()), updated_at = coalesce(p_now, statement_timestamp())
    WHERE id IN (  -- a run row another transaction holds (its worker at its start gate, a cancel) is left
        SELECT r.id FROM studio_run r WHERE r.id = ANY (v_runs) AND r.status = 'queued' FOR UPDATE SKIP LOCKED
    );
    GET DIAGNOSTICS v_ended = ROW_COUNT;
    RETURN v_ended;
END
$$;

-- limits.engine.slots.acquire_group for a new request, with a key and/or several limits (SPEC 9,
-- 10), in one call (issue 26). The limits are locked in id order with the other limits of the
-- groups waiting in them (keys.lock). If nobody waits on any of them and each has room in its
-- total and the key's pool: busy slots of every limit at once, in one statement each, and their
-- counters. Otherwise the run joins every queue, and the free capacity is granted by
-- limits_grant: if this very run is granted (its reservations come back in the same call) they
-- are confirmed at once, as the Python rules do ('busy'); else it waits ('waiting', with its
-- deadline). The slot ids come back in the order of p_names; `woken`: the other runs to wake.
-- p_keys: each limit's key pool (the run's key; the box bound's own key, SPEC 12.3). p_box: the
-- last limit is the box bound (SPEC 12.2): the box slot the run executes in, if it holds one, is
-- kept if the other limits have room at once, else given back before the run joins every queue.
-- An unknown name answers 'unknown', an undeclared one 'undeclared' (the first in p_names, as
-- bad_name; the caller words the error), before changing anything. An earlier request answers
-- what became of it: its reservations in time confirmed together (limits_confirm_group), else
-- limits_previous, whose names, key and timeout come back as answer_names, answer_key and
-- answer_timeout_ms (NULL for a new request: p_names, p_keys[1] and p_timeout_ms stand; a
-- confirm answers the slots' key, its names are p_names).
CREATE OR REPLACE FUNCTION limits_acquire_group(
    p_names text[], p_run text, p_request text, p_label text, p_keys text[], p_timeout_ms bigint,
    p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint, p_box boolean,
    -- SPEC 14: this call's on_full ('wait', 'skip', 'replace'), NULL for the strictest of the limits' own
    p_on_full text DEFAULT NULL,
    OUT outcome text, OUT slot_ids text[], OUT deadline timestamptz, OUT woken text[], OUT bad_name text,
    OUT answer_names text[], OUT answer_key text, OUT answer_timeout_ms bigint, OUT reason text,
    OUT full_name text, OUT replaced_by text, OUT replaced_by_run text
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_mine bigint[];
    v_ids bigint[];
    v_now timestamptz;
    v_free boolean := true;
    v_slot text;
    v_size integer := cardinality(p_names);
    v_held limits_slot;
    v_base integer;
    v_need integer := cardinality(p_names);
    v_keyed integer;
    v_grouped integer := (cardinality(p_names) > 1)::integer;
    v_pass bigint;
    v_on_full text := coalesce(p_on_full, 'wait');
    v_capped boolean := false;
    v_special boolean := false;  -- a limit read for v_free skips, replaces or caps its queue
    v_replaced text[] := '{}';  -- SPEC 14.3: the requests this one replaces
    v_place bigint;
    v_oldest bigint;
    v_gone integer;
    settled record;
    i integer;
BEGIN
    outcome := 'slow';
    slot_ids := '{}';
    woken := '{}';
    IF EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request AND state IN ('busy', 'reserved')) THEN
        SELECT * INTO outcome, slot_ids FROM limits_confirm_group(p_names, p_request, p_now);
        IF outcome = 'busy' THEN  -- the woken run's confirm, its reservations in time
            SELECT s.key INTO answer_key FROM limits_slot s WHERE s.id = slot_ids[1];  -- the slots' key
            RETURN;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request)
       OR EXISTS (SELECT 1 FROM limits_queueentry WHERE request = p_request) THEN
        SELECT p.outcome, coalesce(p.slot_ids, '{}'), p.deadline, p.woken, p.names, p.key, p.timeout_ms,
               p.replaced_by, p.replaced_by_run
        INTO outcome, slot_ids, deadline, woken, answer_names, answer_key, answer_timeout_ms, replaced_by,
             replaced_by_run
        FROM limits_previous(p_request, p_names, p_now, p_reservation_ms, p_owed_after_ms) p;
        IF outcome IS NOT NULL THEN
            RETURN;
        END IF;
        outcome := 'slow';  -- no trace left (purged): a new request
        slot_ids := '{}';
        woken := coalesce(woken, '{}');
    END IF;
    SELECT array_agg(lim.id ORDER BY n.ord) INTO v_mine
    FROM unnest(p_names) WITH ORDINALITY AS n(name, ord) JOIN limits_limit lim ON lim.name = n.name;
    IF v_mine IS NULL OR cardinality(v_mine) <> v_size THEN
        SELECT n.name INTO bad_name FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
        WHERE NOT EXISTS (SELECT 1 FROM limits_limit m WHERE m.name = n.name) ORDER BY n.ord LIMIT 1;
        outcome := CASE WHEN bad_name IS NULL THEN 'slow' ELSE 'unknown' END;  -- 'slow': a name repeated
        RETURN;
    END IF;
    IF (SELECT count(DISTINCT x) FROM unnest(v_mine) x) <> v_size THEN
        RETURN;  -- a repeated name: limits.engine.slots refuses it before the call
    END IF;
    BEGIN
        SELECT k.ids, k.clock INTO v_ids, v_now FROM limits_lock(v_mine, p_now) k;
        SELECT m.name INTO bad_name FROM unnest(v_mine) WITH ORDINALITY AS n(id, ord)
        JOIN limits_limit m ON m.id = n.id AND NOT m.declared ORDER BY n.ord LIMIT 1;
        IF bad_name IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';  -- 'undeclared', once the locks are given back
        END IF;
        UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
        -- python._held_slot: the box slot the run executes in (SPEC 12.2), kept if the rest is free
        IF p_box THEN
            SELECT * INTO v_held FROM limits_slot
            WHERE run_id = p_run AND limit_id = v_mine[v_size] AND state = 'busy' LIMIT 1;
            IF FOUND THEN
                v_need := v_size - 1;
            END IF;
        END IF;
        IF right(p_request, 6) = ':start' THEN
            v_base := limits_box_base();  -- SPEC 12.3: whole runs per limit
        END IF;
        FOR i IN 1 .. v_need LOOP
            SELECT * INTO l FROM limits_limit WHERE id = v_mine[i];
            v_free := v_free AND l.waiting_count = 0 AND limits_room(l) > 0 AND limits_pool_room(l, p_keys[i])
                      AND limits_whole_run_room(l, p_request, v_base);
            -- from the row just read: does this limit skip, replace or cap its queue (SPEC 14)?
            v_special := v_special OR limits_on_full(l) <> 'wait' OR limits_max_waiting(l) IS NOT NULL
                         OR limits_max_waiting_per_key(l) IS NOT NULL;
        END LOOP;
        -- SPEC 14.2, 14.3, 14.5, 14.7: skip or replace (the strictest on_full), or a queue's cap
        -- (python._answered_at_once); a run's start (its request '<run>:start') too
        -- (limits_start_runs ends a start answered at once 'skipped'; the queued runs a start
        -- replaces end 'replaced': limits_end_replaced_starts). A call whose limits all
        -- wait uncapped (v_special false, the box slot it holds aside), with no on_full of its own,
        -- reads no row again here.
        IF NOT v_free AND (v_special OR v_need < v_size OR v_on_full <> 'wait') THEN
            FOR i IN 1 .. v_size LOOP
                SELECT * INTO l FROM limits_limit WHERE id = v_mine[i];
                IF p_on_full IS NULL THEN
                    v_on_full := limits_stricter_on_full(v_on_full, limits_on_full(l));
                END IF;
                v_capped := v_capped OR limits_max_waiting(l) IS NOT NULL OR limits_max_waiting_per_key(l) IS NOT NULL;
            END LOOP;
            IF v_on_full = 'cancel_running' THEN  -- SPEC 14.4: the acquisition waits; the start's
                v_on_full := 'wait';              -- cancel is limits_cancel_running's, after it joined
            END IF;
            IF v_on_full <> 'wait' OR v_capped THEN
                -- the runs waiting first; what room is left then is this run's if it fits: it
                -- joins below and the grant reaches it at once, as it reaches any run (3.5)
                SELECT * INTO settled FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms);
                woken := settled.woken;
                FOR i IN 1 .. v_need LOOP
                    SELECT * INTO l FROM limits_limit WHERE id = v_mine[i];
                    reason := limits_refusal(l, p_keys[i], p_request, v_base, v_now, p_owed_after_ms);
                    IF reason IS NOT NULL THEN
                        full_name := l.name;
                        EXIT;
                    END IF;
                END LOOP;
                IF full_name IS NOT NULL AND v_on_full = 'replace' THEN
                    -- full.replaceable: the requests waiting for exactly these limits, each entry of
                    -- the same key ('' the runs without one); a run holding a slot waits for nothing
                    v_replaced := ARRAY(SELECT r FROM limits_replaceable(v_mine, p_keys, p_request) AS r);
                    IF cardinality(v_replaced) > 0 THEN  -- it joins in the oldest one's place below
                        reason := NULL;
                        full_name := NULL;
                        -- full.wake_replaced: their runs wake to SlotReplacedError (limits_previous)
                        woken := woken || ARRAY(
                            SELECT e.run_id FROM limits_queueentry e
                            WHERE e.request = ANY (v_replaced) AND e.state = 'waiting'
                            GROUP BY e.run_id ORDER BY min(e.id)
                        );
                    END IF;
                END IF;
                IF full_name IS NOT NULL AND v_on_full <> 'skip' THEN
                    reason := NULL;
                    full_name := NULL;
                    FOR i IN 1 .. v_size LOOP
                        SELECT * INTO l FROM limits_limit WHERE id = v_mine[i];
                        reason := limits_queue_full(l, p_keys[i]);
                        IF reason IS NOT NULL THEN
                            full_name := l.name;
                            EXIT;
                        END IF;
                    END LOOP;
                END IF;
                IF full_name IS NOT NULL THEN  -- answered at once; nothing of it stays in a queue
                    outcome := CASE WHEN v_on_full = 'skip' THEN 'skipped' ELSE 'refused' END;
                    UPDATE limits_limit
                    SET skipped_count = skipped_count + (outcome = 'skipped')::integer,
                        refused_count = refused_count + (outcome = 'refused')::integer
                    WHERE name = full_name;
                    RETURN;
                END IF;
            END IF;
        END IF;
        IF v_free THEN
            FOR i IN 1 .. v_need LOOP
                v_keyed := (p_keys[i] <> '')::integer;
                SELECT * INTO l FROM limits_limit WHERE id = v_mine[i];
                v_pass := NULL;
                IF limits_is_fair(l) THEN  -- keys.grant_busy: its key enters the turns, takes one
                    INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at)
                    SELECT l.id, p_keys[i], 0, 0, 0, v_now WHERE p_keys[i] <> ''
                    ON CONFLICT (limit_id, key) DO NOTHING;
                    PERFORM limits_enter_turns(l.id, p_keys[i]);
                    v_pass := limits_take_turn(l, p_keys[i]);
                END IF;
                v_slot := limits_new_slot_id();
                INSERT INTO limits_slot (
                    id, limit_id, run_id, request, label, key, group_size, state, granted_at, confirmed_at,
                    expires_at, freed_by, fair_pass
                ) VALUES (
                    v_slot, l.id, p_run, p_request, p_label, p_keys[i], v_need, 'busy', v_now, v_now,
                    v_now + limits_max_hold(l), '', v_pass
                );
                UPDATE limits_limit
                SET busy_count = busy_count + 1, keyed_busy_count = keyed_busy_count + v_keyed
                WHERE id = l.id;
                IF p_keys[i] <> '' THEN
                    INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at)
                    VALUES (l.id, p_keys[i], 1, 0, 0, v_now)
                    ON CONFLICT (limit_id, key) DO UPDATE SET busy_count = limits_limitkey.busy_count + 1;
                END IF;
                slot_ids := slot_ids || v_slot;
            END LOOP;
            IF v_need < v_size THEN
                slot_ids := slot_ids || v_held.id;
            END IF;
            outcome := 'busy';
            RETURN;
        END IF;
        IF v_need < v_size THEN  -- SPEC 12.2: a run that waits gives its box slot back
            UPDATE limits_slot SET state = 'released', freed_at = v_now, freed_by = 'wait' WHERE id = v_held.id;
            UPDATE limits_limit
            SET busy_count = busy_count - 1, keyed_busy_count = keyed_busy_count - (v_held.key <> '')::integer
            WHERE id = v_held.limit_id;
            UPDATE limits_limitkey SET busy_count = busy_count - 1
            WHERE limit_id = v_held.limit_id AND key = v_held.key AND v_held.key <> '';
        END IF;
        -- keys.join on every limit, then the grant over all the locked limits (settle_all)
        deadline := v_now + p_timeout_ms * interval '1 millisecond';
        FOR i IN 1 .. v_size LOOP
            v_keyed := (p_keys[i] <> '')::integer;
            SELECT * INTO l FROM limits_limit WHERE id = v_mine[i];
            v_pass := NULL;
            IF limits_is_fair(l) THEN  -- keys.join: a key that had nothing enters the turns
                INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at)
                SELECT l.id, p_keys[i], 0, 0, 0, v_now WHERE p_keys[i] <> ''
                ON CONFLICT (limit_id, key) DO NOTHING;
                PERFORM limits_enter_turns(l.id, p_keys[i]);
                v_pass := limits_fair_pass(l.id, p_keys[i]);
            END IF;
            -- SPEC 14.3 (full.take_place): in the place of the oldest entry it replaces here, if
            -- any: that row becomes this entry (its position and id), what it was is kept as a row
            -- of history at a new ticket (positions are unique per limit), and the others replaced
            -- leave; the key's turns and head stay as they were (the key still waits here)
            v_place := NULL;
            v_gone := 0;
            IF cardinality(v_replaced) > 0 THEN
                SELECT e.id, e.position INTO v_oldest, v_place FROM limits_queueentry e
                WHERE e.limit_id = v_mine[i] AND e.state = 'waiting' AND e.request = ANY (v_replaced)
                ORDER BY e.position LIMIT 1;
                SELECT count(*) INTO v_gone FROM limits_queueentry e
                WHERE e.limit_id = v_mine[i] AND e.state = 'waiting' AND e.request = ANY (v_replaced);
            END IF;
            IF v_place IS NOT NULL THEN
                UPDATE limits_limit
                SET next_position = next_position + 1, waiting_count = waiting_count + 1 - v_gone,
                    keyed_waiting_count = keyed_waiting_count + v_keyed * (1 - v_gone),
                    group_waiting_count = group_waiting_count + v_grouped * (1 - v_gone),
                    replaced_count = replaced_count + v_gone
                WHERE id = v_mine[i]
                RETURNING * INTO l;
                INSERT INTO limits_queueentry (
                    limit_id, run_id, request, label, key, group_size, position, passed_over_at, fair_pass, state,
                    enqueued_at, deadline, timeout_ms, finished_at, replaced_by, replacing
                )
                SELECT e.limit_id, e.run_id, e.request, e.label, e.key, e.group_size, l.next_position - 1,
                       e.passed_over_at, e.fair_pass, 'replaced', e.enqueued_at, e.deadline, e.timeout_ms, v_now,
                       p_request, e.replacing
                FROM limits_queueentry e WHERE e.limit_id = l.id AND e.state = 'waiting' AND e.id = v_oldest;
                UPDATE limits_queueentry
                SET run_id = p_run, request = p_request, label = p_label, passed_over_at = NULL, fair_pass = v_pass,
                    enqueued_at = v_now, deadline = limits_acquire_group.deadline, timeout_ms = p_timeout_ms,
                    replacing = true
                WHERE limit_id = l.id AND state = 'waiting' AND id = v_oldest;
                UPDATE limits_queueentry SET state = 'replaced', finished_at = v_now, replaced_by = p_request
                WHERE limit_id = l.id AND state = 'waiting' AND request = ANY (v_replaced);
                UPDATE limits_limitkey SET waiting_count = waiting_count + 1 - v_gone
                WHERE limit_id = l.id AND key = p_keys[i] AND p_keys[i] <> '';
                CONTINUE;
            END IF;
            UPDATE limits_limit
            SET next_position = next_position + 1, waiting_count = waiting_count + 1,
                keyed_waiting_count = keyed_waiting_count + v_keyed,
                group_waiting_count = group_waiting_count + v_grouped
            WHERE id = v_mine[i]
            RETURNING * INTO l;
            INSERT INTO limits_queueentry (
                limit_id, run_id, request, label, key, group_size, position, state, enqueued_at, deadline, timeout_ms,
                fair_pass, replacing
            ) VALUES (
                l.id, p_run, p_request, p_label, p_keys[i], v_size, l.next_position - 1, 'waiting', v_now, deadline,
                p_timeout_ms, v_pass, v_on_full = 'replace'
            );
            IF p_keys[i] <> '' THEN
                INSERT INTO limits_limitkey (limit_id, key, busy_count, reserved_count, waiting_count, created_at, head)
                VALUES (l.id, p_keys[i], 0, 0, 1, v_now, l.next_position - 1)
                ON CONFLICT (limit_id, key) DO UPDATE
                SET waiting_count = limits_limitkey.waiting_count + 1,
                    head = coalesce(limits_limitkey.head, excluded.head);  -- the newest: head of an empty key
            END IF;
        END LOOP;
        SELECT * INTO settled FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms);
        woken := woken || settled.woken;  -- after those of a grant before the join (SPEC 14), if any
        -- SPEC 14.3 (python: full.swap_place): the room left fitted it before it joined, yet the
        -- grant did not reach it (it gave back the box slot it executed in, 12.2, and an older run
        -- took it): it replaces now, the oldest one's row becoming its entry, its own row what the
        -- oldest was (history, at the end); then the grant again
        IF v_on_full = 'replace' AND cardinality(v_replaced) = 0
           AND NOT EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request AND state = 'reserved') THEN
            v_replaced := ARRAY(SELECT r FROM limits_replaceable(v_mine, p_keys, p_request) AS r);
            IF cardinality(v_replaced) > 0 THEN
                woken := woken || ARRAY(
                    SELECT e.run_id FROM limits_queueentry e
                    WHERE e.request = ANY (v_replaced) AND e.state = 'waiting'
                    GROUP BY e.run_id ORDER BY min(e.id)
                );
                FOR i IN 1 .. v_size LOOP
                    SELECT e.id INTO v_oldest FROM limits_queueentry e
                    WHERE e.limit_id = v_mine[i] AND e.state = 'waiting' AND e.request = ANY (v_replaced)
                    ORDER BY e.position LIMIT 1;
                    SELECT count(*) INTO v_gone FROM limits_queueentry e
                    WHERE e.limit_id = v_mine[i] AND e.state = 'waiting' AND e.request = ANY (v_replaced);
                    SELECT e.id, e.fair_pass INTO v_place, v_pass FROM limits_queueentry e
                    WHERE e.limit_id = v_mine[i] AND e.state = 'waiting' AND e.request = p_request;
                    UPDATE limits_queueentry n
                    SET run_id = o.run_id, request = o.request, label = o.label, key = o.key, group_size = o.group_size,
                        passed_over_at = o.passed_over_at, fair_pass = o.fair_pass, state = 'replaced',
                        enqueued_at = o.enqueued_at, deadline = o.deadline, timeout_ms = o.timeout_ms,
                        finished_at = v_now, replaced_by = p_request, replacing = o.replacing
                    FROM limits_queueentry o
                    WHERE n.limit_id = v_mine[i] AND n.state = 'waiting' AND n.id = v_place
                      AND o.limit_id = v_mine[i] AND o.state = 'waiting' AND o.id = v_oldest;
                    UPDATE limits_queueentry
                    SET run_id = p_run, request = p_request, label = p_label, passed_over_at = NULL,
                        fair_pass = v_pass, enqueued_at = v_now, deadline = limits_acquire_group.deadline,
                        timeout_ms = p_timeout_ms, replacing = true
                    WHERE limit_id = v_mine[i] AND state = 'waiting' AND id = v_oldest;
                    UPDATE limits_queueentry SET state = 'replaced', finished_at = v_now, replaced_by = p_request
                    WHERE limit_id = v_mine[i] AND state = 'waiting' AND request = ANY (v_replaced);
                    UPDATE limits_limit
                    SET waiting_count = waiting_count - v_gone,
                        keyed_waiting_count = keyed_waiting_count - (p_keys[i] <> '')::integer * v_gone,
                        group_waiting_count = group_waiting_count - v_grouped * v_gone,
                        replaced_count = replaced_count + v_gone
                    WHERE id = v_mine[i];
                    UPDATE limits_limitkey SET waiting_count = waiting_count - v_gone
                    WHERE limit_id = v_mine[i] AND key = p_keys[i] AND p_keys[i] <> '';
                END LOOP;
                SELECT * INTO settled FROM limits_grant(v_ids, v_now, p_reservation_ms, p_owed_after_ms);
                woken := woken || settled.woken;
            END IF;
        END IF;
        IF cardinality(v_replaced) > 0 THEN  -- SPEC 14.3: the queued runs whose start it replaced
            PERFORM limits_end_replaced_starts(v_replaced, p_run, p_request, v_mine, p_keys, v_base, v_now, p_now,
                                               p_owed_after_ms);
        END IF;
        IF EXISTS (SELECT 1 FROM limits_slot WHERE request = p_request AND state = 'reserved') THEN
            -- granted at once: keys.confirm_group, its reservations turn busy together
            SELECT array_agg(c.slot_id ORDER BY array_position(v_mine, c.limit_id)) INTO slot_ids
            FROM limits_confirm_together(p_request, v_now) c;
            -- this run resumes with its slots: one wake less (limits.engine.python's `changes.woken.remove`, the first
            -- only: another wait of the same run, timed out or granted here, still wakes it)
            i := array_position(woken, p_run);
            woken := woken[:i - 1] || woken[i + 1:];
            deadline := NULL;
            outcome := 'busy';
        ELSE
            outcome := 'waiting';
        END IF;
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        outcome := CASE WHEN bad_name IS NULL THEN 'slow' ELSE 'undeclared' END;
        slot_ids := '{}';
        deadline := NULL;
        woken := '{}';
        RETURN;
    END;
END
$$;

-- limits.runs.bounds.cancel_running (SPEC 14.4, 2.5, 11.4): a start of run p_run under its
-- workflow's own bound p_limit (on_full 'cancel_running') has joined its queues and waits. If the
-- bound is what stops it (its key's pool full: the pool of p_key when the bound has a per_key,
-- else the whole bound full), the oldest run holding a slot of that pool (busy, held for the whole
-- run, granted first) that is not already being cancelled (status 'pending' or 'running') is
-- cancelled as cancel_run cancels it, its cause recorded (end_reason 'cancel_running', end_limit
-- the bound, caused_by p_run) and counted (cancelled_count); and p_run's entry in the bound's
-- queue moves to the front band: its ticket less 2^62, so it waits ahead of every entry that
-- joined by its ticket (the key's other runs, and the other keys'), behind the cancellers before
-- it (their tickets are older). A run executing (running, not suspended, a live lease) keeps its
-- lease and slots until its worker stops (endings.stop_cancelled, or recovery once the lease has
-- run out); any other ends now (limits_end_run: its slots free, and the grant reaches p_run first).
-- No such holder (every one is being cancelled already, or its row is held by a transaction that
-- ends it): nothing is cancelled, p_run waits at its ticket, behind the cancellers. Called with
-- the limits locked (limits_acquire_group took them).
-- victim: the run cancelled (NULL: none); woken: the runs a grant woke.
CREATE OR REPLACE FUNCTION limits_cancel_running(
    p_limit bigint, p_run text, p_key text, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    OUT victim text, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_keyed boolean;
    v_now timestamptz := coalesce(p_now, statement_timestamp());  -- the run layer's time
    v_position bigint;
    v_ended boolean;
    v_candidate text;
    v_wait text;
BEGIN
    woken := '{}';
    SELECT * INTO l FROM limits_limit WHERE id = p_limit;
    IF NOT FOUND OR l.kind <> 'workflow' THEN
        RETURN;
    END IF;
    v_keyed := limits_per_key(l) IS NOT NULL;
    IF (v_keyed AND limits_pool_room(l, p_key)) OR (NOT v_keyed AND limits_room(l) > 0) THEN
        RETURN;  -- the bound's pool has room: something else stops it, and it waits as any run
    END IF;
    -- The limits are locked here, and a run's worker ends it the other way round (its row, then
    -- run_ended's limits): waiting for a holder's row could deadlock. So each candidate's row is
    -- locked waiting at most 100 ms (a lease renewal or a step's record takes less); a
    -- row held longer (its run is being ended, and waits for these limits) passes to the next.
    v_wait := current_setting('lock_timeout');
    FOR v_candidate IN
        SELECT s.run_id FROM limits_slot s JOIN studio_run r ON r.id = s.run_id
        WHERE s.limit_id = p_limit AND s.state = 'busy' AND s.ends_with_run AND (NOT v_keyed OR s.key = p_key)
          AND s.run_id <> p_run AND r.status IN ('pending', 'running')
        ORDER BY s.granted_at, s.id
        LIMIT 20
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            PERFORM 1 FROM studio_run WHERE id = v_candidate AND status IN ('pending', 'running') FOR UPDATE;
            IF FOUND THEN
                victim := v_candidate;
            END IF;
            PERFORM set_config('lock_timeout', v_wait, true);
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- the subtransaction's rollback put lock_timeout back
        END;
        EXIT WHEN victim IS NOT NULL;
    END LOOP;
    IF victim IS NULL THEN
        RETURN;
    END IF;
    UPDATE limits_queueentry SET position = position - 4611686018427387904
    WHERE limit_id = p_limit AND request = p_run || ':start' AND state = 'waiting'
    RETURNING position INTO v_position;
    IF p_key <> '' AND v_position IS NOT NULL THEN
        UPDATE limits_limitkey SET head = least(coalesce(head, v_position), v_position)
        WHERE limit_id = p_limit AND key = p_key;
    END IF;
    UPDATE limits_limit SET cancelled_count = cancelled_count + 1 WHERE id = p_limit;
    -- starts.cancel_run: one UPDATE decides on the row as it is
    UPDATE studio_run r
    SET status = 'cancelled', updated_at = v_now, suspended = false, end_reason = 'cancel_running',
        end_limit = l.name, caused_by = p_run,
        finished_at = CASE WHEN o.executing THEN NULL ELSE v_now END,
        lease_owner = CASE WHEN o.executing THEN r.lease_owner ELSE '' END,
        lease_until = CASE WHEN o.executing THEN r.lease_until END
    FROM (
        SELECT x.id, (x.status = 'running' AND NOT x.suspended AND x.lease_until > v_now AND x.lease_owner <> '')
               AS executing
        FROM studio_run x WHERE x.id = victim
    ) o
    WHERE r.id = o.id AND r.status IN ('queued', 'pending', 'running')
    RETURNING r.finished_at IS NOT NULL INTO v_ended;
    UPDATE studio_step SET status = 'failed', error = 'run cancelled', finished_at = v_now
    WHERE run_id = victim AND status = 'waiting';
    IF v_ended THEN  -- the run layer's run_ended: limits.apps._run_ended, in this transaction
        SELECT e.woken INTO woken FROM limits_end_run(victim, p_now, p_reservation_ms, p_owed_after_ms) e;
    END IF;
END
$$;

-- limits.runs.start.start_runs (SPEC 11.2, 11.3, 12.2; issue 44): runs of one workflow created and their
-- start acquisitions taken in the order given (trigger order), in one call. Each run's bounds are
-- p_limits (its workflow's own bound first, then its named limits) and, while the box is
-- declared, the box (its workflow's pool); each acquisition is limits_acquire_group's, request
-- '<run id>:start', the run's key on every limit. A run whose bounds all had room starts
-- 'pending' (its slots busy and tied to it: ending the run frees them); the others wait 'queued'.
-- A run without bounds and no box is created 'pending'. A run whose acquisition is answered at once
-- (SPEC 14.2, 14.5: p_on_full 'skip', else its bounds' own, or a queue at its cap) is created
-- 'skipped', finished, never started, with its reason and the limit that stopped it (reasons[i],
-- full_names[i]; '' for the others). With replace (SPEC 14.3: p_on_full, else its bounds' own), a
-- run that cannot start at once takes the place of its key's runs queued to start under the same
-- bounds, which end 'replaced' (limits_acquire_group: limits_end_replaced_starts), earlier runs of
-- this batch too (statuses[i] 'replaced', its reason and limit). A run that waits under its
-- workflow's own bound (p_limits[1]) with on_full 'cancel_running' in force (p_on_full, else the
-- strictest of its bounds': SPEC 14.4, 14.7) cancels the oldest holder of its key's pool
-- (limits_cancel_running). Refusals (a limit unknown or undeclared:
-- bad_name; 'slow': the Python rules) are answered for the first run before anything is written;
-- a later run refused (a limit undeclared meanwhile) raises LMSTR, so nothing of the batch stays.
-- statuses: each run's; bounds: what every run holds (stored on it); woken: other runs to wake.
CREATE OR REPLACE FUNCTION limits_start_runs(
    p_ids text[], p_workflow text, p_inputs jsonb[], p_references text[], p_keys text[], p_limits text[],
    p_label text, p_timeout_ms bigint, p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    p_on_full text DEFAULT NULL,  -- SPEC 14.1: the start's on_full ('wait', 'skip', 'replace'), NULL: its bounds' own
    OUT problem text, OUT bad_name text, OUT statuses text[], OUT bounds text[], OUT created timestamptz,
    OUT woken text[], OUT reasons text[], OUT full_names text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_box boolean := EXISTS (SELECT 1 FROM limits_limit WHERE name = 'box' AND kind = 'box' AND declared);
    v_keys text[];
    v_woke_mine boolean := false;  -- a run of the batch was woken (replaced, SPEC 14.3, or granted)
    g record;
    c record;
    v_own bigint;  -- SPEC 14.4: the workflow's own bound, when on_full 'cancel_running' is in force
    v_strategy text := p_on_full;
    i integer;
BEGIN
    created := coalesce(p_now, statement_timestamp());  -- the run layer's time (clock.expression)
    IF cardinality(p_limits) > 0 THEN
        IF v_strategy IS NULL THEN
            SELECT limits_on_full(m) INTO v_strategy FROM limits_limit m WHERE m.name = p_limits[1];
            FOR i IN 2 .. cardinality(p_limits) LOOP
                v_strategy := limits_stricter_on_full(
                    v_strategy, (SELECT limits_on_full(m) FROM limits_limit m WHERE m.name = p_limits[i])
                );
            END LOOP;
        END IF;
        IF v_strategy = 'cancel_running' THEN
            SELECT m.id INTO v_own FROM limits_limit m WHERE m.name = p_limits[1] AND m.kind = 'workflow';
        END IF;
    END IF;
    woken := '{}';
    reasons := array_fill(''::text, ARRAY[cardinality(p_ids)]);
    full_names := reasons;
    bounds := p_limits || CASE WHEN v_box THEN ARRAY['box'] ELSE '{}'::text[] END;
    IF cardinality(bounds) = 0 THEN
        INSERT INTO studio_run (
            id, workflow, input, status, error, suspended, waiting_for, bounds, concurrency_key, reference,
            lease_owner, dispatched_at, created_at, updated_at
        )
        SELECT r.id, p_workflow, r.input, 'pending', '', false, '', '[]'::jsonb, r.key, r.reference, '', created,
               created, created
        FROM unnest(p_ids, p_inputs, p_references, p_keys) AS r (id, input, reference, key);
        statuses := array_fill('pending'::text, ARRAY[cardinality(p_ids)]);
        RETURN;
    END IF;
    statuses := '{}';
    FOR i IN 1 .. cardinality(p_ids) LOOP
        v_keys := array_fill(p_keys[i], ARRAY[cardinality(p_limits)])
                  || CASE WHEN v_box THEN ARRAY[left(p_workflow, 128)] ELSE '{}'::text[] END;  -- run_bounds._box_place
        SELECT * INTO g FROM limits_acquire_group(
            bounds, p_ids[i], p_ids[i] || ':start', p_label, v_keys, p_timeout_ms, p_now, p_reservation_ms,
            p_owed_after_ms, v_box, p_on_full
        );
        IF g.outcome IN ('skipped', 'refused') THEN  -- SPEC 14.2, 14.5: ended at once, in no queue
            woken := woken || g.woken;
            reasons[i] := g.reason;
            full_names[i] := g.full_name;
            INSERT INTO studio_run (
                id, workflow, input, status, error, suspended, waiting_for, bounds, concurrency_key, reference,
                lease_owner, created_at, updated_at, finished_at, end_reason, end_limit, caused_by
            ) VALUES (
                p_ids[i], p_workflow, p_inputs[i], 'skipped', '', false, '', to_jsonb(bounds), p_keys[i],
                p_references[i], '', created, created, created, g.reason, g.full_name, NULL
            );
            statuses := statuses || 'skipped'::text;
            CONTINUE;
        END IF;
        IF g.outcome NOT IN ('busy', 'waiting') THEN
            IF i = 1 THEN
                problem := g.outcome;
                bad_name := g.bad_name;
                RETURN;
            END IF;
            RAISE EXCEPTION 'run % of the batch: % %', i, g.outcome, coalesce(g.bad_name, '') USING ERRCODE = 'LMSTR';
        END IF;
        IF g.outcome = 'busy' THEN  -- run_bounds._tie: held for the whole run
            UPDATE limits_slot SET ends_with_run = true WHERE id = ANY (g.slot_ids) AND state = 'busy';
        END IF;
        woken := woken || g.woken;
        v_woke_mine := v_woke_mine OR coalesce(g.woken && p_ids, false);
        IF g.outcome = 'waiting' AND v_own IS NOT NULL THEN  -- SPEC 14.4
            SELECT * INTO c FROM limits_cancel_running(
                v_own, p_ids[i], p_keys[i], p_now, p_reservation_ms, p_owed_after_ms
            );
            woken := woken || c.woken;
            v_woke_mine := v_woke_mine OR coalesce(c.woken && p_ids, false);
        END IF;
        INSERT INTO studio_run (
            id, workflow, input, status, error, suspended, waiting_for, bounds, concurrency_key, reference,
            lease_owner, dispatched_at, created_at, updated_at
        ) VALUES (
            p_ids[i], p_workflow, p_inputs[i], CASE WHEN g.outcome = 'busy' THEN 'pending' ELSE 'queued' END, '',
            g.outcome <> 'busy', CASE WHEN g.outcome = 'busy' THEN '' ELSE 'start' END, to_jsonb(bounds), p_keys[i],
            p_references[i], '', CASE WHEN g.outcome = 'busy' THEN created END, created, created
        );
        statuses := statuses || CASE WHEN g.outcome = 'busy' THEN 'pending' ELSE 'queued' END;
    END LOOP;
    IF v_woke_mine THEN  -- SPEC 14.3: a run of the batch a later one replaced, ended 'replaced'
        FOR g IN
            SELECT n.ord, r.end_reason, r.end_limit
            FROM unnest(p_ids) WITH ORDINALITY AS n(id, ord) JOIN studio_run r ON r.id = n.id
            WHERE r.status = 'replaced' AND statuses[n.ord] = 'queued'
        LOOP
            statuses[g.ord] := 'replaced';
            reasons[g.ord] := g.end_reason;
            full_names[g.ord] := g.end_limit;
        END LOOP;
    END IF;
END
$$;

-- keys.owed_barrier: the position of the oldest owed run waiting for this limit (10.4), passed
-- over and waiting more than p_owed_after_ms (keys.OWED_AFTER_MS: 2 minutes); NULL when none (or
-- no group waits here at all).
CREATE OR REPLACE FUNCTION limits_owed_position(l limits_limit, p_now timestamptz, p_owed_after_ms bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF l.group_waiting_count = 0 THEN
        RETURN NULL;
    END IF;
    RETURN (
        SELECT position FROM limits_queueentry
        WHERE limit_id = l.id AND state = 'waiting' AND passed_over_at IS NOT NULL
          AND enqueued_at < p_now - p_owed_after_ms * interval '1 millisecond'
        ORDER BY position
        LIMIT 1
    );
END
$$;

-- keys.time_out over the locked limits p_limits: the waits of p_limit past their deadline leave
-- the queue; a group's entries (which share their deadline) leave every queue together, only when
-- all the limits they wait in are locked. The counters of the limits and pools they leave.
CREATE OR REPLACE FUNCTION limits_time_out_keys(
    p_limit bigint, p_limits bigint[], p_now timestamptz, OUT n integer, OUT runs text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_head_limits bigint[];
    v_head_keys text[];
BEGIN
    WITH singles AS (
        UPDATE limits_queueentry SET state = 'timed_out', finished_at = p_now
        WHERE limit_id = p_limit AND state = 'waiting' AND deadline <= p_now AND group_size = 1
        RETURNING limit_id, key, group_size, run_id
    ), groups AS (
        UPDATE limits_queueentry q SET state = 'timed_out', finished_at = p_now
        WHERE q.state = 'waiting' AND q.request IN (
            SELECT s.request FROM limits_queueentry s
            WHERE s.limit_id = p_limit AND s.state = 'waiting' AND s.deadline <= p_now AND s.group_size > 1
              AND NOT EXISTS (
                  SELECT 1 FROM limits_queueentry o
                  WHERE o.request = s.request AND o.state = 'waiting' AND o.limit_id <> ALL (p_limits)
              )
        )
        RETURNING q.limit_id, q.key, q.group_size, q.run_id
    ), leaving AS (
        SELECT * FROM singles UNION ALL SELECT * FROM groups
    ), limits_left AS (
        UPDATE limits_limit t
        SET waiting_count = t.waiting_count - c.n, keyed_waiting_count = t.keyed_waiting_count - c.keyed,
            group_waiting_count = t.group_waiting_count - c.grouped
        FROM (
            SELECT limit_id, count(*) AS n, count(*) FILTER (WHERE key <> '') AS keyed,
                   count(*) FILTER (WHERE group_size > 1) AS grouped
            FROM leaving GROUP BY limit_id
        ) c
        WHERE t.id = c.limit_id
    ), pools_left AS (
        UPDATE limits_limitkey k SET waiting_count = k.waiting_count - c.n
        FROM (SELECT limit_id, key, count(*) AS n FROM leaving WHERE key <> '' GROUP BY limit_id, key) c
        WHERE k.limit_id = c.limit_id AND k.key = c.key
    )
    SELECT count(*), coalesce(array_agg(DISTINCT run_id), '{}'), array_agg(limit_id) FILTER (WHERE key <> ''),
           array_agg(key) FILTER (WHERE key <> '')
    INTO n, runs, v_head_limits, v_head_keys
    FROM leaving;
    PERFORM limits_read_heads(v_head_limits, v_head_keys);  -- after the statement: it sees them gone
END
$$;

-- grant._Grant._grant, for one entry: its slot, reserved for 2 minutes, and the counters.
CREATE OR REPLACE FUNCTION limits_reserve(e limits_queueentry, p_now timestamptz, p_reservation_ms bigint)
RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    v_keyed integer := (e.key <> '')::integer;
BEGIN
    SELECT * INTO l FROM limits_limit WHERE id = e.limit_id;
    UPDATE limits_queueentry SET state = 'granted', finished_at = p_now WHERE id = e.id AND state = 'waiting';
    INSERT INTO limits_slot (
        id, limit_id, run_id, request, label, key, group_size, state, queue_entry_id, granted_at,
        reserved_until, expires_at, freed_by, fair_pass
    ) VALUES (
        limits_new_slot_id(), l.id, e.run_id, e.request, e.label, e.key, e.group_size, 'reserved', e.id, p_now,
        p_now + p_reservation_ms * interval '1 millisecond', p_now + limits_max_hold(l), '',
        limits_take_turn(l, e.key)  -- SPEC 13.2: a fair limit's grant takes the key's turn
    );
    UPDATE limits_limit
    SET waiting_count = waiting_count - 1, keyed_waiting_count = keyed_waiting_count - v_keyed,
        group_waiting_count = group_waiting_count - (e.group_size > 1)::integer,
        reserved_count = reserved_count + 1, keyed_reserved_count = keyed_reserved_count + v_keyed
    WHERE id = l.id;
    IF e.key <> '' THEN
        UPDATE limits_limitkey k
        SET waiting_count = k.waiting_count - 1, reserved_count = k.reserved_count + 1,
            -- its head granted: the next one, found from there; else the oldest, from the lowest
            -- position (a canceller's entry in the front band, SPEC 14.4, is below 0)
            head = limits_key_head(
                l.id, e.key, CASE WHEN k.head = e.position THEN e.position ELSE -9223372036854775808 END
            )
        WHERE k.limit_id = l.id AND k.key = e.key;
    END IF;
END
$$;

-- grant._Grant._fair_stream (SPEC 13.2), a fair limit's next entry: among the keys with a waiting
-- entry whose pool has room, first those holding fewer than their min, then the smallest in use /
-- weight, ties to the smallest pass (the key's turns), then to the oldest head; that key's oldest
-- entry not dealt with yet (p_dealt), not behind an owed run (p_owed). The no-key pool's entries up
-- to p_nokey_after were dealt with in this grant (limits_grant's v_nokey_after).
--
-- A run's start that the box's base holds back (12.3) comes up like any entry, as in
-- grant._Grant._fair_stream: limits_grant deals with it and passes it (grant._Grant.open_to), so
-- the younger runs of its key are not left to it (limits_grant's left-to-fairness check waits for
-- "an older run of its key [...] not dealt with yet"). Left out here (before limits/0051), it was
-- never dealt with, and a younger group of its key waited with room on all its limits
-- (tests/model/test_found_whole_run_turns.py). p_base is no longer read; the signature stays.
--
-- Cheap at 10,000 waiting keys: the keys are read in that order from the index limitkey_fair_order
-- (limits/0033: the ORDER BY below is its definition), each with its head kept on its row
-- (limits_key_head). A key's stored head is a lower bound of the entry it can give (its head may
-- be dealt with), so the scan stops at the first key whose (under min, share, stored head) is not
-- below the best found: one key read in the common case, more only past keys whose pool is full,
-- whose head waits behind an owed run, or was dealt with and a younger one of theirs granted since
-- (limits_grant moves a dealt key's head on to its next entry for the rest of its call: dealt keys
-- are not walked again).
CREATE OR REPLACE FUNCTION limits_fair_next(
    lim limits_limit, p_owed bigint, p_dealt bigint[], p_base integer, p_nokey_after bigint
)
RETURNS SETOF limits_queueentry
LANGUAGE plpgsql STABLE SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    k record;
    v_head bigint;
    b_has_min boolean;  -- the best so far: holds its min (in use >= min), in use / weight, pass, its entry's position
    b_share numeric;
    b_pass bigint;
    b_head bigint;
BEGIN
    IF lim.waiting_count > lim.keyed_waiting_count AND limits_pool_room(lim, '') THEN
        -- the no-key pool: weight 1, min 0; its head through queue_waiting_order
        SELECT h.position INTO b_head FROM limits_queueentry h
        WHERE h.limit_id = lim.id AND h.state = 'waiting' AND h.key = ''
          AND h.position > p_nokey_after AND h.position <= p_owed AND NOT (h.id = ANY (p_dealt))
        ORDER BY h.position
        LIMIT 1;
        b_has_min := true;
        b_share := (lim.busy_count + lim.reserved_count - lim.keyed_busy_count - lim.keyed_reserved_count)::numeric;
        b_pass := lim.nokey_fair_pass;
    END IF;
    FOR k IN
        SELECT lk.key, lk.busy_count + lk.reserved_count >= lk.minimum AS has_min,
               (lk.busy_count + lk.reserved_count)::numeric / lk.weight AS share, lk.fair_pass, lk.head,
               lk.busy_count + lk.reserved_count < limits_pool_size(lim, lk.pool_override) IS NOT false AS room
        FROM limits_limitkey lk
        WHERE lk.limit_id = lim.id AND lk.head IS NOT NULL  -- waiting_count > 0, bar the keys dealt with
        ORDER BY lk.limit_id, lk.busy_count + lk.reserved_count >= lk.minimum,
                 (lk.busy_count + lk.reserved_count)::numeric / lk.weight, lk.fair_pass, lk.head
    LOOP
        EXIT WHEN b_head IS NOT NULL AND (k.has_min, k.share, k.fair_pass, k.head) >= (b_has_min, b_share, b_pass, b_head);
        CONTINUE WHEN NOT k.room OR k.head > p_owed;
        SELECT h.position INTO v_head FROM limits_queueentry h
        WHERE h.limit_id = lim.id AND h.key = k.key AND h.key <> '' AND h.state = 'waiting'
          AND h.position >= k.head AND h.position <= p_owed AND NOT (h.id = ANY (p_dealt))
        ORDER BY h.position
        LIMIT 1;
        IF v_head IS NOT NULL
           AND (b_head IS NULL OR (k.has_min, k.share, k.fair_pass, v_head) < (b_has_min, b_share, b_pass, b_head)) THEN
            b_has_min := k.has_min;
            b_share := k.share;
            b_pass := k.fair_pass;
            b_head := v_head;
        END IF;
    END LOOP;
    IF b_head IS NOT NULL THEN
        RETURN QUERY SELECT * FROM limits_queueentry WHERE limit_id = lim.id AND state = 'waiting' AND position = b_head;
    END IF;
END
$$;

-- limits.engine.grant.settle, in one call (issue 26): hand the free capacity of the locked limits
-- p_limits (with key pools, or groups waiting) to their queues. The caller holds their locks, in
-- id order, and has written their counters; this writes them again (the limits' and the pools').
--
-- 1. Time out the waits past their deadline (limits_time_out_keys, each locked limit in id order).
-- 2. Oldest first over all the locked limits (entry ids follow arrival), grant each waiting run
--    that can be granted now (grant._Grant): its limit has room in its total and in the key's pool,
--    and no owed run of the limit is older (10.4); a group is granted all of its slots, reserved
--    together, or none. A group that cannot be granted is remembered as blocked; a younger grant
--    on one of its limits, where its own key pool had room before that grant, passes it over.
-- The next candidate is one index probe per open limit (queue_waiting_order), filtered by the
-- pool's room and the owed run's position, so the waiting runs of full keys cost no round of the
-- loop. Returns what the Python rules count (entries timed out, slots granted) and the runs to
-- wake. Must never happen, as in grant.py: a pool or a total above its size, a partial group, a
-- younger run granted while an older one that could be granted waits, or while an owed run waits.
CREATE OR REPLACE FUNCTION limits_grant(
    p_limits bigint[], p_now timestamptz, p_reservation_ms bigint, p_owed_after_ms bigint,
    OUT timed_out integer, OUT granted integer, OUT woken text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    l limits_limit;
    e limits_queueentry;
    g limits_queueentry;
    v_group limits_queueentry[];
    v_here limits_queueentry[];
    v_after jsonb := '{}';  -- limit id -> the position its queue's scan has passed
    v_decided text[] := '{}';  -- group requests granted or found blocked
    b_limit bigint[] := '{}';  -- the blocked group entries, a field an array
    b_position bigint[] := '{}';
    b_request text[] := '{}';
    b_key text[] := '{}';
    b_passed boolean[] := '{}';
    v_passed text[];
    v_count integer;
    v_runs text[];
    v_ok boolean;
    v_base integer := limits_box_base();  -- SPEC 12.3: whole runs per limit (grant._Grant.base)
    v_dealt bigint[] := '{}';  -- entries dealt with (fair limits choose again after each)
    -- A fair limit's key whose entry was dealt with: its head moved to its next entry (NULL when
    -- none: out of limitkey_fair_order) until the end of this call, so that limits_fair_next does
    -- not walk again past it; read again from the queue at the end (limits_read_heads).
    v_moved_limits bigint[] := '{}';
    v_moved_keys text[] := '{}';
    v_nokey_after jsonb := '{}';  -- the same for a fair limit's no-key pool: its last entry dealt
    v_fair bigint[];  -- the fair limits among p_limits
    i integer;
BEGIN
    timed_out := 0;
    granted := 0;
    woken := '{}';
    FOR l IN SELECT * FROM limits_limit WHERE id = ANY (p_limits) AND waiting_count > 0 ORDER BY id LOOP
        CONTINUE WHEN NOT EXISTS (  -- most calls: nothing stale, and one index probe says so
            SELECT 1 FROM limits_queueentry
            WHERE limit_id = l.id AND state = 'waiting' AND deadline <= p_now
        );
        SELECT t.n, t.runs INTO v_count, v_runs FROM limits_time_out_keys(l.id, p_limits, p_now) t;
        timed_out := timed_out + v_count;
        woken := woken || v_runs;
    END LOOP;
    -- A plain limit (limits_is_plain: one pool, no group waiting in it) is granted set-based, its
    -- heads in queue order while it has room (grant.grant_heads); the loop below then finds it
    -- full or empty. No group waits in it, so the order between it and the others does not matter.
    FOR l IN SELECT * FROM limits_limit WHERE id = ANY (p_limits) AND waiting_count > 0 ORDER BY id LOOP
        CONTINUE WHEN NOT limits_is_plain(l) OR limits_room(l) = 0;
        v_runs := limits_grant_heads(
            l.id,
            least(limits_room(l), l.waiting_count),
            p_now,
            p_now + p_reservation_ms * interval '1 millisecond',
            p_now + limits_max_hold(l)
        );
        UPDATE limits_limit
        SET waiting_count = waiting_count - cardinality(v_runs), reserved_count = reserved_count + cardinality(v_runs)
        WHERE id = l.id;
        granted := granted + cardinality(v_runs);
        woken := woken || v_runs;
    END LOOP;
    LOOP
        e := NULL;
        SELECT c.* INTO e FROM (
            SELECT q.*
            FROM limits_limit lim
            CROSS JOIN LATERAL (  -- once per limit, not per entry scanned
                SELECT coalesce(limits_owed_position(lim, p_now, p_owed_after_ms), 9223372036854775807) AS owed
            ) o
            CROSS JOIN LATERAL (
                SELECT w.* FROM limits_queueentry w
                WHERE w.limit_id = lim.id AND w.state = 'waiting'
                  -- from the lowest position: the front band (limits_cancel_running) is below 0
                  AND w.position > coalesce((v_after ->> lim.id::text)::bigint, -9223372036854775808)
                  AND w.position <= o.owed
                  AND limits_pool_room(lim, w.key)
                  AND limits_whole_run_room(lim, w.request, v_base)
                ORDER BY w.position
                LIMIT 1
            ) q
            WHERE lim.id = ANY (p_limits) AND lim.waiting_count > 0
              AND limits_room(lim) > 0 AND NOT limits_is_fair(lim)
            UNION ALL
            -- grant._Grant._fair_stream (SPEC 13.2): the next entry of a fair limit (limits_fair_next),
            -- its no-key pool from the lowest position too (a canceller without a key on a fair
            -- bound waits in the front band: tests/runs/test_cancel_running.py)
            SELECT f.*
            FROM limits_limit lim
            CROSS JOIN LATERAL (
                SELECT coalesce(limits_owed_position(lim, p_now, p_owed_after_ms), 9223372036854775807) AS owed
            ) o
            CROSS JOIN LATERAL limits_fair_next(
                lim, o.owed, v_dealt, v_base, coalesce((v_nokey_after ->> lim.id::text)::bigint, -9223372036854775808)
            ) f
            WHERE lim.id = ANY (p_limits) AND lim.waiting_count > 0
              AND limits_room(lim) > 0 AND limits_is_fair(lim)
        ) c
        ORDER BY c.id
        LIMIT 1;
        EXIT WHEN e.id IS NULL;
        v_after := v_after || jsonb_build_object(e.limit_id::text, e.position);
        v_dealt := v_dealt || e.id;  -- a fair limit's stream moves past it (grant._Grant._fair_stream)
        IF v_fair IS NULL THEN
            v_fair := ARRAY(SELECT m.id FROM limits_limit m WHERE m.id = ANY (p_limits) AND limits_is_fair(m));
        END IF;
        IF e.limit_id = ANY (v_fair) THEN
            -- Its stream deals with a key's entries in arrival order: the ones before are dealt.
            IF e.key = '' THEN
                v_nokey_after := v_nokey_after || jsonb_build_object(e.limit_id::text, e.position);
            ELSE
                UPDATE limits_limitkey SET head = limits_key_head(e.limit_id, e.key, e.position)
                WHERE limit_id = e.limit_id AND key = e.key;
                v_moved_limits := v_moved_limits || e.limit_id;
                v_moved_keys := v_moved_keys || e.key;
            END IF;
        END IF;
        CONTINUE WHEN e.request = ANY (v_decided);
        -- grant._Grant.open_to: a run's start that the box's base holds back here (12.3) is dealt
        -- with above and passed (only a fair limit's stream gives one: the fifo scan leaves it out)
        IF v_base IS NOT NULL AND right(e.request, 6) = ':start' THEN
            SELECT * INTO l FROM limits_limit WHERE id = e.limit_id;
            CONTINUE WHEN NOT limits_whole_run_room(l, e.request, v_base);
        END IF;
        IF e.group_size = 1 THEN
            v_here := ARRAY[e];
            v_ok := true;
        ELSE
            SELECT coalesce(array_agg(w), '{}') INTO v_group FROM limits_queueentry w
            WHERE w.request = e.request AND w.state = 'waiting';
            SELECT coalesce(array_agg(w), '{}') INTO v_here FROM unnest(v_group) w WHERE w.limit_id = ANY (p_limits);
            -- grant._Grant._left_to_fairness: left to another of its limits that is fair, where an
            -- older run of its key waits undealt, or, met on a fifo limit and not owed (10.4), to
            -- the fair order: not decided, watched on this limit.
            IF EXISTS (
                SELECT 1 FROM unnest(v_here) w JOIN limits_limit x ON x.id = w.limit_id
                WHERE w.limit_id <> e.limit_id AND limits_is_fair(x) AND (
                    (NOT (e.passed_over_at IS NOT NULL
                          AND e.enqueued_at < p_now - p_owed_after_ms * interval '1 millisecond')
                     AND NOT EXISTS (
                        SELECT 1 FROM limits_limit m WHERE m.id = e.limit_id AND limits_is_fair(m)
                    ))
                    OR EXISTS (
                        SELECT 1 FROM limits_queueentry o
                        WHERE o.limit_id = w.limit_id AND o.state = 'waiting' AND o.key = w.key
                          AND o.position < w.position AND NOT (o.id = ANY (v_dealt))
                    )
                )
            ) THEN
                b_limit := b_limit || e.limit_id;
                b_position := b_position || e.position;
                b_request := b_request || e.request;
                b_key := b_key || e.key;
                b_passed := b_passed || false;
                CONTINUE;
            END IF;
            v_ok := cardinality(v_here) = cardinality(v_group) AND cardinality(v_group) = e.group_size;
            IF v_ok THEN
                FOREACH g IN ARRAY v_here LOOP
                    SELECT * INTO l FROM limits_limit WHERE id = g.limit_id;
                    IF limits_room(l) = 0 OR NOT limits_pool_room(l, g.key)
                       OR NOT limits_whole_run_room(l, g.request, v_base)
                       OR g.position > coalesce(limits_owed_position(l, p_now, p_owed_after_ms), g.position) THEN
                        v_ok := false;
                        EXIT;
                    END IF;
                END LOOP;
            END IF;
            v_decided := v_decided || e.request;
        END IF;
        IF NOT v_ok THEN  -- blocked: watched on every limit it waits in (10.4)
            FOREACH g IN ARRAY v_here LOOP
                b_limit := b_limit || g.limit_id;
                b_position := b_position || g.position;
                b_request := b_request || g.request;
                b_key := b_key || g.key;
                b_passed := b_passed || (g.passed_over_at IS NOT NULL);
            END LOOP;
            CONTINUE;
        END IF;
        -- Passed over (grant._Grant._mark_passed_over), judged before this grant takes its room.
        FOREACH g IN ARRAY v_here LOOP
            SELECT * INTO l FROM limits_limit WHERE id = g.limit_id;
            v_passed := '{}';
            FOR i IN 1 .. coalesce(cardinality(b_limit), 0) LOOP
                IF b_limit[i] = g.limit_id AND b_position[i] < g.position AND NOT b_passed[i]
                   AND limits_pool_room(l, b_key[i]) AND limits_whole_run_room(l, b_request[i], v_base)
                   AND NOT b_request[i] = ANY (v_passed) THEN
                    v_passed := v_passed || b_request[i];
                END IF;
            END LOOP;
            CONTINUE WHEN cardinality(v_passed) = 0;
            UPDATE limits_queueentry SET passed_over_at = p_now
            WHERE request = ANY (v_passed) AND state = 'waiting' AND passed_over_at IS NULL;
            FOR i IN 1 .. cardinality(b_request) LOOP
                IF b_request[i] = ANY (v_passed) THEN
                    b_passed[i] := true;
                END IF;
            END LOOP;
        END LOOP;
        FOREACH g IN ARRAY v_here LOOP
            PERFORM limits_reserve(g, p_now, p_reservation_ms);
        END LOOP;
        granted := granted + cardinality(v_here);
        woken := woken || e.run_id;
    END LOOP;
    IF cardinality(v_moved_limits) > 0 THEN
        PERFORM limits_read_heads(v_moved_limits, v_moved_keys);  -- the heads as the queue has them
    END IF;
END
$$;

-- limits.engine.python._previous_group_outcome for a request holding live slots (the woken run
-- asking again, with a key or several limits): its reservations, all still in time, turn busy
-- together (keys.confirm_group, SPEC 3.5, 10.2) under the locks of their limits, taken in id order;
-- 'busy' with the slot ids in the order of p_names. A late reservation (it lapses and the group
-- goes back to every queue), or slots that are not of exactly the limits named: 'slow', nothing
-- changed, the Python rules answer.
CREATE OR REPLACE FUNCTION limits_confirm_group(
    p_names text[], p_request text, p_now timestamptz, OUT outcome text, OUT slot_ids text[]
)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
DECLARE
    v_ids bigint[];
    v_now timestamptz;
BEGIN
    outcome := 'slow';
    slot_ids := '{}';
    SELECT array_agg(DISTINCT limit_id) INTO v_ids FROM limits_slot
    WHERE request = p_request AND state IN ('busy', 'reserved');
    BEGIN
        SELECT k.clock INTO v_now FROM limits_lock(v_ids, p_now, false) k;  -- their groups are theirs
        SELECT array_agg(s.id ORDER BY n.ord) INTO slot_ids
        FROM unnest(p_names) WITH ORDINALITY AS n(name, ord)
        JOIN limits_limit m ON m.name = n.name
        JOIN limits_slot s ON s.limit_id = m.id AND s.request = p_request AND s.state IN ('busy', 'reserved');
        IF cardinality(slot_ids) IS DISTINCT FROM cardinality(p_names)
           OR cardinality(slot_ids) <> cardinality(v_ids)
           OR EXISTS (
               SELECT 1 FROM limits_slot
               WHERE request = p_request AND state = 'reserved' AND v_now > reserved_until
           ) THEN
            RAISE EXCEPTION USING ERRCODE = 'LMSLW';
        END IF;
        PERFORM limits_confirm_together(p_request, v_now);
        UPDATE limits_limit SET last_event_at = v_now WHERE id = ANY (v_ids);  -- rules.clock_all
        outcome := 'busy';
    EXCEPTION WHEN SQLSTATE 'LMSLW' THEN
        outcome := 'slow';
        slot_ids := '{}';
    END;
END
$$;
