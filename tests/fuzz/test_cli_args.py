"""Every verb of `stackbone limits` fed nasty arguments, in-process (limits.cli.main) and as a real
process: exit code 1 or 2 with one `error:` line (never a traceback), and nothing written."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from limits import cli
from tests.fuzz.conftest import NASTY_ARGV, argv_text, fuzz, snapshot

pytestmark = pytest.mark.django_db

STACKBONE = Path(sys.executable).parent / "stackbone"
VERBS = [
    "list", "show", "slots", "keys", "release", "capacity", "max-hold", "per-key", "on-full", "max-waiting", "pause",
    "resume", "forget",
]  # fmt: skip
WRITES = {"release", "capacity", "max-hold", "per-key", "on-full", "max-waiting", "pause", "resume", "forget"}
READS = ("list", "show", "slots", "keys")


def run(argv: list[str]) -> tuple[int, str, str]:
    """Exit code, stdout, stderr (argparse's usage errors included: it writes to sys.stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(argv, streams=cli.Streams(stdin=io.StringIO(), stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def assert_clean_failure(code: int, err: str) -> None:
    assert code in (1, 2), code
    assert "Traceback" not in err
    lines = err.split("\n")  # not splitlines(): an argument may hold \x1e or \x85
    assert any(line.startswith(("error: ", "stackbone limits")) or json_error(line) for line in lines), err[-500:]


def json_error(line: str) -> bool:
    """With --json, an error is one line of JSON: {"error": ..., "field": ...}."""
    try:
        payload = json.loads(line)
    except ValueError:
        return False
    return isinstance(payload, dict) and set(payload) == {"error", "field"} and bool(payload["error"])


@fuzz
@given(
    verb=st.sampled_from(VERBS),
    args=st.lists(argv_text, max_size=3),
    flags=st.lists(
        st.sampled_from(["--json", "--yes", "--limit", "--agent", "-y", "--", "-x", "--key", "--search"]), max_size=2
    ),
)
@example(verb="capacity", args=["voice-calls", "٣"], flags=[])  # found by this test: non-ASCII digits were a capacity
@example(verb="max-hold", args=["voice-calls", "٣m"], flags=[])
@example(verb="slots", args=["\udcff"], flags=[])  # found by this test: a non-UTF-8 argument was a traceback
@example(verb="release", args=["a\udcffb"], flags=["--yes"])
@example(verb="capacity", args=["'; DROP TABLE limits_limit; --", "3"], flags=[])
@example(verb="capacity", args=["voice-calls", "-5"], flags=[])
@example(verb="capacity", args=["voice-calls", "99999999999999999999"], flags=[])
@example(verb="max-hold", args=["voice-calls", "9" * 5000], flags=[])
@example(verb="slots", args=["voice-calls"], flags=["--limit"])
def test_no_argument_is_a_traceback_and_a_refusal_writes_nothing(
    calls, verb: str, args: list[str], flags: list[str]
) -> None:
    before = snapshot()
    code, _out, err = run([verb, *args, *flags])
    if code == 0:
        # Only a well-formed command on a real limit can succeed; reads never write.
        assert verb in READS or args[0] in ("voice-calls", "partner-api"), (verb, args)
        if verb in READS:
            assert snapshot() == before
        return
    assert_clean_failure(code, err)
    assert snapshot() == before


@pytest.mark.parametrize("value", [v for v in NASTY_ARGV if v.strip().lower() != "reset"])
@pytest.mark.parametrize("verb", ["capacity", "max-hold", "on-full", "max-waiting"])
def test_a_nasty_value_is_exit_2_naming_the_field(calls, verb: str, value: str) -> None:
    if verb == "max-hold" and value in ("45m ",):
        pytest.skip("a valid max hold")
    if verb in ("capacity", "max-waiting") and value in ("+5",):
        pytest.skip("a valid capacity or cap")
    before = snapshot()
    code, _out, err = run([verb, "voice-calls", "--", value])
    if verb == "max-hold" and code == 0:
        pytest.fail(f"max hold {value!r} accepted")
    assert code == 2, (value, err)
    named = {"capacity": "capacity", "max-hold": "max hold", "on-full": "on_full", "max-waiting": "max_waiting"}
    assert err.startswith(f"error: {named[verb]}") or (verb == "max-hold" and "max hold" in err), err
    assert snapshot() == before


@pytest.mark.parametrize("name", NASTY_ARGV)
@pytest.mark.parametrize(
    "verb",
    ["show", "slots", "keys", "capacity", "max-hold", "per-key", "on-full", "max-waiting", "pause", "resume", "forget"],
)
def test_an_unknown_limit_is_exit_1(calls, verb: str, name: str) -> None:
    if name.startswith("-") or not name:
        pytest.skip("argparse reads it as an option, or it is empty")
    before = snapshot()
    values = {"capacity": "3", "max-hold": "1m", "per-key": "1", "on-full": "skip", "max-waiting": "5"}
    args = [name, values[verb]] if verb in values else [name]
    if verb == "forget":
        args.append("--yes")  # it asks before it looks the limit up
    code, _out, err = run([verb, *args])
    assert code == 1, (name, err)
    assert err.startswith("error: unknown limit")
    assert snapshot() == before


@pytest.mark.parametrize("slot_id", [s for s in NASTY_ARGV if s and not s.startswith("-")])
def test_releasing_a_nasty_slot_id_is_exit_1_and_releases_nothing(calls, slot_id: str) -> None:
    before = snapshot()
    code, _out, err = run(["release", slot_id, "--yes"])
    assert code == 1 and err.startswith("error: unknown slot"), err
    assert snapshot() == before


@pytest.mark.parametrize("argv", [["slots", "a\x00b"], ["release", "slot_\x00", "--yes"], ["capacity", "a\x00", "3"]])
def test_a_nul_in_an_argument_is_not_found_not_a_database_error(calls, argv: list[str]) -> None:
    """Found by fuzzing on PostgreSQL: a NUL reached the database ("cannot use the database")."""
    code, _out, err = run(argv)
    assert code == 1 and "unknown" in err and "database" not in err


# --- real processes ------------------------------------------------------------------------------


def stackbone(*argv: str | bytes) -> subprocess.CompletedProcess[bytes]:
    from tests.cli.test_script import database_url_of_the_tests

    return subprocess.run(
        [os.fsencode(STACKBONE), *(a if isinstance(a, bytes) else a.encode() for a in argv)],
        env={**os.environ, "DATABASE_URL": database_url_of_the_tests(), "STACKBONE_TRACEBACK": ""},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "argv, code",
    [
        (["limits", "capacity", "voice-calls", "-5"], 2),
        (["limits", "capacity", "voice-calls", "<script>alert(1)</script>"], 2),
        (["limits", "max-hold", "voice-calls", "31d"], 2),
        (["limits", "max-hold", "voice-calls", "9" * 5000], 2),
        (["limits", "slots", b"\xff\xfe"], 1),  # not UTF-8: a surrogate-escaped argument
        (["limits", "release", b"slot_\xc3", "--yes"], 1),
        (["limits", "capacity", "'; DROP TABLE limits_limit; --", "3"], 1),
        (["limits", "release", "slot_nope"], 2),  # no --yes and no terminal
        (["limits", "slots", "voice-calls", "--limit", "0"], 2),
        (["limits", "frobnicate"], 2),
        (["limits"], 2),
        (["limits", "list", "--agent", "nowhere"], 2),
    ],
)
def test_the_real_script_never_shows_a_traceback(calls, argv: list[str | bytes], code: int, tmp_path) -> None:
    os.environ.setdefault("STACKBONE_AGENTS_FILE", str(tmp_path / "none.toml"))
    before = snapshot()
    result = stackbone(*argv)
    stderr = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode == code, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(("error:", "stackbone")), stderr
    assert snapshot() == before
