"""A run waiting for several limits (SPEC 10.5): its hook step names and links each limit, its
page lists each limit with its place in that queue, its key, the limits it waits for with it,
and whether it is owed (10.4: capacity is held for it)."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from limits import services
from stackbone.models import Run, Step
from tests.factories import declare

pytestmark = pytest.mark.django_db


@pytest.fixture
def group_run(clock) -> Run:
    declare(a={"capacity": 1, "max_hold": "1h"}, b={"capacity": 1, "max_hold": "1h", "per_key": 1})
    services.acquire("a", run_id="holder-a")
    services.acquire("a", run_id="first-in-a", request="first-in-a")
    now = timezone.now()
    run = Run.objects.create(
        workflow="call_partner",
        status=Run.Status.RUNNING,
        suspended=True,
        created_at=now,
        started_at=now,
        updated_at=now,
    )
    Step.objects.create(run=run, seq=1, name="Esperando hueco · a + b", kind="hook", status="waiting", started_at=now)
    assert services.acquire_group(["a", "b"], run_id=run.id, request=f"{run.id}:1", key="acme").state == "waiting"
    return run


def test_the_hook_step_links_each_limit_and_the_page_lists_each_wait(group_run, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{group_run.id}/").content.decode()
    (name,) = re.findall(r'<span class="step-name">(.*?)</span>', page, re.S)
    assert name == ('Esperando hueco · <a href="/studio/limits/a/">a</a> + <a href="/studio/limits/b/">b</a>')
    assert "<strong>2nd of 2</strong> in the queue" in page  # behind first-in-a on a
    assert "<strong>1st of 1</strong> in the queue" in page  # alone on b
    assert "with b, all or nothing" in page and "with a, all or nothing" in page
    assert "key <span" in page and "acme" in page
    assert ">owed<" not in page


def test_an_owed_run_is_shown_as_owed(group_run, operator_client, clock) -> None:
    services.acquire("b", run_id="holder-b")  # b is full: the group waits for it
    holder = services.acquire("a", run_id="x", request="x")
    assert holder.state == "waiting"
    clock.advance(minutes=3)
    from limits.models import QueueEntry

    QueueEntry.objects.filter(run_id=group_run.id).update(passed_over_at=timezone.now())
    page = operator_client.get(f"/studio/runs/{group_run.id}/").content.decode()
    assert ">owed<" in page
