-- The durable FIFO semaphore the bench measures the engine against (issue 17): a reference,
-- written by us, not a product path. One PL/pgSQL function per operation, each one statement and
-- one durable commit in autocommit:
--
--   bench_fifo_acquire(limit, channel) -> 0 when a slot was taken at once, else the ticket of the
--       caller's row in the queue (it waits for a notification on its channel);
--   bench_fifo_release(limit, ticket)  -> frees the caller's slot (ticket 0: taken at once; else
--       its granted row, deleted here); if anyone waits, the slot goes to the head of the queue in
--       this same commit (the grant writes the waiter's row) and pg_notify(its channel, its
--       ticket) wakes it after the commit;
--   bench_fifo_state(ticket)           -> 'waiting' | 'granted' | NULL, for a waiter that timed out
--       on its notification (a lost one costs a look, never a slot).
--
-- A queued cycle is two commits (join, the release that grants) against the engine's three (join,
-- grant, confirm): there is no reservation to confirm, since the grant is final. Strict FIFO, no
-- barging: once one waits, every acquire queues behind it (waiting > 0).
-- Installed into the bench's own database by tests/bench/fifo.py (idempotent).

CREATE TABLE IF NOT EXISTS bench_fifo_limit (
    id int PRIMARY KEY,
    capacity int NOT NULL CHECK (capacity > 0),
    busy int NOT NULL DEFAULT 0 CHECK (busy >= 0),      -- held slots, granted waiters included
    waiting int NOT NULL DEFAULT 0 CHECK (waiting >= 0),
    CHECK (busy <= capacity)
);

CREATE TABLE IF NOT EXISTS bench_fifo_waiter (
    ticket bigserial PRIMARY KEY,                       -- its order in the queue
    limit_id int NOT NULL REFERENCES bench_fifo_limit (id),
    channel text NOT NULL,
    granted boolean NOT NULL DEFAULT false
);

CREATE INDEX IF NOT EXISTS bench_fifo_waiting ON bench_fifo_waiter (limit_id, ticket) WHERE NOT granted;

CREATE OR REPLACE FUNCTION bench_fifo_acquire(p_limit int, p_channel text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    l bench_fifo_limit;
    v_ticket bigint;
BEGIN
    -- Lock first, then decide: deciding on a row not yet locked (a conditional UPDATE that finds
    -- it full, then a second one that joins) lets every holder release in between, and the
    -- caller would wait behind a limit nobody holds (seen under load).
    SELECT * INTO l FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no bench_fifo_limit %', p_limit;
    END IF;
    IF l.busy < l.capacity AND l.waiting = 0 THEN
        UPDATE bench_fifo_limit SET busy = busy + 1 WHERE id = p_limit;
        RETURN 0;
    END IF;
    UPDATE bench_fifo_limit SET waiting = waiting + 1 WHERE id = p_limit;
    INSERT INTO bench_fifo_waiter (limit_id, channel) VALUES (p_limit, p_channel) RETURNING ticket INTO v_ticket;
    RETURN v_ticket;
END
$$;

CREATE OR REPLACE FUNCTION bench_fifo_release(p_limit int, p_ticket bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_head bigint;
    v_channel text;
BEGIN
    PERFORM 1 FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
    IF p_ticket <> 0 THEN
        DELETE FROM bench_fifo_waiter WHERE ticket = p_ticket AND granted;
    END IF;
    SELECT ticket, channel INTO v_head, v_channel
      FROM bench_fifo_waiter WHERE limit_id = p_limit AND NOT granted ORDER BY ticket LIMIT 1;
    IF FOUND THEN
        UPDATE bench_fifo_waiter SET granted = true WHERE ticket = v_head;
        UPDATE bench_fifo_limit SET waiting = waiting - 1 WHERE id = p_limit;
        PERFORM pg_notify(v_channel, v_head::text);
    ELSE
        UPDATE bench_fifo_limit SET busy = busy - 1 WHERE id = p_limit;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION bench_fifo_state(p_ticket bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN granted THEN 'granted' ELSE 'waiting' END FROM bench_fifo_waiter WHERE ticket = p_ticket
$$;

-- Two variants of the same semaphore, to measure one choice of the engine's functions (issue 17,
-- docs/performance.md): limits_acquire, limits_release and limits_confirm lock the limit's row
-- inside a BEGIN ... EXCEPTION block (a subtransaction, so that answering 'slow' gives the lock
-- back). Until migration 0015 they wrote the row after the block, in the parent transaction: a
-- row locked by a subtransaction and then updated by its parent gets a MultiXact as its xmax (two
-- lockers: the subtransaction's FOR UPDATE, the parent's update), on every operation.
--   _mx: that earlier pattern: lock in the block, writes after it.
--   _sx: lock and writes inside the one block (no MultiXact): the engine's functions now.
-- Same rules and results as above; only where the lock is taken differs.

CREATE OR REPLACE FUNCTION bench_fifo_acquire_mx(p_limit int, p_channel text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    l bench_fifo_limit;
    v_ticket bigint;
BEGIN
    BEGIN
        SELECT * INTO l FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BFSLW';
        END IF;
    EXCEPTION WHEN SQLSTATE 'BFSLW' THEN
        RAISE EXCEPTION 'no bench_fifo_limit %', p_limit;
    END;
    IF l.busy < l.capacity AND l.waiting = 0 THEN
        UPDATE bench_fifo_limit SET busy = busy + 1 WHERE id = p_limit;
        RETURN 0;
    END IF;
    UPDATE bench_fifo_limit SET waiting = waiting + 1 WHERE id = p_limit;
    INSERT INTO bench_fifo_waiter (limit_id, channel) VALUES (p_limit, p_channel) RETURNING ticket INTO v_ticket;
    RETURN v_ticket;
END
$$;

CREATE OR REPLACE FUNCTION bench_fifo_release_mx(p_limit int, p_ticket bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM 1 FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BFSLW';
        END IF;
    EXCEPTION WHEN SQLSTATE 'BFSLW' THEN
        RAISE EXCEPTION 'no bench_fifo_limit %', p_limit;
    END;
    PERFORM bench_fifo_hand_over(p_limit, p_ticket);
END
$$;

CREATE OR REPLACE FUNCTION bench_fifo_acquire_sx(p_limit int, p_channel text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    l bench_fifo_limit;
    v_ticket bigint;
BEGIN
    BEGIN
        SELECT * INTO l FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BFSLW';
        END IF;
        IF l.busy < l.capacity AND l.waiting = 0 THEN
            UPDATE bench_fifo_limit SET busy = busy + 1 WHERE id = p_limit;
            v_ticket := 0;
        ELSE
            UPDATE bench_fifo_limit SET waiting = waiting + 1 WHERE id = p_limit;
            INSERT INTO bench_fifo_waiter (limit_id, channel) VALUES (p_limit, p_channel)
            RETURNING ticket INTO v_ticket;
        END IF;
    EXCEPTION WHEN SQLSTATE 'BFSLW' THEN
        RAISE EXCEPTION 'no bench_fifo_limit %', p_limit;
    END;
    RETURN v_ticket;
END
$$;

CREATE OR REPLACE FUNCTION bench_fifo_release_sx(p_limit int, p_ticket bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        PERFORM 1 FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'BFSLW';
        END IF;
        PERFORM bench_fifo_hand_over(p_limit, p_ticket);
    EXCEPTION WHEN SQLSTATE 'BFSLW' THEN
        RAISE EXCEPTION 'no bench_fifo_limit %', p_limit;
    END;
END
$$;

-- The release's writes, the caller holding the limit's row lock (shared by the two variants).
CREATE OR REPLACE FUNCTION bench_fifo_hand_over(p_limit int, p_ticket bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_head bigint;
    v_channel text;
BEGIN
    IF p_ticket <> 0 THEN
        DELETE FROM bench_fifo_waiter WHERE ticket = p_ticket AND granted;
    END IF;
    SELECT ticket, channel INTO v_head, v_channel
      FROM bench_fifo_waiter WHERE limit_id = p_limit AND NOT granted ORDER BY ticket LIMIT 1;
    IF FOUND THEN
        UPDATE bench_fifo_waiter SET granted = true WHERE ticket = v_head;
        UPDATE bench_fifo_limit SET waiting = waiting - 1 WHERE id = p_limit;
        PERFORM pg_notify(v_channel, v_head::text);
    ELSE
        UPDATE bench_fifo_limit SET busy = busy - 1 WHERE id = p_limit;
    END IF;
END
$$;

-- A third variant, a step of the ladder from this reference to the engine (issue 17,
-- docs/performance.md): _rc adds the SPEC's reservation (3.5). The grant reserves the head's slot
-- (its row granted, not confirmed; the limit's `reserved` counts it), and the woken waiter
-- confirms it with one more call and durable commit, under the limit's row lock, as the engine's
-- confirm does. A queued cycle is then three commits (join, the release that grants, the
-- confirm), the engine's count. Acquire is bench_fifo_acquire; the rest is as above. Its two
-- columns live on the tables every variant shares, with no CHECK (the others never write them,
-- and a CHECK is evaluated at every UPDATE of the row: it would slow the other variants down).
-- `busy` counts the reserved slots too (`reserved` is the part of it not confirmed yet), where
-- the engine keeps busy and reserved apart.
ALTER TABLE bench_fifo_limit ADD COLUMN IF NOT EXISTS reserved int NOT NULL DEFAULT 0;
ALTER TABLE bench_fifo_waiter ADD COLUMN IF NOT EXISTS confirmed boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION bench_fifo_release_rc(p_limit int, p_ticket bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_head bigint;
    v_channel text;
BEGIN
    PERFORM 1 FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
    IF p_ticket <> 0 THEN
        DELETE FROM bench_fifo_waiter WHERE ticket = p_ticket AND confirmed;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'ticket % holds no confirmed slot', p_ticket;
        END IF;
    END IF;
    SELECT ticket, channel INTO v_head, v_channel
      FROM bench_fifo_waiter WHERE limit_id = p_limit AND NOT granted ORDER BY ticket LIMIT 1;
    IF FOUND THEN
        UPDATE bench_fifo_waiter SET granted = true WHERE ticket = v_head;
        UPDATE bench_fifo_limit SET waiting = waiting - 1, reserved = reserved + 1 WHERE id = p_limit;
        PERFORM pg_notify(v_channel, v_head::text);
    ELSE
        UPDATE bench_fifo_limit SET busy = busy - 1 WHERE id = p_limit;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION bench_fifo_confirm_rc(p_limit int, p_ticket bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM bench_fifo_limit WHERE id = p_limit FOR UPDATE;
    UPDATE bench_fifo_waiter SET confirmed = true WHERE ticket = p_ticket AND granted AND NOT confirmed;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'ticket % holds no reservation', p_ticket;
    END IF;
    UPDATE bench_fifo_limit SET reserved = reserved - 1 WHERE id = p_limit;
END
$$;
