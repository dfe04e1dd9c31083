"""SPEC 12.5, 12.6 and 12.3 in Studio: the box at the top of the Limits list (runs executing /
base, the burst ceiling, runs waiting for the box); its page lists the executing runs then the
waiting ones in order, shows base and burst, and an operator edits or resets them from its edit
panel (audited as the signed-in user; a bad value comes back next to its field and changes
nothing). A workflow's bound above the base says it is capped by the box's base."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.config import define_workspace
from limits.models import AuditEvent, Limit
from studio.workflows import start_run, step, workflow
from tests.factories import holders, queue

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/studio/limits/"
PAGE = "/studio/limits/box/"
EDIT = "/studio/limits/-/box/"


@step
def work(label: str) -> str:
    return label


@workflow(name="views_box_one")
def one(input: dict) -> str:
    return work(input["label"])


@workflow(name="views_box_two", concurrency={"total": 5})
def two(input: dict) -> str:
    return work(input["label"])


def declare_box(base: int = 1, burst: float = 2.0) -> None:
    services.sync_workspace(
        define_workspace(
            limits={"aa-first-by-name": {"capacity": 2, "max_hold": "1h"}},
            run_concurrency={"base": base, "burst": burst},
        )
    )


@pytest.fixture
def busy_box(no_worker) -> list[str]:
    """Base 1, burst 2 (ceiling 2): a run of each workflow executes; two more runs of `two` wait."""
    declare_box()
    runs = [start_run(one, {"label": "a"}), start_run(two, {"label": "b"})]
    runs += [start_run(two, {"label": f"w{n}"}) for n in range(2)]
    return [run.id for run in runs]


def values() -> tuple[int | None, float | None, int]:
    box = Limit.objects.get(name="box")
    return box.per_key, box.burst, box.capacity


def row_of(page: str, name: str) -> str:
    return page.split(f'id="limit-{name}"')[1].split("</tr>")[0]


def test_the_box_is_the_first_row_of_the_list_with_executing_base_ceiling_and_waiting(busy_box, viewer_client) -> None:
    page = viewer_client.get(LIST).content.decode()
    assert page.index('id="limit-box"') < page.index('id="limit-aa-first-by-name"')
    row = row_of(page, "box")
    assert "<b>2</b> executing / base 1" in row
    assert "burst 2× · ceiling 2" in row
    assert 'id="box-waiting"' in row and ">2</td>" in row
    bound = row_of(page, "workflow.views_box_two")
    assert "capped by the box's base: 1" in bound


def test_the_box_page_lists_executing_runs_then_waiting_ones_in_order(busy_box, viewer_client) -> None:
    page = viewer_client.get(PAGE).content.decode()
    assert "Executing runs" in page and "Waiting for the box" in page
    executing, waiting = page.split('id="queue"')
    assert [run for run in busy_box[:2] if run in executing] == busy_box[:2]
    assert waiting.index(busy_box[2]) < waiting.index(busy_box[3])
    assert busy_box[2] not in executing
    assert 'id="figure-base">1<' in page and 'id="figure-burst">2×<' in page
    assert "views_box_two" in page  # the workflow column
    assert 'id="box-field"' not in page  # a viewer sees the values, not the form
    assert 'id="fact-base">1' in page


def test_an_operator_raises_base_and_burst_and_waiting_runs_start_at_once(busy_box, operator_client, htmx) -> None:
    page = operator_client.get(PAGE).content.decode()
    assert 'id="box-field"' in page and f'hx-post="{EDIT}"' in page
    response = operator_client.post(EDIT, {"base": "3", "burst": "1.5"}, headers=htmx)
    assert response.status_code == 200
    body = response.content.decode()
    assert "The box now executes at most 4 runs at once (base 3 × burst 1.5), no workflow more than 3." in body
    assert "limit-changed" in response["HX-Trigger"]
    assert values() == (3, 1.5, 4)
    assert [state for _, state in holders("box")].count("reserved") == 2 and queue("box") == []
    events = AuditEvent.objects.filter(action="box").values_list("actor", "new_value")
    assert list(events) == [("user:ada", "base 3, burst 1.5, ceiling 4")]


def test_a_field_left_as_it_is_stays_declared(busy_box, operator_client, htmx) -> None:
    operator_client.post(EDIT, {"base": "2", "burst": "2"}, headers=htmx)
    box = Limit.objects.get(name="box")
    assert (box.per_key_override, box.burst_override) == (2, None)
    again = operator_client.post(EDIT, {"base": "2", "burst": "2"}, headers=htmx).content.decode()
    assert "already in force: nothing changed" in again
    assert AuditEvent.objects.filter(action="box").count() == 1


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"base": "0", "burst": "2"}, "base", "Base must be a whole number from 1 to 100000, not 0"),
        ({"base": "many", "burst": "2"}, "base", "Base must be a whole number from 1 to 100000, not &#x27;many&#x27;"),
        ({"base": "", "burst": "2"}, "base", "Enter a base: a whole number from 1 to 100000."),
        ({"base": "1", "burst": "11"}, "burst", "Burst must be from 1.0 to 10.0, not 11.0"),
        ({"base": "1", "burst": "x" * 300}, "burst", "(300 characters)"),
    ],
)
def test_a_bad_value_comes_back_next_to_its_field_and_changes_nothing(
    busy_box, operator_client, htmx, data, field, message
) -> None:
    response = operator_client.post(EDIT, data, headers=htmx)
    assert response.status_code == 422
    body = response.content.decode()
    errors = body.split(f'name="{field}"')[1].split("<p class")[0]
    assert 'class="errorlist' in errors and message in errors
    assert values() == (1, 2.0, 2)
    assert not AuditEvent.objects.filter(action="box").exists()
    assert queue("box") == busy_box[2:]


def test_reset_brings_back_the_declared_values_and_takes_nothing_back(busy_box, operator_client, htmx) -> None:
    operator_client.post(EDIT, {"base": "3", "burst": "3"}, headers=htmx)
    assert values() == (3, 3.0, 9)
    assert Limit.objects.get(name="box").in_use == 4
    body = operator_client.post(EDIT, {"reset": "burst"}, headers=htmx).content.decode()
    assert "Burst reset to the declared 2: the box executes at most 6 runs at once." in body
    body = operator_client.post(EDIT, {"reset": "base"}, headers=htmx).content.decode()
    assert "Base reset to the declared 1: the box executes at most 2 runs at once." in body
    assert values() == (1, 2.0, 2)
    assert Limit.objects.get(name="box").in_use == 4  # lowering stops no executing run
    page = operator_client.get(PAGE).content.decode()
    assert 'id="over-capacity"' in page


def test_a_viewer_is_refused_and_a_crafted_capacity_reset_of_the_box_is_a_clear_refusal(
    busy_box, viewer_client, operator_client, htmx
) -> None:
    assert viewer_client.post(EDIT, {"base": "5", "burst": "2"}, headers=htmx).status_code == 403
    refused = operator_client.post(f"{PAGE}reset/", {"field": "capacity"}, headers=htmx)
    assert refused.status_code == 422
    assert "stackbone limits box --base/--burst" in refused.content.decode()
    assert values() == (1, 2.0, 2)


def test_without_run_concurrency_the_edit_is_404(operator_client, htmx) -> None:
    services.sync_workspace(define_workspace(limits={}))
    assert operator_client.post(EDIT, {"base": "2", "burst": "2"}, headers=htmx).status_code == 404


def test_a_workflow_bound_above_the_base_says_it_is_capped_by_the_box(busy_box, viewer_client) -> None:
    page = viewer_client.get("/studio/limits/workflow.views_box_two/").content.decode()
    assert 'id="capped-note"' in page
    assert "Capped by the box’s base" in page and "<b>1</b> is in force" in page
    plain = viewer_client.get("/studio/limits/workflow.views_box_one/")
    assert plain.status_code == 404 or 'id="capped-note"' not in plain.content.decode()


def test_the_box_page_runs_a_constant_number_of_queries(busy_box, viewer_client, no_worker) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert viewer_client.get(PAGE).status_code == 200
        return len(queries)

    before = count()
    for n in range(6):
        start_run(one if n % 2 else two, {"label": f"more{n}"})
    assert count() == before


def test_a_limit_above_the_base_says_its_whole_runs_are_capped_by_the_box(busy_box, viewer_client) -> None:
    """SPEC 12.3 for a named limit: capacity 2, base 1: one run at a time holds it for its whole run."""
    page = viewer_client.get("/studio/limits/aa-first-by-name/").content.decode()
    assert 'id="capped-note"' in page and "Whole runs capped by the box’s base" in page
    assert "whole runs capped by the box's base: 1" in viewer_client.get("/studio/limits/").content.decode()
