"""Issue 30, the second ceiling: the Limits list's Workers panel, `stackbone workers` and the
worker metrics show the Celery workers alive, the runs waiting for one, and every limit whose
capacity is above the workers' total concurrency ("the workers, not this limit, bound it").

The figures come from limits.workers; most tests give it an answer of their own (`answered`), and
one asks a real worker process over the test run's broker."""

from __future__ import annotations

import datetime as dt
import io
import json
import re

import pytest
from django.utils import timezone

from limits import workers
from limits.cli import Streams
from limits.cli import workers as workers_cli
from limits.runs import bounds as run_bounds
from stackbone.models import Run
from tests.factories import declare
from tests.runs.conftest import Worker, real_broker, wait_for  # noqa: F401 - real_broker is a fixture
from tests.runs.conftest import workers as worker_processes  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db

PANEL = "/studio/limits/-/workers/"
TWO = workers.Workers(
    (
        workers.Worker("celery@box-a", "box-a", "prefork", 2, 2),
        workers.Worker("celery@box-b", "box-b", "prefork", 1, 0),
    )
)


@pytest.fixture
def answered(monkeypatch):
    """limits.workers answers what the test sets (`answered.workers = ...`), asking nobody."""

    class Answer:
        workers = TWO

    monkeypatch.setattr(workers, "ask", lambda: Answer.workers)
    workers.forget_answers()
    yield Answer
    workers.forget_answers()


def pending_run(seconds_ago: int) -> Run:
    created = timezone.now() - dt.timedelta(seconds=seconds_ago)
    return Run.objects.create(workflow="place_call", status="pending", created_at=created, updated_at=created)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = workers_cli.main(list(argv), streams=Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


# --- Studio ---------------------------------------------------------------------------------------


def test_the_limits_list_loads_the_workers_panel_after_the_page(answered, viewer_client) -> None:
    page = viewer_client.get("/studio/limits/").content.decode()
    assert f'hx-get="{PANEL}" hx-trigger="load"' in page
    assert "celery@box-a" not in page  # the list itself never waits for the workers


def test_the_panel_lists_the_workers_the_pending_runs_and_the_limits_they_bound(answered, viewer_client) -> None:
    declare(voice_calls={"capacity": 20, "max_hold": "45m"}, partner_api={"capacity": 3, "max_hold": "10m"})
    run_bounds.sync(["sync_tenant"])  # capacity 100000 (per key only): bound by the workers too
    pending_run(130)
    pending_run(5)
    panel = viewer_client.get(PANEL).content.decode()
    rows = re.findall(r'<tr id="worker-\d+">(.*?)</tr>', panel, re.S)
    assert len(rows) == 2
    assert "celery@box-a" in rows[0] and "prefork" in rows[0] and "2 / 2" in rows[0]
    assert "2 of 3 worker processes busy." in panel
    pending = re.search(r'id="runs-pending">(.*?)</p>', panel, re.S)[1]
    assert "<b>2</b> runs waiting for a worker, the oldest for 2m 10s." in pending
    bounded = re.search(r'id="bounded-by-workers">(.*?)</div>', panel, re.S)[1]
    assert "the workers, not this limit, bound it" in bounded
    assert re.findall(r'<a href="[^"]+">([^<]+)</a> \(capacity (\d+)\)', bounded) == [
        ("voice-calls", "20"),
        ("workflow.sync_tenant", "100000"),
    ]  # partner-api's 3 is not above the workers' 3
    assert "data-poll-while-visible" in panel and 'hx-trigger="every 3s' in panel


def test_a_panel_without_workers_says_why(answered, viewer_client) -> None:
    answered.workers = workers.Workers(note=workers.NO_ANSWER.format(seconds=3))
    declare(voice_calls={"capacity": 20, "max_hold": "45m"})
    panel = viewer_client.get(PANEL).content.decode()
    assert f"No worker answered: {workers.NO_ANSWER.format(seconds=3)}." in panel
    assert "bounded-by-workers" not in panel  # with no worker, every limit would be: it says nothing


def test_the_panel_costs_the_same_queries_whatever_the_number_of_limits(
    answered, viewer_client, django_assert_max_num_queries
) -> None:
    declare(**{f"l{i}": {"capacity": 10, "max_hold": "1m"} for i in range(40)})
    with django_assert_max_num_queries(4):  # session, user, the pending runs, the limits above the workers
        assert viewer_client.get(PANEL).status_code == 200


def test_the_panel_needs_a_signed_in_user(client) -> None:
    assert client.get(PANEL).status_code == 302


# --- the CLI --------------------------------------------------------------------------------------


def test_stackbone_workers_prints_the_workers_pending_runs_and_bounded_limits(answered) -> None:
    declare(voice_calls={"capacity": 20, "max_hold": "45m"})
    pending_run(75)
    code, out, err = cli()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["WORKER", "HOST", "POOL", "CONCURRENCY", "BUSY"]
    assert lines[1].split() == ["celery@box-a", "box-a", "prefork", "2", "2"]
    assert lines[3] == "2 workers: 2 of 3 processes busy"
    assert lines[4] == "1 run waiting for a worker, the oldest for 1m 15s"
    assert lines[5] == (
        "voice-calls: capacity 20 is more than the workers' 3 processes: the workers, not this limit, bound it"
    )
    # the example workflows' bounds with only a per_key (capacity 100000), by name
    assert any(line.startswith("workflow.sync_tenant: capacity 100000 is more than") for line in lines[6:])


def test_stackbone_workers_json(answered) -> None:
    declare(voice_calls={"capacity": 20, "max_hold": "45m"}, partner_api={"capacity": 3, "max_hold": "10m"})
    code, out, _ = cli("--json")
    answer = json.loads(out)
    assert code == 0
    assert answer["workers"][0] == {
        "name": "celery@box-a",
        "host": "box-a",
        "pool": "prefork",
        "concurrency": 2,
        "busy": 2,
    }
    assert (answer["concurrency"], answer["busy"], answer["note"]) == (3, 2, None)
    assert answer["pending"] == {"runs": 0, "oldest_seconds": None}
    assert answer["bounded_by_workers"] == [
        {"limit": "voice-calls", "kind": "limit", "capacity": 20},
        {"limit": "workflow.deploy_branch", "kind": "workflow", "capacity": 100_000},  # per key only
        {"limit": "workflow.sync_tenant", "kind": "workflow", "capacity": 100_000},  # per key only
    ]


def test_stackbone_workers_without_a_worker_exits_1_and_says_why(answered) -> None:
    answered.workers = workers.Workers(note=workers.IN_PROCESS)
    code, out, _ = cli()
    assert code == 1
    assert out.splitlines()[0] == f"no worker answered: {workers.IN_PROCESS}"


def test_in_eager_mode_nobody_is_asked() -> None:
    """The tests' own mode (CELERY_TASK_ALWAYS_EAGER): no broadcast, no wait."""
    workers.forget_answers()
    found = workers.ask()
    assert (found.workers, found.note) == ((), workers.EAGER)


# --- a real worker ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_is_listed_by_the_panel_and_the_verb(worker_processes, viewer_client) -> None:  # noqa: F811
    declare(voice_calls={"capacity": 4, "max_hold": "45m"})
    worker = Worker()
    worker_processes.append(worker)
    name = next(re.search(r"(test-[0-9a-f]{8}@\S+)", line)[1] for line in worker.lines if "test-" in line)
    wait_for(lambda: bool(workers.alive(fresh=True).workers), what="the worker to answer", worker=worker, timeout=30)

    found = workers.alive()
    assert [(w.name, w.pool, w.concurrency, w.busy) for w in found.workers] == [(name, "solo", 1, 0)]
    panel = viewer_client.get(PANEL).content.decode()
    assert name in panel and "solo" in panel
    assert "voice-calls</a> (capacity 4)" in panel  # 4 > the worker's 1 process
    code, out, _ = cli("--json")
    assert code == 0 and [w["name"] for w in json.loads(out)["workers"]] == [name]
