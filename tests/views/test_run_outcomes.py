"""SPEC 14.6 on every surface: a run ended skipped shows its outcome, reason, limit (and the run
that caused it, for a run that has one) on its Studio page, in `stackbone runs show`, the API and
the admin; the runs list filters by the new statuses (Studio, the CLI, the API); a limit's activity
shows the runs it skipped."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pytest
from django.test import Client

from limits.cli import Streams
from limits.cli import runs as runs_cli
from limits.runs import bounds as run_bounds
from limits.runs import start_run, workflow
from stackbone.models import Run
from tests.api.test_runs import RunsApi, run_operator
from tests.views.conftest import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_worker", "clock")]

BOUND = "workflow.test_outcome_skips"


@workflow(name="test_outcome_skips", concurrency={"total": 1, "on_full": "skip"})
def outcome_skips(input: dict) -> None:
    return None


REPLACING = "workflow.test_outcome_replaces"


@workflow(name="test_outcome_replaces", concurrency={"per_key": 1, "on_full": "replace"})
def outcome_replaces(input: dict) -> None:
    return None


@pytest.fixture
def skipped() -> Run:
    run_bounds.sync(["test_outcome_skips"])
    start_run(outcome_skips, {})
    run = start_run(outcome_skips, {})
    assert run.status == "skipped"
    return run


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = runs_cli.main(list(argv), streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return code, out.getvalue()


def test_the_run_page_shows_the_outcome_its_reason_and_its_limit(skipped, viewer_client: Client) -> None:
    page = viewer_client.get(f"/studio/runs/{skipped.id}/").content.decode()
    assert 'id="run-outcome"' in page
    assert 'data-reason="limit_full"' in page and "The limit is full" in page
    assert f'href="/studio/limits/{BOUND}/"' in page or f"/limits/{BOUND}/" in page
    assert "never started" in page
    assert "hx-get" not in page.split('id="run-live"')[1].split(">")[0]  # finished: no polling


def test_the_run_page_names_the_run_that_caused_it(clock, viewer_client: Client) -> None:
    now = dt.datetime.now(dt.UTC)
    cause = Run.objects.create(workflow="test_outcome_skips", status="pending", created_at=now, updated_at=now)
    replaced = Run.objects.create(
        workflow="test_outcome_skips",
        status="replaced",
        end_reason="limit_full",
        end_limit=BOUND,
        caused_by=cause.id,
        created_at=now,
        updated_at=now,
        finished_at=now,
    )
    page = viewer_client.get(f"/studio/runs/{replaced.id}/").content.decode()
    assert 'class="caused-by"' in page and f"/studio/runs/{cause.id}/" in page


def test_a_start_replaced_shows_the_run_that_replaced_it_and_is_listed_replaced(viewer_client: Client) -> None:
    """SPEC 14.3 for a run's start: the queued run a newer start of its key replaced says so on its
    page (its reason, its limit, "Replaced by" the newer run's link), and the runs list's filter,
    the CLI and the API find it by its status."""
    run_bounds.sync(["test_outcome_replaces"])
    start_run(outcome_replaces, {}, concurrency_key="acme")
    older = start_run(outcome_replaces, {}, concurrency_key="acme")
    newer = start_run(outcome_replaces, {}, concurrency_key="acme")
    page = viewer_client.get(f"/studio/runs/{older.id}/").content.decode()
    assert "a newer run of its key took its place in the queue" in page
    assert 'data-reason="key_pool_full"' in page and "<dt>Replaced by</dt>" in page
    assert f'href="/studio/runs/{newer.id}/"' in page and REPLACING in page
    screen = viewer_client.get("/studio/runs/", {"status": "replaced"}).content.decode()
    assert '<option value="replaced" selected>' in screen and older.id in screen and newer.id not in screen
    code, out = cli("list", "--status", "replaced", "--json")
    assert code == 0 and [run["id"] for run in json.loads(out)["runs"]] == [older.id]
    [row] = RunsApi(run_operator()[1]).get(status="replaced").json()["runs"]
    assert (row["id"], row["end_reason"], row["end_limit"], row["caused_by"]) == (
        older.id,
        "key_pool_full",
        REPLACING,
        newer.id,
    )


def test_the_runs_list_filters_by_the_new_statuses(skipped, viewer_client: Client) -> None:
    screen = viewer_client.get("/studio/runs/", {"status": "skipped"}).content.decode()
    assert '<option value="skipped" selected>' in screen and '<option value="replaced">' in screen
    assert skipped.id in screen
    assert Run.objects.exclude(id=skipped.id).get().id not in screen
    code, out = cli("list", "--status", "skipped", "--json")
    assert code == 0 and [run["id"] for run in json.loads(out)["runs"]] == [skipped.id]
    api = RunsApi(run_operator()[1])
    answer: Any = api.get(status="skipped").json()
    [row] = answer["runs"]
    assert (row["id"], row["status"], row["end_reason"], row["end_limit"], row["caused_by"]) == (
        skipped.id,
        "skipped",
        "limit_full",
        BOUND,
        "",
    )
    assert row["end_reason_text"] == "the limit is full"
    assert api.get(status="replaced").json()["runs"] == []


def test_runs_show_says_why_it_ended(skipped) -> None:
    code, out = cli("show", skipped.id)
    assert code == 0
    assert f"{skipped.id}  test_outcome_skips  skipped" in out
    assert f"why:       the limit is full ({BOUND})" in out


def test_the_limit_s_activity_shows_the_runs_it_skipped(skipped, viewer_client: Client) -> None:
    page = viewer_client.get(f"/studio/limits/{BOUND}/").content.decode()
    assert "event-run_skipped" in page
    assert f">{skipped.id}</a>" in page and "was skipped, never started" in page


def test_the_admin_shows_the_cause(skipped) -> None:
    client = Client()
    client.force_login(make_user("root", "studio.view_run", staff=True))
    listing = client.get("/admin/studio/run/", {"status__exact": "skipped"}).content.decode()
    assert skipped.id in listing and "limit_full" in listing
    page = client.get(f"/admin/studio/run/{skipped.id}/change/").content.decode()
    assert "limit_full" in page and BOUND in page


def test_a_bound_s_page_offers_its_when_full_settings(skipped, operator_client: Client, viewer_client: Client) -> None:
    page = operator_client.get(f"/studio/limits/{BOUND}/").content.decode()
    assert 'id="when-full"' in page and "start ends the run <i>skipped</i>" in page
    facts = viewer_client.get(f"/studio/limits/{BOUND}/").content.decode()
    assert 'id="fact-when-full"' in facts and "skip, max waiting none" in facts
