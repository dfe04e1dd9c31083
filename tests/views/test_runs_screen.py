"""The Runs screen (/studio/runs/): newest first, filtered by status, workflow and the limit runs
wait for, searched by run id and label, in keyset pages; the Start run form refuses bad input
with the message by its field and creates nothing; Cancel; only operators (studio.change_run)
may start or cancel; a page costs the same number of queries at any number of runs."""

from __future__ import annotations

import datetime as dt
import json
import re
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from limits import services
from limits.models import QueueEntry
from limits.runs import bounds as run_bounds
from limits.runs import listing, screen
from limits.runs import pages as run_pages
from stackbone.models import Run
from tests.conftest import requires_postgres
from tests.factories import declare
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db

URL = "/studio/runs/"


def make_run(workflow: str = "place_call", status: str = "pending", *, seconds_ago: float = 0, **fields: object) -> Run:
    now = timezone.now() - dt.timedelta(seconds=seconds_ago)
    return Run.objects.create(workflow=workflow, status=status, created_at=now, updated_at=now, **fields)


def listed(response) -> list[str]:
    """The run ids of the list, in order."""
    return re.findall(r'<tr id="run-([^"]+)" class="run-row">', response.content.decode())


def links(response) -> dict[str, str]:
    """The pager's links by their text."""
    found = re.findall(r'<a href="([^"]+)" hx-get="[^"]+"[^>]*>([^<]+)</a>', response.content.decode())
    return {text.strip("«‹› "): unescape(href) for href, text in found if "runs" in href}


# --- the list -----------------------------------------------------------------------------------


def test_the_list_shows_runs_newest_first_with_what_they_wait_for_and_hold(viewer_client) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    old = make_run(seconds_ago=3)
    holder = make_run(status="running", seconds_ago=2)
    waiter = make_run(status="running", seconds_ago=1)
    services.acquire("voice-calls", run_id=holder.id, label="call-1")
    services.acquire("voice-calls", run_id=waiter.id, label="call-2", timeout="1h")

    response = viewer_client.get(URL)

    assert response.status_code == 200
    assert listed(response) == [waiter.id, holder.id, old.id]
    page = response.content.decode()
    assert "waits · voice-calls" in page and "busy · voice-calls" in page
    assert "call-1" in page and "call-2" in page
    assert 'href="/studio/runs/"' in page and "aria-current" in page  # the nav link


def test_the_nav_links_to_runs_from_every_studio_page(viewer_client) -> None:
    assert 'href="/studio/runs/">Runs</a>' in viewer_client.get("/studio/limits/").content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=completed", ["done"]),
        ("status=running", ["waiting", "holding"]),
        ("workflow=export_report", ["done"]),
        ("workflow=place_call&status=running", ["waiting", "holding"]),
        ("waiting=voice-calls", ["waiting"]),
        ("waiting=partner-api", []),
        ("status=nonsense", ["waiting", "holding", "done"]),  # not a status: no filter
    ],
)
def test_the_filters(viewer_client, query: str, expected: list[str]) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"}, partner_api={"capacity": 1, "max_hold": "10m"})
    runs = {
        "done": make_run("export_report", "completed", seconds_ago=3),
        "holding": make_run(status="running", seconds_ago=2),
        "waiting": make_run(status="running", seconds_ago=1),
    }
    services.acquire("voice-calls", run_id=runs["holding"].id)
    services.acquire("voice-calls", run_id=runs["waiting"].id, timeout="1h")

    response = viewer_client.get(f"{URL}?{query}")

    assert listed(response) == [runs[name].id for name in expected]
    if not expected:
        assert "No run matches" in response.content.decode()


@pytest.mark.parametrize("as_list", [5_000, 1], ids=["short-queue-as-a-list", "long-queue-as-a-semi-join"])
def test_waiting_for_finds_the_same_runs_whether_the_queue_is_short_or_long(
    viewer_client, monkeypatch, as_list: int
) -> None:
    monkeypatch.setattr(run_pages, "WAITING_AS_LIST", as_list)
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    made = [make_run(status="running", seconds_ago=10 - n) for n in range(4)]
    for run in made:
        services.acquire("voice-calls", run_id=run.id, timeout="1h")

    assert listed(viewer_client.get(URL, {"waiting": "voice-calls"})) == [run.id for run in made[:0:-1]]
    assert listed(viewer_client.get(URL, {"waiting": "voice-calls", "status": "running"})) == [
        run.id for run in made[:0:-1]
    ]
    assert listed(viewer_client.get(URL, {"waiting": "no-such-limit"})) == []


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_finished_run_never_waits_so_a_finished_status_with_waiting_for_is_empty(viewer_client, status) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    holder, waiter = make_run(status="running"), make_run(status="running")
    services.acquire("voice-calls", run_id=holder.id)
    services.acquire("voice-calls", run_id=waiter.id, timeout="1h")
    Run.objects.filter(id=waiter.id).update(status=status)  # as if its end had not left the queue

    assert listed(viewer_client.get(URL, {"waiting": "voice-calls", "status": status})) == []


def test_search_finds_a_run_by_its_whole_id_or_a_label_it_holds_or_waits_with(viewer_client) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    plain = make_run(seconds_ago=3)
    holder = make_run(status="running", seconds_ago=2)
    waiter = make_run(status="running", seconds_ago=1)
    services.acquire("voice-calls", run_id=holder.id, label="Order-77")
    services.acquire("voice-calls", run_id=waiter.id, label="order-78", timeout="1h")

    assert listed(viewer_client.get(URL, {"q": plain.id})) == [plain.id]
    assert listed(viewer_client.get(URL, {"q": "ORDER-7"})) == [waiter.id, holder.id]
    assert listed(viewer_client.get(URL, {"q": "order-78"})) == [waiter.id]
    assert listed(viewer_client.get(URL, {"q": plain.id[:10]})) == []  # ids are found whole
    assert listed(viewer_client.get(URL, {"q": "order", "status": "pending"})) == []
    assert "No run matches “nothing-like-it”" in viewer_client.get(URL, {"q": "nothing-like-it"}).content.decode()


@pytest.mark.parametrize("scanned", [5_000, 3])  # 3: more matches than the ids read first
def test_a_capped_search_lists_the_newest_matches_and_pages_through_them_once(
    viewer_client, monkeypatch, scanned: int
) -> None:
    """More runs match than SEARCH_MATCHES (lowered to 7): the matches are the 7 newest by
    (created_at, id) whatever the order of the queue, every request the same, the pages walk them
    once, and the page says the cap applies; the same when more match than SEARCH_SCANNED."""
    monkeypatch.setattr(run_pages, "SEARCH_MATCHES", 7)
    monkeypatch.setattr(run_pages, "SEARCH_SCANNED", scanned)
    monkeypatch.setattr(run_pages, "RUNS_PER_PAGE", 3)
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    services.acquire("voice-calls", run_id="holder")
    made = [make_run(status="running", seconds_ago=100 - n) for n in range(12)]
    for run in reversed(made):  # queued oldest-last: the queue's order is not the list's
        services.acquire("voice-calls", run_id=run.id, label=f"order-{run.id}", timeout="1h")
    newest = [run.id for run in reversed(made)][:7]

    assert listing.search_matches("order-") == listing.Matches(newest, capped=True)
    seen, response = [], viewer_client.get(URL, {"q": "order-"})
    assert "showing the 7 newest matches" in response.content.decode()
    while True:
        seen += listed(response)
        if "Older" not in links(response):
            break
        response = viewer_client.get(links(response)["Older"])
    assert seen == newest
    narrow = viewer_client.get(URL, {"q": f"order-{made[0].id}"})
    assert listed(narrow) == [made[0].id] and "newest matches" not in narrow.content.decode()


def test_a_whole_run_id_is_found_without_scanning_labels(viewer_client) -> None:
    """A search for an existing run's whole id is one lookup by primary key: no query reads the
    slots' or the queues' labels (they would be scans of the queues)."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    run = make_run(status="running")
    services.acquire("voice-calls", run_id=run.id, label=f"mentions {run.id}")
    with CaptureQueriesContext(connection) as captured:
        assert listing.search_matches(run.id) == listing.Matches([run.id])
    assert len(captured) == 1 and "label" not in captured[0]["sql"].lower(), captured.captured_queries
    with CaptureQueriesContext(connection) as captured:
        assert listing.search_matches("mentions") == listing.Matches([run.id])
    assert any("label" in query["sql"].lower() for query in captured.captured_queries)


def test_the_list_does_not_poll_while_a_search_is_shown(viewer_client, htmx) -> None:
    make_run()
    searching = viewer_client.get(URL, {"q": "order"}, headers=htmx).content.decode()
    assert "every 3s" not in searching and "runs-changed from:body" in searching
    assert "Not refreshed automatically while searching" in searching
    assert "every 3s" in viewer_client.get(URL, {"status": "pending"}, headers=htmx).content.decode()


def test_a_run_whose_id_is_an_action_word_has_its_own_page(operator_client) -> None:
    """Run ids are made "run_..." but nothing stops another id: the list's actions live under
    /studio/runs/-/, so a run called "start" or "cancel" is not hidden by them."""
    for word in ("start", "cancel"):
        run = make_run(id=word)
        response = operator_client.get(f"/studio/runs/{word}/")
        assert response.status_code == 200 and run.id in response.content.decode()
    assert operator_client.get("/studio/runs/-/start/").status_code == 405  # POST only


def test_htmx_gets_the_table_only_and_it_polls_the_same_list(viewer_client, htmx) -> None:
    make_run()
    response = viewer_client.get(URL, {"status": "pending"}, headers=htmx)

    page = response.content.decode()
    assert page.lstrip().startswith('<div id="runs-table"')
    assert 'hx-get="/studio/runs/?status=pending"' in page
    assert "every 3s" in page and "runs-changed from:body" in page


def test_pages_are_keyset_pages_that_walk_every_run_once_even_created_in_the_same_instant(
    viewer_client, clock, monkeypatch
) -> None:
    monkeypatch.setattr(run_pages, "RUNS_PER_PAGE", 4)
    made = [make_run() for _ in range(10)]  # one instant: the id breaks the tie
    newest_first = sorted((run.id for run in made), reverse=True)

    seen, response, pages = [], viewer_client.get(URL), 0
    while True:
        pages += 1
        seen += listed(response)
        older = links(response).get("Older")
        if older is None:
            break
        response = viewer_client.get(older)
    assert (seen, pages) == (newest_first, 3)

    newer = links(response)["Newer"]
    back = viewer_client.get(newer)
    assert listed(back) == newest_first[4:8]
    assert links(back).get("Newest") == URL
    assert listed(viewer_client.get(links(back)["Newer"])) == newest_first[:4]


@pytest.mark.parametrize(
    ("query", "as_list"),
    [("waiting=voice-calls", 5_000), ("waiting=voice-calls", 1), ("q=call", 5_000)],
    ids=["waiting-short-queue", "waiting-long-queue", "search"],
)
def test_filtered_pages_walk_every_matching_run_once(
    viewer_client, clock, monkeypatch, query: str, as_list: int
) -> None:
    """A search and a short queue are paged from the matching ids (limits.runs.pages._window), a long
    queue in SQL: both walk the same pages, ties in the creation time broken by the id."""
    monkeypatch.setattr(run_pages, "RUNS_PER_PAGE", 3)
    monkeypatch.setattr(run_pages, "WAITING_AS_LIST", as_list)
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    services.acquire("voice-calls", run_id=make_run(status="running").id, label="holder")
    waiting = [make_run(status="running") for _ in range(7)]
    for run in waiting:
        services.acquire("voice-calls", run_id=run.id, label=f"call-{run.id}", timeout="1h")
    make_run()  # neither waits nor matches
    newest_first = sorted((run.id for run in waiting), reverse=True)

    seen, response = [], viewer_client.get(f"{URL}?{query}")
    while True:
        seen += listed(response)
        older = links(response).get("Older")
        if older is None:
            break
        assert query in older  # the filter is kept
        response = viewer_client.get(older)
    assert seen == newest_first
    back = viewer_client.get(links(response)["Newer"])
    assert listed(back) == newest_first[3:6]
    assert listed(viewer_client.get(links(back)["Newer"])) == newest_first[:3]


def test_a_cursor_that_is_not_one_shows_the_first_page(viewer_client) -> None:
    run = make_run()
    for junk in ("older=%%%", "newer=bm90LWEtY3Vyc29y", "older=" + "A" * 300):
        assert listed(viewer_client.get(f"{URL}?{junk}")) == [run.id]


def test_the_list_costs_the_same_queries_at_two_sizes(viewer_client, monkeypatch) -> None:
    """Every filter at once and a search: a constant number of queries, whatever the number of
    runs, waits and slots."""
    declare(voice_calls={"capacity": 3, "max_hold": "45m"})

    def grow(count: int) -> None:
        for n in range(count):
            run = make_run(status="running", seconds_ago=1000 - n)
            services.acquire("voice-calls", run_id=run.id, label=f"call-{n}", timeout="1h")

    def queries(query: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer_client.get(f"{URL}?{query}").status_code == 200
        return len(captured)

    cases = ["", "status=running", "workflow=place_call", "waiting=voice-calls", "q=call-1", "key=acme"]
    grow(5)
    small = [queries(case) for case in cases]
    grow(80)
    assert [queries(case) for case in cases] == small
    assert len(listed(viewer_client.get(URL))) == listing.RUNS_PER_PAGE


# --- permission ---------------------------------------------------------------------------------


def test_a_viewer_sees_no_start_form_and_no_cancel_and_may_not_use_them(viewer_client) -> None:
    run = make_run()
    page = viewer_client.get(URL).content.decode()
    assert "Start a run" not in page and ">Cancel<" not in page

    start = viewer_client.post("/studio/runs/-/start/", {"workflow": "export_report", "input": "{}"})
    cancel = viewer_client.post("/studio/runs/-/cancel/", {"run": run.id})

    assert (start.status_code, cancel.status_code) == (403, 403)
    assert "studio.change_run" in start.content.decode()
    assert list(Run.objects.values_list("id", "status")) == [(run.id, "pending")]


def test_an_operator_sees_the_start_form_and_cancel_only_for_unfinished_runs(operator_client) -> None:
    running = make_run(status="running")
    done = make_run(status="completed", seconds_ago=5)
    page = operator_client.get(URL).content.decode()

    assert "Start a run" in page
    assert f'name="run" value="{running.id}"' in page
    assert f'name="run" value="{done.id}"' not in page


# --- start --------------------------------------------------------------------------------------


def test_starting_a_run_from_htmx_refreshes_the_list_and_links_the_run(operator_client, htmx) -> None:
    response = operator_client.post(
        "/studio/runs/-/start/", {"workflow": "place_call", "input": '{"call_id": "c-1"}', "key": ""}, headers=htmx
    )

    run = Run.objects.get()
    assert (run.workflow, run.input) == ("place_call", {"call_id": "c-1"})
    assert response.status_code == 200
    assert json.loads(response["HX-Trigger"]) == {screen.RUNS_CHANGED_EVENT: {}}
    page = response.content.decode()
    assert f"Started {run.id} (place_call): pending." in page
    assert f'href="/studio/runs/{run.id}/"' in page


def test_starting_without_htmx_redirects_to_the_list_with_a_message(operator_client) -> None:
    response = operator_client.post("/studio/runs/-/start/", {"workflow": "export_report", "input": ""}, follow=True)
    run = Run.objects.get()
    assert response.redirect_chain == [("/studio/runs/", 302)]
    assert f"Started {run.id} (export_report)" in response.content.decode()
    assert run.input == {}


def test_the_key_is_the_runs_concurrency_key(operator_client, htmx) -> None:
    run_bounds.sync(["sync_tenant"])
    data = {"workflow": "sync_tenant", "input": '{"tenant": "acme"}', "key": "acme"}
    operator_client.post("/studio/runs/-/start/", data, headers=htmx)
    operator_client.post("/studio/runs/-/start/", data, headers=htmx)

    assert list(Run.objects.order_by("created_at", "id").values_list("concurrency_key", flat=True)) == ["acme"] * 2
    assert sorted(Run.objects.values_list("status", flat=True)) == ["pending", "queued"]


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"workflow": "place_call", "input": '{"call_id": '}, "input", "input is not valid JSON: Expecting value"),
        ({"workflow": "place_call", "input": "[1]"}, "input", "input must be a JSON object ({...}), not a list"),
        ({"workflow": "no_such_flow", "input": "{}"}, "workflow", "unknown workflow &#x27;no_such_flow&#x27;"),
        ({"workflow": "", "input": "{}"}, "workflow", screen.WORKFLOW_REQUIRED),
        ({"workflow": "place_call", "input": "{}", "key": "acme"}, "key", "caps no runs"),
        ({"workflow": "sync_tenant", "input": "{}", "key": "k" * 200}, "key", "key must be a string of 1 to 128"),
        ({"workflow": "place_call", "input": " " + "x" * 70_000}, "input", "input must be at most 65536 characters"),
        # JSON that Python reads and PostgreSQL's jsonb refuses: refused on every database.
        ({"workflow": "place_call", "input": '{"a": NaN}'}, "input", "are not JSON numbers"),
        ({"workflow": "place_call", "input": '{"a": Infinity}'}, "input", "are not JSON numbers"),
        ({"workflow": "place_call", "input": '{"a": 1e999}'}, "input", "are not JSON numbers"),
        ({"workflow": "place_call", "input": '{"a": "\\u0000"}'}, "input", "must not contain the NUL character"),
        ({"workflow": "place_call", "input": '{"a": "\\ud800"}'}, "input", "must not contain a lone surrogate"),
        ({"workflow": "place_call", "input": "[" * 30_000 + "]" * 30_000}, "input", "input is nested too deeply"),
    ],
)
def test_a_refused_start_shows_the_message_by_its_field_and_creates_nothing(
    operator_client, htmx, data: dict[str, str], field: str, message: str
) -> None:
    run_bounds.sync(["sync_tenant"])
    response = operator_client.post("/studio/runs/-/start/", data, headers=htmx)

    assert response.status_code == 422
    page = response.content.decode()
    error = re.search(rf'<ul class="errorlist" id="start-{field}-error"><li>(.*?)</li>', page)
    assert error is not None, page
    assert message in error.group(1)
    assert re.search(rf'id="start-{field}"[^>]*aria-invalid="true"', page, re.S)
    assert not Run.objects.exists() and not QueueEntry.objects.exists()
    if field == "input" and len(data["input"]) < 100:
        assert data["input"].replace('"', "&quot;") in page  # what was typed stays, to be corrected


def test_a_refused_start_without_htmx_is_the_whole_page_with_the_message(operator_client) -> None:
    response = operator_client.post("/studio/runs/-/start/", {"workflow": "place_call", "input": "nope"})
    assert response.status_code == 422
    assert "<h1>Runs</h1>" in response.content.decode()
    assert "input is not valid JSON" in response.content.decode()
    assert not Run.objects.exists()


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_from_the_list_cancels_and_answers_the_same_list(operator_client, htmx) -> None:
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    holder = make_run(status="running", seconds_ago=2)
    waiter = make_run(status="running", seconds_ago=1)
    services.acquire("voice-calls", run_id=holder.id)
    services.acquire("voice-calls", run_id=waiter.id, timeout="1h")
    headers = {**htmx, "HX-Current-URL": "http://testserver/studio/runs/?status=running"}

    response = operator_client.post("/studio/runs/-/cancel/", {"run": waiter.id}, headers=headers)

    assert response.status_code == 200
    assert Run.objects.get(id=waiter.id).status == "cancelled"
    assert QueueEntry.objects.get(run_id=waiter.id).state == "cancelled"
    assert listed(response) == [holder.id]  # still the running ones
    assert f"Cancelled {waiter.id}." in response.content.decode()


def test_cancelling_a_finished_run_changes_nothing_and_says_so(operator_client, htmx) -> None:
    run = make_run(status="completed", finished_at=timezone.now())
    before = Run.objects.filter(id=run.id).values().get()
    response = operator_client.post("/studio/runs/-/cancel/", {"run": run.id}, headers=htmx)
    assert f"{run.id} had already finished (completed): nothing changed." in response.content.decode()
    assert Run.objects.filter(id=run.id).values().get() == before


def test_cancelling_an_unknown_run_is_404(operator_client) -> None:
    assert operator_client.post("/studio/runs/-/cancel/", {"run": "run_nope"}).status_code == 404
    assert operator_client.post("/studio/runs/-/cancel/", {}).status_code == 404


def test_cancel_without_htmx_redirects_to_the_list(operator_client) -> None:
    run = make_run()
    response = operator_client.post("/studio/runs/-/cancel/", {"run": run.id})
    assert (response.status_code, response["Location"]) == (302, URL)
    assert Run.objects.get(id=run.id).status == "cancelled"


def test_only_a_signed_in_user_sees_the_list() -> None:
    response = Client().get(URL)
    assert (response.status_code, response["Location"]) == (302, "/accounts/login/?next=/studio/runs/")


def test_a_user_with_the_permission_through_a_group_may_start(htmx) -> None:
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.create(name="operators")
    group.permissions.add(Permission.objects.get(content_type__app_label="studio", codename="change_run"))
    user = make_user("cy")
    user.groups.add(group)
    client = Client()
    client.force_login(user)
    assert client.post("/studio/runs/-/start/", {"workflow": "export_report"}, headers=htmx).status_code == 200
    assert Run.objects.count() == 1


# --- PostgreSQL: the indexes serve the page ---------------------------------------------------------


@pytest.mark.postgres
@requires_postgres
@pytest.mark.parametrize(
    ("run_filter", "index"),
    [
        (listing.RunFilter(), "run_newest"),
        (listing.RunFilter(status="running"), "run_by_status"),
        (listing.RunFilter(workflow="place_call"), "run_by_workflow"),
    ],
    ids=["newest", "status", "workflow"],
)
def test_on_postgresql_each_filter_reads_its_index_in_page_order(run_filter, index: str) -> None:
    """With 20,000 runs (inserted in bulk, then ANALYZE), the page's query walks the filter's
    index newest first and stops after a page: no sort, no scan of the table, and it reads about a
    page of rows (studio/migrations/0005_run_list_indexes.py)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO studio_run (id, workflow, input, status, error, suspended, waiting_for, lease_owner,
                                    created_at, updated_at, bounds, concurrency_key)
            SELECT 'run_' || lpad(to_hex(g), 24, '0'),
                   (ARRAY['place_call', 'export_report', 'sync_tenant'])[1 + g % 3], '{}',
                   (ARRAY['completed', 'running', 'failed', 'pending'])[1 + g % 4], '', false, '', '',
                   now() - g * interval '1 second', now(), '[]', ''
            FROM generate_series(1, 20000) AS g
            """
        )
        cursor.execute("ANALYZE studio_run")
    query, candidates = listing.runs(run_filter)
    assert candidates is None
    plan = query.order_by("-created_at", "-id")[: listing.RUNS_PER_PAGE + 1].explain(analyze=True)

    assert f"Index Scan Backward using {index}" in plan or f"Index Only Scan Backward using {index}" in plan, plan
    assert "Sort" not in plan and "Seq Scan" not in plan, plan
    scanned = max(int(rows) for rows in re.findall(r"actual time=\S+ rows=(\d+)", plan))
    assert scanned <= listing.RUNS_PER_PAGE + 1, plan


# --- runs for tenants (issue 30) -------------------------------------------------------------------


def tenant_runs() -> dict[str, Run]:
    """acme: a sync_tenant run (its concurrency key), a place_call run holding a voice-calls slot
    under key acme taken inside the body (with_limit/acquire_slot: the run has no concurrency key),
    and one waiting under acme; globex: a place_call holding a slot. A run without any key."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m", "per_key": 1})
    run_bounds.sync(["sync_tenant"])
    runs = {
        "plain": make_run(seconds_ago=50),
        "synced": make_run("sync_tenant", "completed", seconds_ago=40, concurrency_key="acme"),
        "acme_holds": make_run(status="running", seconds_ago=30),
        "acme_waits": make_run(status="running", seconds_ago=20),
        "globex": make_run(status="running", seconds_ago=10),
    }
    services.acquire("voice-calls", run_id=runs["acme_holds"].id, key="acme", label="call-a1")
    services.acquire("voice-calls", run_id=runs["acme_waits"].id, key="acme", label="call-a2", timeout="1h")
    services.acquire("voice-calls", run_id=runs["globex"].id, key="globex", label="call-g1")
    return runs


def test_the_list_filters_by_key_the_runs_concurrency_key_or_a_key_it_holds_or_waits_with(viewer_client) -> None:
    runs = tenant_runs()
    acme = [runs["acme_waits"].id, runs["acme_holds"].id, runs["synced"].id]
    assert listed(viewer_client.get(URL, {"key": "acme"})) == acme
    assert listed(viewer_client.get(URL, {"key": "globex"})) == [runs["globex"].id]
    assert listed(viewer_client.get(URL, {"key": "ACME"})) == []  # keys are case-sensitive
    assert listed(viewer_client.get(URL, {"key": "acme", "status": "running"})) == acme[:2]
    assert listed(viewer_client.get(URL, {"key": "acme", "waiting": "voice-calls"})) == [runs["acme_waits"].id]
    page = viewer_client.get(URL, {"key": "acme"}).content.decode()
    assert 'id="runs-key" type="search" name="key" value="acme"' in page


def test_every_run_shows_the_key_of_each_acquisition_not_only_its_concurrency_key(viewer_client) -> None:
    runs = tenant_runs()
    page = viewer_client.get(URL).content.decode()
    rows = dict(re.findall(r'<tr id="run-([^"]+)" class="run-row">(.*?)</tr>', page, re.S))
    assert 'class="run-key">key <span class="long-value" title="acme">acme</span>' in rows[runs["acme_holds"].id]
    assert ">acme</span>" in rows[runs["acme_waits"].id] and ">acme</span>" in rows[runs["synced"].id]
    assert ">globex</span>" in rows[runs["globex"].id]
    assert "run-key" not in rows[runs["plain"].id]


def test_the_list_shows_when_each_run_started_and_how_long_it_ran(viewer_client, clock) -> None:
    now = clock.now()
    make_run(
        "export_report",
        "completed",
        seconds_ago=100,
        started_at=now - dt.timedelta(seconds=95),
        finished_at=now - dt.timedelta(seconds=20),
    )
    make_run("export_report", "running", seconds_ago=15, started_at=now - dt.timedelta(seconds=12))
    make_run("export_report", "pending", seconds_ago=1)
    page = viewer_client.get(URL).content.decode()
    assert '<th scope="col">Started</th><th scope="col">Duration</th>' in page
    started = re.findall(r'class="started-cell" data-label="Started">(.*?)</td>', page, re.S)
    durations = re.findall(r'class="duration-cell" data-label="Duration">(.*?)</td>', page, re.S)
    assert [re.sub(r"<[^>]+>", "", cell).strip() for cell in started] == ["—", "12s ago", "1m 35s ago"]
    assert [re.sub(r"<[^>]+>", "", cell).strip() for cell in durations] == ["—", "12s so far", "1m 15s"]


def test_the_start_form_shows_the_selected_workflows_docstring_as_a_hint(operator_client) -> None:
    page = operator_client.get(URL).content.decode()
    hints = dict(re.findall(r'<p class="hint workflow-hint" data-workflow="([^"]+)"[^>]*>(.*?)</p>', page, re.S))
    assert set(hints) == set(listing.workflow_names())
    assert "call_id" in hints["place_call"]  # the shipped examples say what input they take
    shown = re.findall(r'<p class="hint workflow-hint" data-workflow="([^"]+)">', page)
    assert shown == [listing.workflow_names()[0]]  # only the selected one is not hidden


def test_after_a_start_the_form_keeps_the_workflow_and_key_and_shows_its_hint(operator_client, htmx) -> None:
    run_bounds.sync(["sync_tenant"])
    data = {"workflow": "sync_tenant", "input": '{"tenant": "acme"}', "key": "acme"}
    form = operator_client.post("/studio/runs/-/start/", data, headers=htmx).content.decode()
    assert '<option value="sync_tenant" selected>' in form
    assert 'name="key" value="acme"' in form
    assert re.findall(r'<p class="hint workflow-hint" data-workflow="([^"]+)">', form) == ["sync_tenant"]
