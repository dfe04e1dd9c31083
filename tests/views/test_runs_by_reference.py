"""Issue 30: a run is found by its reference, the value of the input field its workflow names
(`@workflow(reference="call_id")`), while it is still `pending` and holds no slot and no wait, in
Studio's search, `stackbone runs list --search` and the API's `?search=` (one filter:
limits.listing.search_matches). The reference is stored as the run starts (studio migration
0008, run_by_reference) and matched exactly from that index, beside the whole id and the labels.

Must never happen: a search for a reference lists a run whose reference is another (a part, a
different case), or a value that names no one run (an object, true) is stored as a reference."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from limits import services
from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.runs import listing
from stackbone.models import Run
from stackbone.runs import runtime
from studio.workflows import WorkflowError, start_run, workflow
from tests.api.test_runs import RunsApi, run_operator
from tests.conftest import requires_postgres
from tests.factories import declare
from tests.views.test_runs_screen import URL, listed, make_run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_worker")]


@workflow(name="test_call_by_reference", reference="call_id")
def call_by_reference(input: dict) -> dict:
    """Places a call; input {"call_id": ...}."""
    return {}


@workflow(name="test_no_reference")
def no_reference(input: dict) -> dict:
    return {}


def cli_list(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main(["list", *argv], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def test_a_pending_run_is_found_by_its_call_id_in_studio_the_cli_and_the_api(viewer_client) -> None:
    other = start_run(call_by_reference, {"call_id": "c-420"})
    run = start_run(call_by_reference, {"call_id": "c-42", "account": "acme"})
    start_run(no_reference, {"call_id": "c-42"})  # its workflow names no reference
    assert (run.status, run.reference, other.reference) == ("pending", "c-42", "c-420")

    assert listed(viewer_client.get(URL, {"q": "c-42"})) == [run.id]
    assert listed(viewer_client.get(URL, {"q": "  c-42 "})) == [run.id]  # as typed, spaces around
    assert listed(viewer_client.get(URL, {"q": "c-4"})) == []  # exact: no part of a reference
    assert listed(viewer_client.get(URL, {"q": "C-42"})) == []  # and case-sensitive

    code, out, err = cli_list("--search", "c-42")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == [run.id]
    code, out, err = cli_list("--search", "c-42", "--json")
    assert [row["id"] for row in json.loads(out)["runs"]] == [run.id]
    assert json.loads(out)["runs"][0]["reference"] == "c-42"

    api = RunsApi(run_operator()[1])
    answer = api.get(search="c-42")
    assert answer.status_code == 200, answer.content
    assert answer.json() == json.loads(out)
    assert api.get(search="c-42", status="completed").json()["runs"] == []


def test_the_reference_shows_in_the_list_row_on_the_run_page_and_in_runs_show(viewer_client) -> None:
    run = start_run(call_by_reference, {"call_id": "c-42"})

    row = re.search(rf'<tr id="run-{run.id}" class="run-row">.*?</tr>', viewer_client.get(URL).content.decode(), re.S)
    assert row is not None and 'class="run-reference">ref' in row.group(0) and "c-42" in row.group(0)
    page = viewer_client.get(f"/studio/runs/{run.id}/").content.decode()
    assert re.search(r"<dt>Reference</dt><dd[^>]*>.*c-42", page)

    out, err = io.StringIO(), io.StringIO()
    assert runs_cli.main(["show", run.id], streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err)) == 0
    assert "  reference: c-42" in out.getvalue().splitlines()


def test_a_reference_is_found_beside_ids_and_labels_and_after_the_run_ended(viewer_client) -> None:
    """One search lists the runs of either kind, newest first; a finished run keeps its reference
    (its labels are history, its reference is not)."""
    declare(voice_calls={"capacity": 1, "max_hold": "45m"})
    labelled = make_run(status="running", seconds_ago=5)
    services.acquire("voice-calls", run_id=labelled.id, label="about c-42")
    finished = start_run(call_by_reference, {"call_id": "c-42"})
    Run.objects.filter(id=finished.id).update(status="completed")
    fresh = start_run(call_by_reference, {"call_id": "c-42"})

    assert listed(viewer_client.get(URL, {"q": "c-42"})) == [fresh.id, finished.id, labelled.id]
    assert listed(viewer_client.get(URL, {"q": fresh.id})) == [fresh.id]  # a whole id: that run only


@pytest.mark.parametrize(
    ("value", "reference"),
    [
        (42, "42"),  # a number: its text as JSON writes it
        (4.5, "4.5"),
        (" c-7\t", "c-7"),  # text without its surrounding spaces
        ("", ""),
        ("x" * 128, "x" * 128),
        ("x" * 129, ""),  # longer than a search reads: not kept, so no search half-matches it
        ({"id": "c-1"}, ""),  # an object, a list, true, null name no one run: not kept
        (["c-1"], ""),
        (True, ""),
        (None, ""),
    ],
)
def test_what_is_kept_as_the_reference(value: object, reference: str) -> None:
    assert start_run(call_by_reference, {"call_id": value}).reference == reference


def test_a_run_without_the_field_or_with_an_input_that_is_not_an_object_has_none(viewer_client) -> None:
    assert start_run(call_by_reference, {"account": "acme"}).reference == ""
    assert start_run(call_by_reference, ["c-42"]).reference == ""
    assert start_run(call_by_reference, None).reference == ""
    assert listed(viewer_client.get(URL, {"q": "c-42"})) == []


@pytest.mark.parametrize(
    "value",
    ["<script>alert(1)</script>", "c\x1b[31m-red", "c-\u202e24", "'; DROP TABLE studio_run; --", "100%_"],
    ids=["html", "escape", "rtl", "sql", "like"],
)
def test_a_hostile_reference_is_kept_as_given_found_exactly_and_shown_escaped(viewer_client, value: str) -> None:
    run = start_run(call_by_reference, {"call_id": value})
    start_run(call_by_reference, {"call_id": "100"})  # `100%_` must not match it as a pattern

    assert run.reference == value
    assert listing.search_matches(value) == listing.Matches([run.id])
    assert listed(viewer_client.get(URL, {"q": value})) == [run.id]
    page = viewer_client.get(URL).content.decode()
    assert "<script>alert" not in page and "\x1b" not in page and "\u202e" not in page
    detail = viewer_client.get(f"/studio/runs/{run.id}/").content.decode()
    assert "<script>alert" not in detail and "\x1b" not in detail and "\u202e" not in detail
    code, out, _err = cli_list("--search", value)
    assert code == 0 and run.id in out


def test_text_a_database_cannot_hold_is_refused_with_the_input_and_finds_nothing() -> None:
    """NUL and a lone surrogate are refused in the whole input before anything is written
    (stackbone.runs.json_values), so they never reach the reference; a search for them finds none."""
    for value in ("c\x00-42", "c-\ud800"):
        with pytest.raises(WorkflowError, match="the input"):
            start_run(call_by_reference, {"call_id": value})
        assert listing.search_matches(value) == listing.Matches([])
    assert not Run.objects.exists()
    code, out, _err = cli_list("--search", "c-\udc80")  # a non-UTF-8 argument
    assert (code, out) == (0, "no runs match\n")


@pytest.mark.parametrize("reference", ["", 7, "x" * 201, "a\x00b"])
def test_a_bad_reference_in_the_decorator_is_a_workflow_error_naming_it(reference: object) -> None:
    with pytest.raises(WorkflowError, match="reference must name a field of the input"):
        workflow(name="test_bad_reference", reference=reference)(lambda input: input)  # type: ignore[call-overload]
    with pytest.raises(WorkflowError):
        runtime.get_workflow("test_bad_reference")


def test_a_reference_search_costs_the_same_queries_at_two_sizes(viewer_client) -> None:
    """The reference is matched in the query that reads the labels: a search by reference costs
    what a search by label does, whatever the number of runs that have a reference."""
    declare(voice_calls={"capacity": 3, "max_hold": "45m"})

    def queries(text: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer_client.get(URL, {"q": text}).status_code == 200
        return len(captured)

    def grow(count: int) -> None:
        for n in range(count):
            start_run(call_by_reference, {"call_id": f"c-{n}"})
            services.acquire("voice-calls", run_id=make_run(status="running").id, label=f"call-{n}", timeout="1h")

    grow(3)
    small = [queries(text) for text in ("c-1", "call-1", "nothing")]
    grow(60)
    assert [queries(text) for text in ("c-1", "call-1", "nothing")] == small
    assert small[0] == small[1]


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_reference_search_reads_run_by_reference_not_every_run() -> None:
    """With 20,000 runs (half with a reference, 4 of them 'c-42'; inserted in bulk, then
    ANALYZE), the search's query reads the reference from run_by_reference: an index lookup of
    the 4 rows, no scan of studio_run (studio migration 0008).

    Transactional: the rows are committed, then truncated, not rolled back, so they leave no dead
    pages that would skew the plans of the next test that counts rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO studio_run (id, workflow, input, status, error, suspended, waiting_for, lease_owner,
                                    created_at, updated_at, bounds, concurrency_key, reference)
            SELECT 'run_' || lpad(to_hex(g), 24, '0'), 'test_call_by_reference', '{}', 'completed', '', false,
                   '', '', now() - g * interval '1 second', now(), '[]', '',
                   CASE WHEN g % 5000 = 1 THEN 'c-42' WHEN g % 2 = 1 THEN 'c-' || g ELSE '' END
            FROM generate_series(1, 20000) AS g
            """
        )
        cursor.execute("ANALYZE studio_run")
    with CaptureQueriesContext(connection) as captured:
        matches = listing.search_matches("c-42")
    assert len(matches.run_ids) == 4 and not matches.capped
    searches = [query["sql"] for query in captured.captured_queries if "reference" in query["sql"]]
    assert len(searches) == 1, captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE) " + searches[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "using run_by_reference" in plan or "on run_by_reference" in plan, plan
    assert "Seq Scan on studio_run" not in plan and "run_newest" not in plan, plan
