"""Bulk data for scenarios 3 and 4, in SQL (INSERT ... SELECT generate_series), never one ORM row at
a time. Counters on the limit row are recomputed from the rows afterwards, so they always agree."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from tests.bench.common import log

MANY_PREFIX = "bench-many-"


def limit_id(name: str) -> int:
    from limits.models import Limit

    return Limit.objects.values_list("id", flat=True).get(name=name)


def many_limits(total: int) -> int:
    """Make the box hold `total` limits: the bench's own plus bench-many-NNNN, each with 2 busy
    slots expiring in a day (in use, but nothing for the sweep to do)."""
    from limits.models import Limit

    missing = total - Limit.objects.count()
    if missing <= 0:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO limits_limit (name, declared, declared_capacity, declared_max_hold_ms, capacity_override,
                max_hold_override_ms, busy_count, reserved_count, waiting_count, next_position, created_at, updated_at)
            SELECT %s || lpad(g::text, 4, '0'), true, 10, 3600000, NULL, NULL, 0, 0, 0, 1, now(), now()
            FROM generate_series(1, %s) AS g
            """,
            [MANY_PREFIX, missing],
        )
        cur.execute(
            """
            INSERT INTO limits_slot (id, limit_id, run_id, request, label, state, queue_entry_id, granted_at,
                reserved_until, confirmed_at, expires_at, freed_at, freed_by)
            SELECT 'slot_many_' || l.id || '_' || g, l.id, 'run_many_' || l.id || '_' || g,
                'req_many_' || l.id || '_' || g, '', 'busy', NULL, now(), NULL, now(), now() + interval '1 day',
                NULL, ''
            FROM limits_limit AS l CROSS JOIN generate_series(1, 2) AS g
            WHERE l.name LIKE %s
            """,
            [MANY_PREFIX + "%"],
        )
    recount(Limit.objects.filter(name__startswith=MANY_PREFIX).values_list("id", flat=True))
    return missing


def busy_slots(limit: int, count: int, *, tag: str, expired: bool) -> None:
    """`count` busy slots, past their expiry (an hour ago) or expiring in a day."""
    expires = "now() - interval '1 minute'" if expired else "now() + interval '1 day'"
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO limits_slot (id, limit_id, run_id, request, label, state, queue_entry_id, granted_at,
                reserved_until, confirmed_at, expires_at, freed_at, freed_by)
            SELECT 'slot_' || %(tag)s || '_' || g, %(limit)s, 'run_' || %(tag)s || '_h' || g,
                'req_' || %(tag)s || '_h' || g, 'call-' || g, 'busy', NULL,
                now() - interval '2 hours' + g * interval '1 ms', NULL, now() - interval '2 hours', {expires}, NULL, ''
            FROM generate_series(1, %(count)s) AS g
            """,
            {"tag": tag, "limit": limit, "count": count},
        )


def waiting_entries(limit: int, count: int, *, tag: str, with_runs: bool) -> None:
    """`count` runs waiting in the limit's queue (deadline in a day), and with_runs: their Run rows
    (running, suspended on the hook), so waking them is the real work."""
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(max(position), 0) FROM limits_queueentry WHERE limit_id = %s", [limit])
        start = cur.fetchone()[0]
        cur.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, state, enqueued_at, deadline,
                timeout_ms, finished_at)
            SELECT %(limit)s, 'run_' || %(tag)s || '_w' || g, 'run_' || %(tag)s || '_w' || g || ':1', 'call-' || g,
                %(start)s + g, 'waiting', now() - interval '1 hour' + g * interval '1 ms', now() + interval '1 day',
                86400000, NULL
            FROM generate_series(1, %(count)s) AS g
            """,
            {"tag": tag, "limit": limit, "count": count, "start": start},
        )
        if with_runs:
            cur.execute(
                """
                INSERT INTO studio_run (id, workflow, input, status, output, error, suspended, waiting_for,
                    wait_deadline, lease_owner, lease_until, dispatched_at, created_at, started_at, finished_at,
                    updated_at, bounds, concurrency_key)
                SELECT 'run_' || %(tag)s || '_w' || g, 'bench_take_slot', '{"limit": "bench-sweep"}'::jsonb, 'running',
                    NULL, '', true, 'run_' || %(tag)s || '_w' || g || ':1', now() + interval '1 day', '', NULL,
                    now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', NULL, now(),
                    '[]'::jsonb, ''
                FROM generate_series(1, %(count)s) AS g
                """,
                {"tag": tag, "count": count},
            )
    recount([limit])


def history(limit: int, count: int, *, tag: str) -> None:
    """`count` cycles the limit ran long ago: a released slot and the granted queue entry it came
    from each, at queue positions the limit has since passed (its next_position moves past them)."""
    with connection.cursor() as cur:
        cur.execute("SELECT next_position FROM limits_limit WHERE id = %s", [limit])
        start = cur.fetchone()[0]
        cur.execute(
            """
            INSERT INTO limits_queueentry (limit_id, run_id, request, label, position, state, enqueued_at, deadline,
                timeout_ms, finished_at)
            SELECT %(limit)s, 'run_' || %(tag)s || '_' || g, 'run_' || %(tag)s || '_' || g || ':1', 'call-' || g,
                %(start)s + g, 'granted', now() - interval '3 days' + g * interval '100 ms',
                now() - interval '2 days', 86400000, now() - interval '3 days' + g * interval '100 ms'
            FROM generate_series(1, %(count)s) AS g
            """,
            {"tag": tag, "limit": limit, "count": count, "start": start},
        )
        cur.execute(
            """
            INSERT INTO limits_slot (id, limit_id, run_id, request, label, state, queue_entry_id, granted_at,
                reserved_until, confirmed_at, expires_at, freed_at, freed_by)
            SELECT 'slot_' || %(tag)s || '_' || q.id, %(limit)s, q.run_id, q.request, q.label, 'released', q.id,
                q.finished_at, NULL, q.finished_at, q.finished_at + interval '1 hour',
                q.finished_at + interval '50 ms', ''
            FROM limits_queueentry q WHERE q.limit_id = %(limit)s AND q.run_id LIKE %(like)s
            """,
            {"tag": tag, "limit": limit, "like": f"run_{tag}_%"},
        )
        cur.execute("UPDATE limits_limit SET next_position = %s WHERE id = %s", [start + count + 1, limit])


def clear_history(limit: int, *, tag: str) -> None:
    """Remove what `history` made (the positions stay passed)."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM limits_slot WHERE limit_id = %s AND run_id LIKE %s", [limit, f"run_{tag}_%"])
        cur.execute("DELETE FROM limits_queueentry WHERE limit_id = %s AND run_id LIKE %s", [limit, f"run_{tag}_%"])


def recount(limit_ids: Iterable[int]) -> None:
    """Set the counters of these limits from their rows (what the engine keeps in step)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE limits_limit AS l SET
                busy_count = (SELECT count(*) FROM limits_slot s WHERE s.limit_id = l.id AND s.state = 'busy'),
                reserved_count = (SELECT count(*) FROM limits_slot s WHERE s.limit_id = l.id AND s.state = 'reserved'),
                waiting_count = (
                    SELECT count(*) FROM limits_queueentry q WHERE q.limit_id = l.id AND q.state = 'waiting'
                ),
                next_position = (SELECT coalesce(max(position), 0) + 1 FROM limits_queueentry q WHERE q.limit_id = l.id)
            WHERE l.id = ANY(%s)
            """,
            [list(limit_ids)],
        )


def clear(limit: int, *, tag: str) -> None:
    """Remove a scenario's rows (slots, queue entries, its runs and their steps) and zero the counters."""
    with connection.cursor() as cur:
        cur.execute("DELETE FROM limits_slot WHERE limit_id = %s", [limit])
        cur.execute("DELETE FROM limits_queueentry WHERE limit_id = %s", [limit])
        cur.execute("DELETE FROM limits_auditevent WHERE limit_id = %s", [limit])
        cur.execute("DELETE FROM studio_step WHERE run_id LIKE %s", [f"run_{tag}_%"])
        cur.execute("DELETE FROM studio_run WHERE id LIKE %s", [f"run_{tag}_%"])
    recount([limit])


def analyze() -> None:
    log("  ANALYZE")
    with connection.cursor() as cur:
        cur.execute("ANALYZE limits_limit, limits_slot, limits_queueentry, studio_run")
