"""Every field of a run's start (`POST /api/runs/`) and every filter of the runs list, fed wrong
types, huge numbers, unicode, empty and very long strings and metacharacters: the answer is a
run started as asked, or a JSON 400 naming the field at fault (413 for a body over Django's
size limit; never a 500), and a refused start writes nothing (no run, no queue entry, no slot)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from limits.runs import bounds as run_bounds
from stackbone.models import Run
from tests.api.test_runs import RunsApi, run_operator
from tests.fuzz.conftest import fuzz, json_values, snapshot, text

pytestmark = pytest.mark.django_db

GOOD_START = {"workflow": "sync_tenant", "input": {"tenant": "acme"}, "key": "acme"}


@pytest.fixture
def api(calls) -> RunsApi:
    run_bounds.sync(["sync_tenant"])
    return RunsApi(run_operator()[1])


def rows() -> tuple[Any, ...]:
    runs: list[Mapping[str, Any]] = list(Run.objects.order_by("id").values())
    return (*snapshot(), runs)


@fuzz
@given(field=st.sampled_from(["workflow", "input", "key", "limits"]), value=json_values)
@example(field="input", value={"a": "\x00"})
@example(field="input", value={"\ud800": 1})
@example(field="input", value={"a": 10**400})
@example(field="key", value="")
@example(field="key", value="k" * 129)
@example(field="limits", value=[])
@example(field="limits", value=["partner-api", "voice-calls", "voice-calls"])
@example(field="limits", value=["workflow.sync_tenant"])
@example(field="limits", value=["Voice-Calls"])
@example(field="workflow", value="sync_tenant\n")
def test_a_start_with_any_value_starts_the_run_or_is_a_400_naming_the_field(api, field, value) -> None:
    before = rows()
    response = api.post(body={**GOOD_START, field: value})

    assert response.status_code in (201, 400, 413), (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"
    if response.status_code == 201:
        run = Run.objects.get(id=response.json()["id"])
        assert (run.workflow, run.status in ("pending", "queued")) == ("sync_tenant", True)
        return
    assert response.json()["field"] == (field if response.status_code == 400 else "body"), response.json()
    assert isinstance(response.json()["error"], str) and response.json()["error"]
    assert rows() == before, "a refused start wrote something"


@fuzz
@given(name=st.sampled_from(["status", "workflow", "key", "waiting_for", "size", "before"]), value=text)
@example(name="size", value="9" * 5000)
@example(name="before", value="run_" + "x" * 100)
@example(name="waiting_for", value="voice-calls")
def test_a_list_filter_of_any_value_is_a_list_or_a_400(api, name, value) -> None:
    response = api.get(**{name: value})

    assert response.status_code in (200, 400), (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"
    if response.status_code == 200:
        assert set(response.json()) == {"runs", "more"}
    else:
        assert response.json()["field"] in (name, None)  # None: a NUL, refused before any view
