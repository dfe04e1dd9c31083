"""SPEC 11.6, written as a user writes a test of their own workflow: the @workflow lives in this
test module, which no deploy loads, so migrate never synced its own bound. The first start_run
creates it from the decorator (as a sync of that one bound would, audited as the deploy's), and
the bound holds from that first run on. Must never happen: "unknown limit 'workflow.<name>'" for
a bound the decorator declared, or another workflow's bound touched by that sync."""

from __future__ import annotations

import pytest

from limits import services
from limits.models import Limit
from limits.runs import bounds as run_bounds
from stackbone.models import Run
from studio.workflows import start_run, step, workflow

pytestmark = pytest.mark.django_db(transaction=True)


@step
def call_partner(account: str) -> str:
    return account


@workflow(name="test_synced_at_first_start", concurrency={"total": 1, "per_key": 1})
def synced_at_first_start(input: dict) -> dict:
    return {"account": call_partner(input["account"])}


def test_the_first_start_creates_the_bound_from_the_decorator_and_it_binds(no_worker) -> None:
    run_bounds.sync(["test_other_bound"])  # a deploy that synced another workflow's bound only
    assert not Limit.objects.filter(name="workflow.test_synced_at_first_start").exists()
    first = start_run("test_synced_at_first_start", {"account": "acme"}, concurrency_key="acme")
    second = start_run("test_synced_at_first_start", {"account": "globex"}, concurrency_key="globex")
    bound = Limit.objects.get(name="workflow.test_synced_at_first_start")
    assert (bound.kind, bound.declared, bound.capacity, bound.per_key) == ("workflow", True, 1, 1)
    assert [Run.objects.get(id=r.id).status for r in (first, second)] == ["pending", "queued"]  # total 1
    services.ensure_workflow_bound("workflow.test_synced_at_first_start", 1, 1)  # already there: nothing changes
    assert Limit.objects.filter(name="workflow.test_synced_at_first_start").count() == 1


@workflow(name="test_other_bound", concurrency={"total": 2})
def other_bound(input: dict) -> dict:
    return {}


def test_the_first_start_leaves_every_other_bound_as_it_was(no_worker) -> None:
    run_bounds.sync(["test_other_bound"])
    start_run("test_synced_at_first_start", {"account": "acme"})
    assert Limit.objects.get(name="workflow.test_other_bound").declared  # not undeclared by that sync
