"""Shared pieces of the fuzz tests: Hypothesis settings, tables of nasty values, and a snapshot of
every row an operator action could write, to prove a refused input wrote nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from limits import services
from limits.models import AuditEvent, Limit, LimitKey, QueueEntry, Slot
from tests.factories import declare
from tests.views.conftest import busy_limit, fast_password_hashing, htmx, make_user  # noqa: F401 (fixtures)

# Bounded in the normal suite; STACKBONE_HYPOTHESIS_EXAMPLES=2000 for a long run.
EXAMPLES = int(os.environ.get("STACKBONE_HYPOTHESIS_EXAMPLES", "60"))

fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)

# Strings that have broken parsers, databases and templates somewhere.
NASTY_TEXT: list[str] = [
    "",
    " ",
    "\t\n",
    "0",
    "-1",
    "+5",
    "1e3",
    "1.5",
    "0x10",
    "１０",  # fullwidth digits
    "٣",  # Arabic-Indic three
    "²",
    "NaN",
    "inf",
    "-0",
    "9" * 25,
    "null",
    "true",
    "None",
    "[]",
    "{}",
    "reset ",
    "RESET",
    "45m ",
    "45 m",
    "45M",
    "1h30m",
    "30d1ms",
    "-5m",
    "0ms",
    "31d",
    "2592000001",
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "{{ 7*7 }}",
    "{% debug %}",
    "'; DROP TABLE limits_limit; --",
    "' OR '1'='1",
    "%00",
    "%s%s%s%n",
    "../../etc/passwd",
    "voice-calls\n",
    "VOICE-CALLS",
    "voice calls",
    "🙂",
    "\u202eevil",  # right-to-left override
    "\u200b",  # zero-width space
    "e\u0301",
    "\ufeff5",
    "slot_",
    "slot_" + "A" * 35,
    "slot_" + "A" * 36,
    "slot_<b>",
]

# Only what a command line can carry: no NUL, but lone surrogates (a non-UTF-8 argument).
NASTY_ARGV = [*NASTY_TEXT, "\udcff", "a\udcffb", "\udcc3\udca9"]
# Only what PostgreSQL refuses to store: for engine calls, never through HTTP (the middleware).
NASTY_ENGINE = [*NASTY_ARGV, "\x00", "a\x00b", "\ud800"]

# Very long values, built when drawn (a sampled_from of them would make every report huge).
long_text = st.builds(
    lambda char, size: char * size,
    st.sampled_from(["x", "9", "<", "'", "é", "🙂"]),
    st.sampled_from([65, 201, 5_000, 100_000]),
)
text = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=80), st.text(max_size=3000), long_text)
argv_text = st.one_of(st.sampled_from(NASTY_ARGV), st.text(alphabet=st.characters(exclude_characters="\x00")))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def snapshot() -> tuple[list[Mapping[str, Any]], ...]:
    """Every row of the tables an operator action writes, in a fixed order."""
    return (
        list(Limit.objects.order_by("id").values()),
        list(LimitKey.objects.order_by("id").values()),
        list(Slot.objects.order_by("id").values()),
        list(QueueEntry.objects.order_by("id").values()),
        list(AuditEvent.objects.order_by("id").values()),
    )


@pytest.fixture
def calls(db: None) -> list[str]:
    """voice-calls (capacity 2, max hold 45m): r1 and r2 hold busy slots, r3 and r4 wait; and
    partner-api, idle. Returns the two busy slot ids."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"}, partner_api={"capacity": 5, "max_hold": "10m"})
    slots = [services.acquire("voice-calls", run_id=f"r{n}", label=f"call-{n}").slot_id for n in (1, 2)]
    for n in (3, 4):
        services.acquire("voice-calls", run_id=f"r{n}", label=f"call-{n}", timeout="1h")
    return [slot for slot in slots if slot]
