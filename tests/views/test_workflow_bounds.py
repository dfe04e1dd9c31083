"""SPEC 11.5 in Studio: a workflow's own bound is listed beside the limits with its kind, can be
filtered by kind, and its page reads as the workflow's running runs, then its queued runs, with
the operator actions of a limit except max hold (a bound has none)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from limits import services
from limits.models import AuditEvent, Limit, Slot
from stackbone.models import Run
from tests.factories import declare, holders, queue

pytestmark = pytest.mark.django_db

BOUND = "workflow.place_orders"


def start(run_id: str, key: str | None = None) -> services.Acquisition:
    """What run_bounds does when a run of place_orders is created: take the bound, or queue."""
    return services.acquire_group([BOUND], run_id=run_id, request=f"{run_id}:start", key=key, label="place_orders")


@pytest.fixture
def bound(clock) -> Limit:
    """place_orders runs at most 2 at once, 1 per key: run_a (acme) and run_b (globex) run;
    run_c (acme) and run_d (initech) are queued, in that order. voice-calls is a limit beside it."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    services.sync_workflow_bounds({BOUND: (2, 1)})
    for run_id, key in (("run_a", "acme"), ("run_b", "globex"), ("run_c", "acme"), ("run_d", "initech")):
        start(run_id, key)
        clock.advance(seconds=1)
    return Limit.objects.get(name=BOUND)


def _row(page: str, name: str) -> str:
    found = re.search(rf'<tr id="limit-{re.escape(name)}">.*?</tr>', page, re.S)
    assert found is not None, f"no row for {name}"
    return found[0]


def _names(page: str) -> list[str]:
    return re.findall(r'<a class="limit-name" href="[^"]*">([^<]*)</a>', page)


def _section(page: str, section_id: str) -> str:
    found = re.search(rf'<section id="{section_id}".*?</section>', page, re.S)
    assert found is not None, f"no section {section_id}"
    return found[0]


def _run_links(section: str) -> list[str]:
    return re.findall(r'<a class="run" href="([^"]*)"', section)


# --- the list -----------------------------------------------------------------------------------


def test_the_list_shows_the_kind_of_each_limit(bound, operator_client) -> None:
    page = operator_client.get("/studio/limits/").content.decode()
    assert re.search(r'<th scope="col">Limit</th><th scope="col">Kind</th>', page)
    assert ">workflow</span>" in _row(page, BOUND)
    assert '<span class="kind-limit">limit</span>' in _row(page, "voice-calls")


def test_a_bound_has_no_max_hold_in_the_list(bound, operator_client) -> None:
    page = operator_client.get("/studio/limits/").content.decode()
    row = _row(page, BOUND)
    assert 'title="No max hold: a run holds its slot until it ends">—</span>' in row
    assert "30d" not in row
    assert "45m" in _row(page, "voice-calls")


def test_the_list_shows_a_bounds_runs_as_in_use_and_waiting(bound, operator_client) -> None:
    row = _row(operator_client.get("/studio/limits/").content.decode(), BOUND)
    assert "<b>2</b> / 2" in row and 'class="num waiting">2<' in row


@pytest.mark.parametrize(
    ("query", "kinds"),
    [
        ("?kind=workflow", {"workflow"}),
        ("?kind=limit", {"limit"}),
        ("", {"limit", "workflow"}),
        ("?kind=WORKFLOW", {"limit", "workflow"}),  # not a kind: no filter
        ("?kind=nonsense", {"limit", "workflow"}),
    ],
)
def test_the_list_filters_by_kind(bound, operator_client, query, kinds) -> None:
    page = operator_client.get(f"/studio/limits/{query}").content.decode()
    listed = _names(page)
    expected = Limit.objects.filter(kind__in=kinds).values_list("name", flat=True)
    assert sorted(listed) == sorted(expected)
    assert (BOUND in listed, "voice-calls" in listed) == ("workflow" in kinds, "limit" in kinds)


def test_the_kind_select_shows_the_filter_in_force(bound, operator_client) -> None:
    page = operator_client.get("/studio/limits/?kind=workflow").content.decode()
    select = re.search(r'<select id="limit-kind" name="kind".*?</select>', page, re.S)[0]
    assert re.findall(r"<option value=\"([^\"]*)\"", select) == ["", "limit", "workflow", "box"]
    assert '<option value="workflow" selected>Workflow bounds</option>' in select
    page = operator_client.get("/studio/limits/").content.decode()
    assert '<option value="" selected>All kinds</option>' in page


def test_the_kind_filter_combines_with_the_search(bound, operator_client) -> None:
    services.sync_workflow_bounds({BOUND: (2, 1), "workflow.send_calls": (5, None)})
    page = operator_client.get("/studio/limits/?kind=workflow&q=calls").content.decode()
    assert _names(page) == ["workflow.send_calls"]
    page = operator_client.get("/studio/limits/?kind=limit&q=calls").content.decode()
    assert _names(page) == ["voice-calls"]


def test_the_htmx_poll_and_the_pager_keep_the_kind_filter(db, operator_client) -> None:
    services.sync_workflow_bounds({f"workflow.w{n:03}": (1, None) for n in range(150)})
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    body = operator_client.get("/studio/limits/?kind=workflow&page=2", headers={"HX-Request": "true"}).content.decode()
    assert body.lstrip().startswith('<div id="limits-table"')
    assert 'hx-get="/studio/limits/?kind=workflow&amp;page=2"' in body
    bounds = Limit.objects.filter(kind="workflow").order_by("-declared", "name").values_list("name", flat=True)
    assert _names(body) == list(bounds[100:200])
    assert "voice-calls" not in _names(body)
    assert "/studio/limits/?kind=workflow&amp;page=1" in body  # the pager's links keep it too


def test_the_list_with_a_kind_filter_costs_the_same_queries_for_5_bounds_and_for_500(db, operator_client) -> None:
    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(url).status_code == 200
        return len(captured.captured_queries)

    services.sync_workflow_bounds({f"workflow.w{n}": (1, None) for n in range(5)})
    few = queries("/studio/limits/?kind=workflow&page=2")
    unfiltered = queries("/studio/limits/?page=2")
    services.sync_workflow_bounds({f"workflow.w{n}": (1, None) for n in range(500)})
    assert queries("/studio/limits/?kind=workflow&page=2") == few == unfiltered


def test_a_kind_without_limits_says_so(db, operator_client) -> None:
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    Limit.objects.filter(kind="workflow").delete()  # the bounds migrate synced: never used here
    page = operator_client.get("/studio/limits/?kind=workflow").content.decode()
    assert _names(page) == []
    assert "No workflow bound: no workflow caps its runs" in page
    page = operator_client.get("/studio/limits/?kind=workflow&q=zzz").content.decode()
    assert "No workflow bound whose name contains “zzz”." in page


# --- a bound's page -----------------------------------------------------------------------------


def test_a_bounds_page_lists_its_running_runs_with_links_to_them(bound, operator_client) -> None:
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    running = _section(page, "slots")
    assert re.search(r'<h2 id="slots-title">Running runs <span class="count">2</span></h2>', running)
    assert _run_links(running) == ["/studio/runs/run_a/", "/studio/runs/run_b/"]
    assert running.count('<span class="badge busy">running</span>') == 2
    assert "Expires in" not in running and "past max hold" not in running


def test_a_bounds_page_lists_its_queued_runs_in_order_with_links_to_them(bound, operator_client) -> None:
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    queued = _section(page, "queue")
    assert re.search(r'<h2 id="queue-title">Queued runs <span class="count">2</span></h2>', queued)
    assert _run_links(queued) == ["/studio/runs/run_c/", "/studio/runs/run_d/"]
    assert re.findall(r'<td class="num position">(\d+)</td>', queued) == ["1", "2"]
    assert page.index('id="slots-title"') < page.index('id="queue-title"')


def test_a_bounds_page_says_what_it_is(bound, operator_client) -> None:
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    assert re.search(
        r'<h1 id="limit-title">workflow\.place_orders <span class="badge kind-workflow"[^>]*>workflow bound</span>',
        page,
    )
    assert "at most 2 of its runs at once, 1 per concurrency key" in page
    assert re.search(r'id="figure-max-hold"[^>]*>—<', page)
    assert '<span class="label">Queued</span>' in page and '<span class="label">Running</span>' in page


def test_a_limits_page_keeps_its_slots_and_queue_headings(bound, operator_client) -> None:
    for run_id in ("r1", "r2", "r3"):
        services.acquire("voice-calls", run_id=run_id)
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    assert re.search(r'<h2 id="slots-title">Slots <span class="count">2</span></h2>', page)
    assert re.search(r'<h2 id="queue-title">Queue <span class="count">1</span></h2>', page)
    assert "Running runs" not in page and "Queued runs" not in page


def test_the_htmx_refresh_of_a_bounds_page_keeps_its_headings(bound, operator_client) -> None:
    body = operator_client.get(f"/studio/limits/{BOUND}/", headers={"HX-Request": "true"}).content.decode()
    assert body.lstrip().startswith('<div id="live"')
    assert "Running runs" in body and "Queued runs" in body
    assert 'id="edit-panel"' not in body


def test_an_empty_bound_says_no_run_is_running_or_queued(db, operator_client) -> None:
    services.sync_workflow_bounds({BOUND: (3, None)})
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    assert "No run of this workflow is running: all 3 are free." in page
    assert "No run is queued." in page


def test_a_bounds_page_takes_the_same_queries_with_2_queued_runs_and_with_40(bound, operator_client, clock) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(f"/studio/limits/{BOUND}/").status_code == 200
        return len(captured.captured_queries)

    few = queries()
    for n in range(38):
        start(f"run_more_{n}", ("acme", "globex", "initech")[n % 3])  # as many keys: one page of them
    assert Limit.objects.get(name=BOUND).waiting_count == 40
    assert queries() == few


# --- the edit panel of a bound --------------------------------------------------------------------


def test_a_bounds_page_offers_total_and_per_key_but_no_max_hold(bound, operator_client) -> None:
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    panel = _section(page, "edit-panel")
    assert '<h2 id="edit-title">Edit bound</h2>' in panel
    assert re.search(r"<label for=\"id_capacity\">Total</label>", panel)
    assert 'name="capacity" value="2"' in panel
    assert 'name="per_key"' in panel and f'action="/studio/limits/{BOUND}/per-key/"' not in panel
    assert f'hx-post="/studio/limits/{BOUND}/per-key/"' in panel
    assert 'name="max_hold"' not in panel
    assert "max-hold/" not in panel
    assert 'value="max_hold"' not in panel  # no reset of a max hold either


def test_a_viewer_sees_the_total_and_no_max_hold_of_a_bound(bound, viewer_client) -> None:
    panel = _section(viewer_client.get(f"/studio/limits/{BOUND}/").content.decode(), "edit-panel")
    assert "<dt>Total</dt><dd>2 " in panel
    assert "<dt>Max hold</dt><dd>— " in panel
    assert "<form" not in panel


def test_setting_a_max_hold_on_a_bound_is_refused_and_changes_nothing(bound, operator_client) -> None:
    for path, data in (("max-hold/", {"max_hold": "1h"}), ("reset/", {"field": "max_hold"})):
        for headers in ({"HX-Request": "true"}, {}):
            response = operator_client.post(f"/studio/limits/{BOUND}/{path}", data, headers=headers)
            assert response.status_code == 422
            assert "has no max hold: each run holds its slot until it ends" in response.content.decode()
    assert Limit.objects.get(name=BOUND).max_hold_override_ms is None
    assert not AuditEvent.objects.filter(action="max_hold").exists()


def test_raising_the_total_starts_the_oldest_queued_run_that_can_start(bound, operator_client) -> None:
    """run_c (acme) is older, but acme's pool (per key 1) is full with run_a: run_d starts."""
    response = operator_client.post(
        f"/studio/limits/{BOUND}/capacity/", {"capacity": "3"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert "Total is now 3 runs at once (declared 2)." in response.content.decode()
    assert holders(BOUND) == [("run_a", "busy"), ("run_b", "busy"), ("run_d", "reserved")]
    assert queue(BOUND) == ["run_c"]
    event = AuditEvent.objects.get(action="capacity")
    assert (event.limit.name, event.old_value, event.new_value) == (BOUND, "2", "3")
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    assert ">starting</span>" in _section(page, "slots")


def test_resetting_the_total_says_total(bound, operator_client) -> None:
    services.set_capacity(BOUND, 5, actor="user:ada")
    response = operator_client.post(
        f"/studio/limits/{BOUND}/reset/", {"field": "capacity"}, headers={"HX-Request": "true"}
    )
    assert "Total reset to the declared 2 runs at once." in response.content.decode()


def test_releasing_a_running_runs_slot_lets_the_next_queued_run_start(bound, operator_client) -> None:
    slot = Slot.objects.get(limit__name=BOUND, run_id="run_a", state="busy")
    response = operator_client.post(
        f"/studio/limits/{BOUND}/release/", {"slot": slot.id}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert holders(BOUND) == [("run_b", "busy"), ("run_c", "reserved")]
    assert queue(BOUND) == ["run_d"]
    assert AuditEvent.objects.filter(action="release", slot_id=slot.id, actor="user:ada").exists()
    queued = _section(response.content.decode(), "queue")
    assert _run_links(queued) == ["/studio/runs/run_d/"]


def test_the_per_key_of_a_bound_is_edited_like_a_limits(bound, operator_client) -> None:
    response = operator_client.post(
        f"/studio/limits/{BOUND}/per-key/", {"per_key": "2"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert Limit.objects.get(name=BOUND).per_key == 2


# --- the run page ---------------------------------------------------------------------------------


def test_the_run_page_says_a_queued_run_waits_to_start_and_a_bound_holds_until_the_run_ends(
    db, operator_client
) -> None:
    services.sync_workflow_bounds({BOUND: (1, None)})
    now = timezone.now()
    runs = [
        Run.objects.create(
            workflow="place_orders", status=status, bounds=[BOUND], created_at=now, updated_at=now, started_at=now
        )
        for status in (Run.Status.RUNNING, Run.Status.QUEUED)
    ]
    for run in runs:
        start(run.id)
    running = operator_client.get(f"/studio/runs/{runs[0].id}/").content.decode()
    assert "until the run ends" in running and "expires in" not in running
    queued = operator_client.get(f"/studio/runs/{runs[1].id}/").content.decode()
    assert 'class="badge status-queued" id="run-status">queued<' in queued
    assert "waits to start: its concurrency bounds are full" in queued
    assert "<strong>1st of 1</strong> in the queue" in queued
    assert 'data-reason="limit_full">The limit is full<' in queued  # SPEC 6.5
    services.release(Slot.objects.get(run_id=runs[0].id).id)  # to the queued run, reserved till a worker starts it
    reserved = operator_client.get(f"/studio/runs/{runs[1].id}/").content.decode()
    assert "its slots are reserved: it starts when a worker takes it" in reserved
    assert "concurrency bounds are full" not in reserved


# --- the admin ------------------------------------------------------------------------------------


def test_the_admin_lists_and_filters_limits_by_kind(bound, admin_client) -> None:
    page = admin_client.get("/admin/limits/limit/?kind__exact=workflow").content.decode()
    assert f">{BOUND}</a>" in page and ">voice-calls</a>" not in page
    assert re.search(r'<td class="field-notes">workflow bound</td>', page)
    assert re.search(r'<td class="field-max_hold">—</td>', page)


def test_the_admin_form_of_a_bound_edits_the_total_and_per_key_but_no_max_hold(bound, admin_client) -> None:
    limit = Limit.objects.get(name=BOUND)
    url = f"/admin/limits/limit/{limit.id}/change/"
    page = admin_client.get(url).content.decode()
    assert 'name="capacity"' in page and 'name="per_key"' in page and 'name="max_hold"' not in page
    assert "Total" in page
    response = admin_client.post(url, {"capacity": "3", "per_key": "", "max_hold": "1h"})
    assert response.status_code == 302
    limit.refresh_from_db()
    assert (limit.capacity_override, limit.max_hold_override_ms) == (3, None)
    assert holders(BOUND) == [("run_a", "busy"), ("run_b", "busy"), ("run_d", "reserved")]
