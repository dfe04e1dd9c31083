"""The workspace config and the duration parser take anything a user can write in Python and
either accept it or raise their own error naming what is wrong: never another exception."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from limits.config import MAX_CAPACITY, ConfigError, define_workspace
from limits.durations import MAX_DURATION_MS, MS_PER_UNIT, DurationError, parse_duration
from limits.forms import duration_input
from tests.fuzz.conftest import NASTY_ENGINE, fuzz, json_values

ACCEPTED_DURATION = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)")
anything = st.one_of(
    json_values,
    st.sampled_from(NASTY_ENGINE),
    st.binary(max_size=20),
    st.floats(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.tuples(st.integers()),
    st.frozensets(st.integers(), max_size=3),
)


def expected_ms(value: object) -> int | None:
    """The reference: what SPEC 1.2 accepts, computed independently of the parser."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        ms = value
    elif isinstance(value, str):
        match = ACCEPTED_DURATION.fullmatch(value.strip())
        if match is None:
            return None
        ms = int(match[1]) * MS_PER_UNIT[match[2]]
    else:
        return None
    return ms if 0 < ms <= MAX_DURATION_MS else None


@fuzz
@given(anything)
@example("٣m")  # found by this test: non-ASCII digits were accepted as a duration
@example("１０s")
@example(True)
@example(2_592_000_001)
@example("2592000001")
@example("30d")
@example(" 90s ")
def test_parse_duration_accepts_exactly_the_documented_values(value: object) -> None:
    reference = expected_ms(value)
    try:
        ms = parse_duration(value)
    except DurationError as error:
        assert reference is None, f"{value!r} should be {reference} ms"
        # says what is allowed: the range, or (a bare number in a text) the units
        assert "30 days" in str(error) or "more than 0" in str(error) or "needs a unit" in str(error)
    else:
        assert ms == reference


@fuzz
@given(st.integers(min_value=1, max_value=MAX_DURATION_MS))
def test_what_the_edit_form_shows_parses_back_to_the_same_max_hold(ms: int) -> None:
    assert parse_duration(duration_input(ms)) == ms


names = st.one_of(
    st.from_regex(r"[a-z0-9._-]{1,64}", fullmatch=True),
    st.sampled_from(NASTY_ENGINE),
    st.integers(),
    st.none(),
    st.booleans(),
    st.tuples(st.text(max_size=3)),
)
fields = st.one_of(
    st.fixed_dictionaries(
        {"capacity": st.one_of(st.integers(min_value=-5, max_value=MAX_CAPACITY + 5), anything), "max_hold": anything}
    ),
    st.dictionaries(st.one_of(st.sampled_from(["capacity", "max_hold", "Capacity", "maxHold"]), names), anything),
    anything,
)


@fuzz
@given(st.dictionaries(names, fields, max_size=4))
def test_define_workspace_accepts_a_valid_config_or_names_the_bad_limit_and_field(limits: dict) -> None:
    try:
        workspace = define_workspace(limits=limits)
    except ConfigError as error:
        message = str(error)
        assert message and "\n" not in message
        bad_names = [
            name for name in limits if not (isinstance(name, str) and re.fullmatch(r"[a-z0-9._-]{1,64}", name))
        ]
        if not bad_names:  # every name is fine: each problem names a limit and a field
            for problem in map(str, error.errors):
                assert problem.startswith("limit '"), problem
                assert any(field in problem for field in ("capacity", "max_hold", "field", "mapping")), problem
    else:
        for name, spec in workspace.limits.items():
            assert 1 <= spec.capacity <= MAX_CAPACITY
            assert 0 < spec.max_hold_ms <= MAX_DURATION_MS
            assert spec.capacity == limits[name]["capacity"] and type(limits[name]["capacity"]) is int


@pytest.mark.parametrize(
    "config, message",
    [
        ({"<script>": {"capacity": 1, "max_hold": "1m"}}, "limit name '<script>' is invalid"),
        ({"a'; drop table x; --": {"capacity": 1, "max_hold": "1m"}}, "is invalid"),
        ({"a" * 65: {"capacity": 1, "max_hold": "1m"}}, "is invalid"),
        ({"": {"capacity": 1, "max_hold": "1m"}}, "is invalid"),
        ({"a\x00": {"capacity": 1, "max_hold": "1m"}}, "is invalid"),
        ({"ok": {"capacity": 10**100, "max_hold": "1m"}}, "limit 'ok': capacity must be"),
        ({"ok": {"capacity": float("nan"), "max_hold": "1m"}}, "limit 'ok': capacity must be"),
        ({"ok": {"capacity": "5", "max_hold": "1m"}}, "limit 'ok': capacity must be"),
        ({"ok": {"capacity": 5, "max_hold": "٣m"}}, "limit 'ok': max_hold"),
        ({"ok": {"capacity": 5, "max_hold": 10**400}}, "limit 'ok': max_hold must be at most 30 days"),
        ({"ok": {"capacity": 5, "max_hold": float("inf")}}, "limit 'ok': max_hold must be"),
        ({"ok": {"capacity": 5, "max_hold": "x" * 100_000}}, "limit 'ok': max_hold"),
        ({"ok": {"capacity": 5}}, "limit 'ok': max_hold is required"),
        ({"ok": {"capacity": 5, "max_hold": "1m", 3: 4}}, "limit 'ok': unknown field 3"),
        ({"ok": None}, "limit 'ok': must be a mapping"),
        ({"ok": ["capacity", 5]}, "limit 'ok': must be a mapping"),
        ({None: {}}, "limit name None is invalid"),
    ],
)
def test_nasty_configs_get_a_message_naming_the_limit_and_field(config: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        define_workspace(limits=config)


@pytest.mark.parametrize("limits", [None, [], "voice-calls", 5, [("a", {})]])
def test_a_config_that_is_not_a_mapping_is_refused(limits: object) -> None:
    with pytest.raises(ConfigError, match="limits must be a mapping"):
        define_workspace(limits=limits)  # type: ignore[arg-type]  # deliberately not a mapping
