"""Issue 11: what the CLI prints cannot drive the terminal. Labels, ids, names and messages are
user-supplied; control characters (ESC, BEL, a newline that forges a table row) and
bidirectional overrides are shown as escapes in every human-readable output. And two bad inputs
that used to do the wrong thing quietly: an empty `--agent`, and a token name too long to store."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from limits import cli
from limits.models import ApiToken, AuditEvent, Limit
from limits.printable import printable
from limits.services import acquire
from limits.tokens import BAD_NAME
from tests.cli.conftest import Terminal, run_cli

pytestmark = pytest.mark.django_db

FORGED_ROW = "x\nslot_FAKE         busy  run_FAKE"
HOSTILE_LABELS = ["\x1b[31mred\x1b[0m\x07", FORGED_ROW, "abc\u202eevil", "a\u2066b\u2069\u200e\u200f", "\x9b2J"]
# What must never reach a terminal from a value: C0/C1 controls (but the newline that ends each
# line of ours), DEL, and the bidirectional formatting characters.
ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("bell\x07", "bell\\x07"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
        ("abc\u202eevil", "abc\\u202eevil"),
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("\u2028\u2029", "\\u2028\\u2029"),
        ("call-1 · é 🙂 東京 \\x1b", "call-1 · é 🙂 東京 \\x1b"),  # printable text stays as it is
    ],
)
def test_printable_escapes_control_and_bidi_characters_only(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_printable_lines_keeps_newlines_and_tabs() -> None:
    assert printable("a\n\tb\x1b\r\u202e", lines=True) == "a\n\tb\\x1b\\r\\u202e"


@pytest.fixture
def hostile(calls) -> list[str]:
    """partner-api (capacity 5) with a busy slot per hostile label, and voice-calls' queue with
    one more waiting run labelled with each."""
    slots = [acquire("partner-api", run_id=f"h{n}", label=label).slot_id for n, label in enumerate(HOSTILE_LABELS)]
    for n, label in enumerate(HOSTILE_LABELS):
        acquire("voice-calls", run_id=f"w{n}", label=label, timeout="1h")
    return [slot for slot in slots if slot]


def _assert_inert(text: str) -> None:
    assert not ACTIVE.search(text), repr(text)


def test_slots_shows_hostile_labels_escaped_and_forges_no_row(hostile) -> None:
    for limit in ("partner-api", "voice-calls"):
        result = run_cli("slots", limit)
        assert result.code == 0, result.err
        _assert_inert(result.out)
        assert not any(line.startswith("slot_FAKE") for line in result.out.splitlines())
        assert "\\x1b[31mred\\x1b[0m\\x07" in result.out
        assert "abc\\u202eevil" in result.out
        assert "x\\nslot_FAKE" in result.out
    rows = [line for line in run_cli("slots", "partner-api").out.splitlines() if line.startswith("slot_")]
    assert len(rows) == len(HOSTILE_LABELS)  # one row per slot, whatever its label holds


def test_slots_json_keeps_the_values_exact(hostile) -> None:
    payload = json.loads(run_cli("slots", "partner-api", "--json").out)
    assert sorted(slot["label"] for slot in payload["slots"]) == sorted(HOSTILE_LABELS)


def test_the_release_prompt_shows_a_hostile_label_escaped(hostile) -> None:
    slot = hostile[HOSTILE_LABELS.index(FORGED_ROW)]
    result = run_cli("release", slot, stdin=Terminal("n\n"))
    assert result.code == 1
    prompt, _, rest = result.err.partition("[y/N] ")
    assert prompt == f"Release {slot} of partner-api (busy, run h1, label x\\nslot_FAKE         busy  run_FAKE)? "
    _assert_inert(prompt + rest.rstrip("\n"))


def test_release_messages_show_hostile_run_ids_escaped(calls) -> None:
    slot = acquire("partner-api", run_id="run\u202e\x1b]0;owned\x07", label="\x1b[5m").slot_id
    result = run_cli("release", str(slot), "--yes")
    assert result.code == 0, result.err
    assert result.out == f"released {slot} of partner-api (was busy, run run\\u202e\\x1b]0;owned\\x07)\n"


def test_values_from_another_installation_are_shown_escaped() -> None:
    """Limit names, counts and messages read from an agent are whatever its API answered."""
    limit = {
        "name": "evil\x1b[2J\u202e",
        "busy": "1\n2",
        "capacity": 3,
        "waiting": 0,
        "reserved": 0,
        "declared": True,
        "max_hold_ms": 60_000,
        "capacity_overridden": False,
        "max_hold_overridden": False,
    }
    out = io.StringIO()
    cli.render_limits(cli.Streams(stdout=out), [limit])
    _assert_inert(out.getvalue().replace("\n", ""))
    assert len(out.getvalue().splitlines()) == 2  # the header and one row
    assert "evil\\x1b[2J\\u202e" in out.getvalue()


def test_an_error_naming_a_hostile_value_is_one_escaped_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(cli.AGENTS_FILE_ENV, str(tmp_path / "none.toml"))
    result = run_cli("list", "--agent", "evil\x1b]0;owned\x07\nerror: forged")
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert result.err.startswith("error: --agent evil\\x1b]0;owned\\x07\\nerror: forged")
    _assert_inert(result.err.rstrip("\n"))


# --- an empty --agent ------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["", " ", "\t"])
def test_an_empty_agent_is_an_error_not_this_installation(calls, agent: str) -> None:
    """`--agent "$TARGET"` with TARGET unset must not change the local box."""
    events = AuditEvent.objects.count()
    result = run_cli("capacity", "voice-calls", "4", "--agent", agent)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"error: {cli.EMPTY_AGENT}\n"
    assert (Limit.objects.get(name="voice-calls").capacity, AuditEvent.objects.count()) == (2, events)


def test_an_empty_agent_through_manage_py_is_an_error(calls) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("limits", "list", "--agent", "", stdout=io.StringIO(), stderr=io.StringIO())
    assert caught.value.returncode == 2
    assert str(caught.value) == cli.EMPTY_AGENT


# --- token names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x" * 101, "é" * 5_000, "a\x00b"])
def test_a_token_name_the_column_cannot_hold_is_refused_and_nothing_is_written(db, name: str) -> None:
    User.objects.create_user("ops")
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("limits", "token", "create", "ops", "--name", name, stdout=out, stderr=io.StringIO())
    assert caught.value.returncode == 2
    assert str(caught.value) == BAD_NAME
    assert (out.getvalue(), ApiToken.objects.count()) == ("", 0)


def test_a_token_name_of_100_characters_is_fine(db) -> None:
    User.objects.create_user("ops")
    call_command("limits", "token", "create", "ops", "--name", "x" * 100, stdout=io.StringIO())
    assert ApiToken.objects.get().name == "x" * 100
