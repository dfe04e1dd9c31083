"""Issue 48: one guard of a run id (limits.runs.selectors.get_run) behind every surface that takes
one (a run's page and its Cancel, the Runs screen's Cancel, /api/runs/<id>/, its cancel and its
`before`), and one cancel path (limits.runs.listing.cancel) behind Studio's two Cancel buttons.

Must never happen: an id no run can have (longer than a run id, a lone surrogate) reaches the
database (a wasted query, or on PostgreSQL an error); a surface answers it otherwise than an
unknown run; a refused cancel changes a run."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from limits.runs import selectors
from stackbone.models import Run
from tests.api.test_runs import RunsApi, run_operator

pytestmark = pytest.mark.django_db

TOO_LONG = "r" * (selectors.RUN_ID_MAX_LENGTH + 1)


def make_run(run_id: str) -> Run:
    now = timezone.now()
    return Run.objects.create(id=run_id, workflow="place_call", status="pending", created_at=now, updated_at=now)


def test_an_id_no_run_can_have_is_no_run_without_a_query(django_assert_num_queries) -> None:
    assert Run._meta.get_field("id").max_length == selectors.RUN_ID_MAX_LENGTH
    longest = make_run("r" * selectors.RUN_ID_MAX_LENGTH)
    assert selectors.get_run(longest.id) == longest
    with django_assert_num_queries(0):
        for run_id in (TOO_LONG, "run_\ud800", "run_\x00"):
            assert selectors.get_run(run_id) is None


def test_studio_and_the_api_answer_an_id_no_run_can_have_as_an_unknown_run(operator_client) -> None:
    longest = make_run("r" * selectors.RUN_ID_MAX_LENGTH)
    api = RunsApi(run_operator()[1])
    with CaptureQueriesContext(connection) as queries:
        answers = {
            "run page": operator_client.get(f"/studio/runs/{TOO_LONG}/"),
            "run page's cancel": operator_client.post(f"/studio/runs/{TOO_LONG}/cancel/"),
            "runs screen's cancel": operator_client.post("/studio/runs/-/cancel/", {"run": TOO_LONG}),
            "api show": api.get(f"{TOO_LONG}/"),
            "api cancel": api.post(f"{TOO_LONG}/cancel/"),
            "api before": api.get(before=TOO_LONG),
        }
    assert {name: response.status_code for name, response in answers.items()} == {
        "run page": 404,
        "run page's cancel": 404,
        "runs screen's cancel": 404,
        "api show": 404,
        "api cancel": 404,
        "api before": 400,
    }
    unknown = f"unknown run '{TOO_LONG}'"
    assert answers["api show"].json() == answers["api cancel"].json() == {"error": unknown, "field": "run"}
    assert answers["api before"].json() == {"error": unknown, "field": "before"}
    assert not [query["sql"] for query in queries.captured_queries if TOO_LONG in query["sql"]]
    longest.refresh_from_db()
    assert longest.status == "pending"
