from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from limits.config import ConfigError, define_workspace, load_workspace
from limits.durations import DurationError, format_duration, parse_duration

# one_database (tests/conftest.py): the config's parsing and checks, before any database.
pytestmark = pytest.mark.one_database


@pytest.mark.parametrize(
    ("value", "ms"),
    [("500ms", 500), ("90s", 90_000), ("45m", 2_700_000), ("2h", 7_200_000), ("30d", 2_592_000_000), (1, 1)],
)
def test_durations_parse_to_milliseconds(value: object, ms: int) -> None:
    assert parse_duration(value) == ms


@pytest.mark.parametrize(
    "value", ["", "abc", "45x", "1.5h", "-5s", "0s", 0, -1, "31d", 2_592_000_001, True, 1.5, None, "5 m", "1h30m"]
)
def test_bad_durations_are_refused(value: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(value)


@pytest.mark.parametrize(
    ("ms", "text"), [(500, "500ms"), (2_650_000, "44m 10s"), (7_200_000, "2h"), (90_061_000, "1d 1h")]
)
def test_durations_format_short(ms: int, text: str) -> None:
    assert format_duration(ms) == text


def test_a_good_workspace_declares_its_limits() -> None:
    workspace = define_workspace(
        limits={"voice-calls": {"capacity": 20, "max_hold": "45m"}, "a.b_c": {"capacity": 1, "max_hold": 500}}
    )
    assert workspace.limits["voice-calls"].capacity == 20
    assert workspace.limits["voice-calls"].max_hold_ms == 45 * 60_000
    assert workspace.limits["a.b_c"].max_hold_ms == 500


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"voice-calls": {"capacity": 20}}, "limit 'voice-calls': max_hold is required"),
        ({"voice-calls": {"max_hold": "45m"}}, "limit 'voice-calls': capacity is required"),
        ({"voice-calls": {"capacity": 0, "max_hold": "45m"}}, "limit 'voice-calls': capacity must be"),
        ({"voice-calls": {"capacity": 100_001, "max_hold": "45m"}}, "limit 'voice-calls': capacity must be"),
        ({"voice-calls": {"capacity": True, "max_hold": "45m"}}, "limit 'voice-calls': capacity must be"),
        ({"voice-calls": {"capacity": 2.0, "max_hold": "45m"}}, "limit 'voice-calls': capacity must be"),
        ({"voice-calls": {"capacity": "2", "max_hold": "45m"}}, "limit 'voice-calls': capacity must be"),
        ({"voice-calls": {"capacity": 2, "max_hold": "31d"}}, "limit 'voice-calls': max_hold must be at most 30 days"),
        ({"voice-calls": {"capacity": 2, "max_hold": 0}}, "limit 'voice-calls': max_hold must be more than 0"),
        ({"voice-calls": {"capacity": 2, "max_hold": "45x"}}, "limit 'voice-calls': max_hold '45x' is not"),
        (
            {"voice-calls": {"capacity": 2, "max_hold": "1m", "priority": 1}},
            "limit 'voice-calls': unknown field 'priority'",
        ),
        ({"Voice": {"capacity": 2, "max_hold": "1m"}}, "limit name 'Voice' is invalid"),
        ({"a" * 65: {"capacity": 2, "max_hold": "1m"}}, "is invalid"),
        ({"": {"capacity": 2, "max_hold": "1m"}}, "limit name '' is invalid"),
        ({"calls/eu": {"capacity": 2, "max_hold": "1m"}}, "is invalid"),
    ],
)
def test_a_bad_workspace_names_the_limit_and_the_field(limits: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        define_workspace(limits=limits)  # type: ignore[arg-type]  # deliberately bad values
    assert message in str(error.value)


def test_a_name_of_64_characters_is_allowed() -> None:
    assert define_workspace(limits={"a" * 64: {"capacity": 1, "max_hold": "1s"}}).limits


def test_the_default_workspace_module_loads() -> None:
    assert "voice-calls" in load_workspace().limits


def test_a_missing_workspace_module_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot be loaded"):
        load_workspace("studio.no_such_workspace")


@pytest.mark.django_db
def test_manage_py_check_reports_a_bad_workspace(settings, tmp_path, monkeypatch) -> None:
    (tmp_path / "bad_workspace.py").write_text(
        "from limits.config import define_workspace\n"
        "workspace = define_workspace(limits={'voice-calls': {'capacity': 20}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.STACKBONE_WORKSPACE = "bad_workspace"
    with pytest.raises(SystemCheckError, match="limit 'voice-calls': max_hold is required"):
        call_command("check")


def test_every_problem_of_the_config_is_reported_at_once() -> None:
    """Issue 30: one ConfigError per problem, collected, not one at a time."""
    with pytest.raises(ConfigError) as caught:
        define_workspace(
            limits={
                "voice-calls": {"capacity": 0, "max_hold": "45x"},
                "partner-api": {"capacity": 5},
                "Bad": {"capacity": 1, "max_hold": "1m"},
                "fine": {"capacity": 1, "max_hold": "1m"},
            }
        )
    problems = [str(error) for error in caught.value.errors]
    assert len(problems) == 4, problems
    assert problems[0].startswith("limit 'voice-calls': capacity must be")
    assert problems[1].startswith("limit 'voice-calls': max_hold '45x' is not")
    assert problems[2] == "limit 'partner-api': max_hold is required"
    assert problems[3].startswith("limit name 'Bad' is invalid")
    assert str(caught.value).startswith("4 problems in the workspace config: limit 'voice-calls': capacity must be")


def test_one_problem_reads_as_before() -> None:
    with pytest.raises(ConfigError) as caught:
        define_workspace(limits={"voice-calls": {"capacity": 20}})
    assert str(caught.value) == "limit 'voice-calls': max_hold is required"
    assert [str(error) for error in caught.value.errors] == [str(caught.value)]


@pytest.mark.django_db
def test_manage_py_check_lists_every_bad_limit_at_once(settings, tmp_path, monkeypatch) -> None:
    (tmp_path / "bad_workspace_2.py").write_text(
        "from limits.config import define_workspace\n"
        "workspace = define_workspace(limits={'voice-calls': {'capacity': 20}, 'partner-api': {'max_hold': '1m'}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.STACKBONE_WORKSPACE = "bad_workspace_2"
    with pytest.raises(SystemCheckError) as caught:
        call_command("check")
    text = str(caught.value)
    assert "limit 'voice-calls': max_hold is required" in text
    assert "limit 'partner-api': capacity is required" in text
    assert text.count("(limits.E001)") == 2


@pytest.mark.parametrize(("value", "number"), [("45", 45), (" 90 ", 90), ("+7", 7), ("2592000000", 2592000000)])
def test_a_bare_number_in_text_needs_a_unit(value: str, number: int) -> None:
    """Issue 15, item 3: text never means milliseconds; an int (as in the config) still does."""
    with pytest.raises(DurationError) as caught:
        parse_duration(value)
    assert str(caught.value) == f"'{value.strip()}' needs a unit: {number}s, {number}m, {number}h"
    assert parse_duration(45) == 45
