"""A run's input, its steps' results and its output are JSON that every database of the box
stores: NaN, Infinity (1e999 reads as one), text holding NUL and lone surrogates are refused with
a clear message before anything is written, on SQLite as on PostgreSQL (whose jsonb refuses
them; SQLite would keep them)."""

from __future__ import annotations

import json

import pytest

from stackbone.models import Run, Step
from stackbone.runs import json_values
from stackbone.runs.runtime import WorkflowError
from studio.workflows import StepError, start_run, step, workflow

pytestmark = pytest.mark.django_db(transaction=True)

UNSTORABLE = [
    pytest.param({"a": float("nan")}, json_values.NOT_A_JSON_NUMBER, id="nan"),
    pytest.param({"a": float("inf")}, json_values.NOT_A_JSON_NUMBER, id="infinity"),
    pytest.param(json.loads('{"a": [1e999]}'), json_values.NOT_A_JSON_NUMBER, id="1e999"),
    pytest.param({"a": "x\x00y"}, json_values.NUL_IN_TEXT, id="nul"),
    pytest.param({"a\x00": 1}, json_values.NUL_IN_TEXT, id="nul-in-a-key"),
    pytest.param({"a": "\ud800"}, json_values.SURROGATE_IN_TEXT, id="lone-surrogate"),
    pytest.param(json.loads('{"a": "\\udc00x"}'), json_values.SURROGATE_IN_TEXT, id="escaped-lone-surrogate"),
]

# Text that only looks like what is refused is kept as it is.
STORABLE = {"backslash-u-zero": "\\u0000", "emoji": "\U0001f600", "quarter": 0.25, "big": 10**100}


@pytest.mark.parametrize(("value", "message"), UNSTORABLE)
def test_start_run_refuses_an_input_no_database_stores_and_creates_nothing(value: object, message: str) -> None:
    with pytest.raises(WorkflowError) as refused:
        start_run("export_report", value)
    assert str(refused.value) == f"the input must be JSON-serializable: {message}"
    assert not Run.objects.exists()


def test_text_that_only_looks_unstorable_is_stored_and_read_back_as_it_was() -> None:
    run = start_run("test_echo", STORABLE)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    assert run.input == STORABLE
    assert run.output == STORABLE


@workflow(name="test_echo")
def echo(input: dict) -> dict:
    return input


@step
def measure(kind: str) -> object:
    return {"nan": float("nan"), "nul": "a\x00b", "surrogate": "\ud83d"}[kind]


@workflow(name="test_unstorable_step")
def unstorable_step(input: dict) -> dict:
    try:
        measure(input["kind"])
    except StepError as error:
        return {"caught": error.error}
    return {"caught": None}


@workflow(name="test_unstorable_output")
def unstorable_output(input: dict) -> dict:
    return {"ratio": float("nan") if input["kind"] == "nan" else "\x00"}


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("nan", json_values.NOT_A_JSON_NUMBER),
        ("nul", json_values.NUL_IN_TEXT),
        ("surrogate", json_values.SURROGATE_IN_TEXT),
    ],
)
def test_a_step_returning_an_unstorable_value_fails_with_a_clear_message(kind: str, message: str) -> None:
    run = start_run("test_unstorable_step", {"kind": kind})
    run.refresh_from_db()
    expected = f"WorkflowError: the result of step 'measure' must be JSON-serializable: {message}"
    assert (run.status, run.output) == ("completed", {"caught": expected})
    assert list(Step.objects.filter(run=run).values_list("name", "status", "error", "result")) == [
        ("measure", "failed", expected, None)
    ]


@pytest.mark.parametrize(
    ("kind", "message"), [("nan", json_values.NOT_A_JSON_NUMBER), ("nul", json_values.NUL_IN_TEXT)]
)
def test_a_workflow_returning_an_unstorable_output_fails_with_a_clear_message(kind: str, message: str) -> None:
    run = start_run("test_unstorable_output", {"kind": kind})
    run.refresh_from_db()
    assert (run.status, run.output) == ("failed", None)
    assert (
        run.error == f"stackbone.runs.runtime.WorkflowError: the workflow's output must be JSON-serializable: {message}"
    )


@step
def raise_with(text: str) -> None:
    raise ValueError(text)


@workflow(name="test_unstorable_error")
def unstorable_error(input: dict) -> dict:
    try:
        raise_with("a\x00b \ud800")
    except StepError as error:
        return {"caught": error.error}
    return {}


@workflow(name="test_unstorable_failure")
def unstorable_failure(input: dict) -> dict:
    raise ValueError("a\x00b \ud800")


def test_an_error_message_with_nul_or_a_lone_surrogate_is_recorded_escaped() -> None:
    """A step's exception and a run's failure carry whatever text the code put in them: recorded
    escaped, the step fails and the run fails with their own error, not the database's."""
    run = start_run("test_unstorable_error", {})
    run.refresh_from_db()
    assert (run.status, run.output) == ("completed", {"caught": "ValueError: a\\x00b \\ud800"})
    failed = start_run("test_unstorable_failure", {})
    failed.refresh_from_db()
    assert (failed.status, failed.error) == ("failed", "ValueError: a\\x00b \\ud800")
