"""Issue 30: the Runs screen's key filter (`?key=`, `stackbone runs list --key`) pages a tenant's
runs from an index (studio migration 0007, run_by_key), not by walking every run newest first.
The page reads two parts and merges them: the runs of that concurrency key, and the runs without
it that hold a slot or wait under the key now (a key taken inside the body).

Must never happen: a run of the key skipped or listed twice across pages, or a page out of the
newest-first order, when the two parts interleave."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.runs import listing
from limits.runs import pages as run_pages
from stackbone.models import Run
from tests.conftest import requires_postgres
from tests.factories import declare
from tests.views.test_runs_screen import URL, links, listed, make_run

pytestmark = pytest.mark.django_db


def acme_runs() -> list[str]:
    """Ten runs of key acme, newest first: seven by their concurrency key, three (every third)
    that took acme inside the body (two hold a voice-calls slot under it, one waits); between them
    runs of globex and runs without a key."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m", "per_key": 2})
    acme: list[Run] = []
    for n in range(10):
        make_run("sync_tenant", "completed", seconds_ago=100 - n * 10 + 5, concurrency_key="globex")
        make_run(seconds_ago=100 - n * 10 + 3)
        if n % 3 == 1:
            run = make_run("place_call", "running", seconds_ago=100 - n * 10)
            services.acquire("voice-calls", run_id=run.id, key="acme", label=f"call-{n}", timeout="1h")
        else:
            run = make_run("sync_tenant", "completed", seconds_ago=100 - n * 10, concurrency_key="acme")
        acme.append(run)
    assert services.acquire("voice-calls", run_id="other", key="acme", timeout="1h").state == "waiting"
    return [run.id for run in reversed(acme)]


def test_the_key_filter_pages_a_tenants_runs_of_both_kinds_each_once_in_order(viewer_client, monkeypatch) -> None:
    monkeypatch.setattr(run_pages, "RUNS_PER_PAGE", 3)
    expected = acme_runs()

    seen, response, pages = [], viewer_client.get(URL, {"key": "acme"}), 0
    while True:
        pages += 1
        page = listed(response)
        assert len(page) <= 3
        seen += page
        older = links(response).get("Older")
        if older is None:
            break
        response = viewer_client.get(older)
    assert (seen, pages) == (expected, 4)

    back = viewer_client.get(links(response)["Newer"])
    assert listed(back) == expected[6:9]
    assert listed(viewer_client.get(links(back)["Newer"])) == expected[3:6]


def test_runs_list_key_lists_the_same_runs(monkeypatch) -> None:
    expected = acme_runs()
    page = listing.runs_page(listing.RunFilter(key="acme"))
    assert [row.run.id for row in page.rows] == expected
    running = listing.runs_page(listing.RunFilter(key="acme", status="running"))
    assert [row.run.id for row in running.rows] == [run_id for run_id in expected if run_id not in _synced()]


def _synced() -> set[str]:
    return set(Run.objects.filter(concurrency_key="acme").values_list("id", flat=True))


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_key_filter_reads_run_by_key_not_every_run() -> None:
    """With 20,000 runs (half with a key: 10 of key 'rare', about 5,000 of 'big'; inserted in
    bulk, then ANALYZE), the runs of the concurrency key come from run_by_key: a big key's newest
    first, about a page of rows read; a rare key's 10 rows. The runs holding live work under the
    key come from the keyed slots and waits, by primary key. Neither walks the runs (before
    migration 0007 the page filtered all 20,000 rows of run_newest for the rare key).

    Transactional: the rows are committed, then truncated, not rolled back, so they leave no dead
    pages that would skew the plans of the next test that counts rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO studio_run (id, workflow, input, status, error, suspended, waiting_for, lease_owner,
                                    created_at, updated_at, bounds, concurrency_key)
            SELECT 'run_' || lpad(to_hex(g), 24, '0'), 'sync_tenant', '{}', 'completed', '', false, '', '',
                   now() - g * interval '1 second', now(), '[]',
                   CASE WHEN g % 2000 = 1 THEN 'rare' WHEN g % 4 = 1 THEN 'big'
                        WHEN g % 2 = 1 THEN 'tenant-' || (g % 100) ELSE '' END
            FROM generate_series(1, 20000) AS g
            """
        )
        cursor.execute("ANALYZE studio_run")
    for key, most in (("rare", 10), ("big", listing.RUNS_PER_PAGE + 1)):
        with CaptureQueriesContext(connection) as captured:
            page = listing.runs_page(listing.RunFilter(key=key))
        assert len(page.rows) == most - (most > listing.RUNS_PER_PAGE)
        plans = []
        with connection.cursor() as cursor:
            for query in captured.captured_queries:
                if query["sql"].startswith("SELECT") and 'FROM "studio_run"' in query["sql"]:
                    cursor.execute("EXPLAIN (ANALYZE) " + query["sql"])
                    plans.append("\n".join(row[0] for row in cursor.fetchall()))
        assert any("using run_by_key" in plan or "on run_by_key" in plan for plan in plans), plans
        for plan in plans:
            assert "run_newest" not in plan and "Seq Scan on studio_run" not in plan, plan
            assert max(int(rows) for rows in re.findall(r"actual time=\S+ rows=(\d+)", plan)) <= most, plan
