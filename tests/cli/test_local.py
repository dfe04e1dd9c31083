"""SPEC 7.1 and issue 5: every verb of `stackbone limits` on the local installation, with its
output, its --json keys and its exit codes (0 done; 1 not found or nothing released; 2 bad usage
or value)."""

from __future__ import annotations

import getpass
import json

import pytest

from limits.models import AuditEvent, Limit, Slot
from limits.services import set_capacity
from tests.cli.conftest import Terminal, run_cli
from tests.factories import assert_counters_match_rows, holders, queue

pytestmark = pytest.mark.django_db

ACTOR = f"cli:{getpass.getuser()}"
LIST_KEYS = {
    "name",
    "capacity",
    "declared_capacity",
    "max_hold_ms",
    "declared_max_hold_ms",
    "busy",
    "reserved",
    "waiting",
    "capacity_overridden",
    "max_hold_overridden",
    "declared",
}


# --- list ---------------------------------------------------------------------------------------


def test_list_prints_a_row_per_limit_in_aligned_columns(calls) -> None:
    result = run_cli("list")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["NAME", "IN", "USE/CAPACITY", "WAITING", "MAX", "HOLD", "NOTES"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["voice-calls"].split()[1:4] == ["2/2", "2", "45m"]
    assert rows["partner-api"].split()[1:4] == ["0/5", "0", "10m"]
    column = lines[0].index("WAITING")
    assert all(line[column - 2 : column] == "  " for line in lines[1:])


def test_list_marks_overridden_values_and_undeclared_limits(calls) -> None:
    set_capacity("voice-calls", 3, actor="test")
    Limit.objects.filter(name="partner-api").update(declared=False, max_hold_override_ms=60_000)
    result = run_cli("list")
    rows = {line.split()[0]: line for line in result.out.splitlines()[1:]}
    assert rows["voice-calls"].split()[1] == "3/3*"
    assert rows["partner-api"].split()[3] == "1m*"
    assert rows["partner-api"].endswith("undeclared")
    assert result.out.splitlines()[-1].startswith("* overridden")


def test_list_json_has_the_fixed_keys(calls) -> None:
    result = run_cli("list", "--json")
    assert result.code == 0
    limits = {limit["name"]: limit for limit in json.loads(result.out)}
    assert set(limits["voice-calls"]) >= LIST_KEYS
    assert {k: limits["voice-calls"][k] for k in ("capacity", "busy", "reserved", "waiting", "max_hold_ms")} == {
        "capacity": 2,
        "busy": 2,
        "reserved": 0,
        "waiting": 2,
        "max_hold_ms": 45 * 60_000,
    }


def test_busy_is_the_confirmed_slots_reserved_the_unconfirmed_and_in_use_both(calls) -> None:
    """SPEC 6.5, one meaning on every surface: the JSON's busy no longer counts reserved slots."""
    run_cli("release", calls[0], "--yes")  # r3 gets a reservation
    voice = next(limit for limit in json.loads(run_cli("list", "--json").out) if limit["name"] == "voice-calls")
    assert (voice["busy"], voice["reserved"], voice["in_use"], voice["waiting"]) == (1, 1, 2, 1)
    row = next(line for line in run_cli("list").out.splitlines() if line.startswith("voice-calls"))
    assert row.split()[1:3] == ["2/2", "1"] and row.endswith("1 reserved")
    header = run_cli("slots", "voice-calls").out.splitlines()[0]
    assert header == "voice-calls: 2/2 in use (1 reserved), 1 waiting, max hold 45m"


# --- slots --------------------------------------------------------------------------------------


def test_slots_shows_busy_slots_then_the_queue_with_times(clock, calls) -> None:
    clock.advance(seconds=50)
    result = run_cli("slots", "voice-calls")
    assert result.code == 0, result.err
    text = result.out
    assert text.splitlines()[0] == "voice-calls: 2/2 in use, 2 waiting, max hold 45m"
    slot_lines = [line for line in text.splitlines() if line.startswith("slot_")]
    assert sorted(line.split()[2] for line in slot_lines) == ["r1", "r2"]  # granted at the same frozen instant
    assert all(line.endswith("50s ago  44m 10s") for line in slot_lines)
    queue_header = next(line for line in text.splitlines() if line.startswith("POSITION"))
    queue_lines = text.splitlines()[text.splitlines().index(queue_header) + 1 :]
    assert [line.split()[:3] for line in queue_lines] == [["1", "r3", "call-3"], ["2", "r4", "call-4"]]
    assert queue_lines[0].endswith("50s ago        59m 10s      the limit is full")  # WHY (SPEC 6.5)
    queue = json.loads(run_cli("slots", "voice-calls", "--json").out)["queue"]
    assert [entry["reason"] for entry in queue] == [
        {"code": "limit_full", "text": "the limit is full", "limit": "voice-calls"}
    ] * 2


def test_slots_json_lists_slots_busy_first_then_the_queue_in_order(calls) -> None:
    run_cli("release", calls[0], "--yes")  # r3 reserved, r4 waits
    result = run_cli("slots", "voice-calls", "--json")
    payload = json.loads(result.out)
    assert payload["limit"] == "voice-calls"
    assert [(slot["run"], slot["state"]) for slot in payload["slots"]] == [("r2", "busy"), ("r3", "reserved")]
    assert set(payload["slots"][0]) >= {"id", "state", "run", "label", "granted_at", "expires_at"}
    assert payload["queue"] == [
        {
            "position": 1,
            "position_estimated": False,  # first come, first served: every place is exact
            "run": "r4",
            "label": "call-4",
            "key": None,
            "group_size": 1,
            "group": None,
            "waiting_since": payload["queue"][0]["waiting_since"],
            "deadline": payload["queue"][0]["deadline"],
            "eta_seconds": None,  # nothing granted in the last 10 minutes
            "reason": {"code": "limit_full", "text": "the limit is full", "limit": "voice-calls"},
        }
    ]
    assert payload["queue"][0]["deadline"].endswith("+00:00")


def test_slots_limit_cuts_long_lists_and_says_how_many_more(calls) -> None:
    result = run_cli("slots", "voice-calls", "--limit", "1")
    assert result.code == 0
    assert len([line for line in result.out.splitlines() if line.startswith("slot_")]) == 1
    assert "… and 1 more slot" in result.out.splitlines()
    assert "… and 1 more waiting" in result.out.splitlines()
    payload = json.loads(run_cli("slots", "voice-calls", "--limit", "1", "--json").out)
    assert (len(payload["slots"]), len(payload["queue"]), payload["more_slots"], payload["more_queue"]) == (1, 1, 1, 1)


def test_rows_is_the_unambiguous_name_of_the_cut_and_limit_still_works(calls) -> None:
    """`--limit` counts rows here but names a limit in `runs list`: `--rows N` says it, and the
    old `--limit N` keeps working (issue 30)."""
    for verb in ("slots", "keys"):
        as_rows, as_limit = run_cli(verb, "voice-calls", "--rows", "1"), run_cli(verb, "voice-calls", "--limit", "1")
        assert (as_rows.code, as_rows.err) == (0, ""), as_rows.err
        assert as_rows.out == as_limit.out
    assert "… and 1 more slot" in run_cli("slots", "voice-calls", "--rows", "1").out.splitlines()


def test_slots_of_an_empty_limit_says_so(calls) -> None:
    result = run_cli("slots", "partner-api")
    assert "no slots in use" in result.out
    assert "no runs waiting" in result.out


def test_slots_of_an_unknown_limit_exits_1(calls) -> None:
    result = run_cli("slots", "nope")
    assert (result.code, result.out, result.err) == (1, "", "error: unknown limit 'nope'\n")


@pytest.mark.parametrize("cut", ["0", "-1", "x"])
def test_slots_with_a_bad_cut_exits_2(calls, cut, capsys) -> None:
    assert run_cli("slots", "voice-calls", "--limit", cut).code == 2
    assert "--rows (or --limit) must be a whole number of at least 1" in capsys.readouterr().err


# --- release ------------------------------------------------------------------------------------


def test_release_with_yes_releases_and_records_the_os_user(calls) -> None:
    result = run_cli("release", calls[0], "--yes")
    assert result.code == 0, result.err
    assert result.out == f"released {calls[0]} of voice-calls (was busy, run r1)\n"
    assert holders("voice-calls") == [("r2", "busy"), ("r3", "reserved")]
    event = AuditEvent.objects.get(action="release")
    assert (event.actor, event.slot_id, event.old_value, event.new_value) == (ACTOR, calls[0], "busy", "released")
    assert_counters_match_rows("voice-calls")


def test_release_of_a_free_slot_exits_1_and_changes_nothing(calls) -> None:
    run_cli("release", calls[0], "--yes")
    before = list(Slot.objects.order_by("id").values())
    result = run_cli("release", calls[0], "--yes")
    assert (result.code, result.out) == (1, "")
    assert result.err == f"error: {calls[0]} was already free (released): nothing released\n"
    assert list(Slot.objects.order_by("id").values()) == before


def test_release_json_says_whether_it_released(calls) -> None:
    first = run_cli("release", calls[0], "--yes", "--json")
    again = run_cli("release", calls[0], "--yes", "--json")
    unknown = run_cli("release", "slot_nope", "--yes", "--json")
    assert (first.code, json.loads(first.out)) == (0, {"released": True})
    assert (again.code, json.loads(again.out)) == (
        1,
        {"released": False, "reason": "already free", "state": "released"},
    )
    assert (unknown.code, json.loads(unknown.out)) == (1, {"released": False, "reason": "unknown"})
    # The error is JSON on stderr too, naming the field as the API does.
    assert json.loads(again.err) == {
        "error": f"{calls[0]} was already free (released): nothing released",
        "field": "slot_id",
    }
    assert json.loads(unknown.err) == {"error": "unknown slot 'slot_nope'", "field": "slot_id"}


def test_release_of_an_unknown_slot_exits_1(calls) -> None:
    result = run_cli("release", "slot_nope", "--yes")
    assert (result.code, result.err) == (1, "error: unknown slot 'slot_nope'\n")


def test_release_without_yes_and_no_terminal_refuses_with_exit_2(calls) -> None:
    result = run_cli("release", calls[0])
    assert result.code == 2
    assert "without --yes" in result.err and "no terminal" in result.err
    assert holders("voice-calls") == [("r1", "busy"), ("r2", "busy")]


def test_release_without_yes_asks_on_a_terminal(calls) -> None:
    result = run_cli("release", calls[0], stdin=Terminal("y\n"))
    assert result.code == 0, result.err
    assert result.err.startswith(f"Release {calls[0]} of voice-calls (busy, run r1, label call-1)? [y/N] ")
    assert Slot.objects.get(id=calls[0]).state == "released"


@pytest.mark.parametrize("answer", ["\n", "n\n", "no\n", ""])
def test_release_not_confirmed_on_the_terminal_changes_nothing(calls, answer) -> None:
    result = run_cli("release", calls[0], stdin=Terminal(answer))
    assert result.code == 1
    assert result.err.endswith("error: release: not confirmed; nothing released\n")
    assert Slot.objects.get(id=calls[0]).state == "busy"


# --- capacity -----------------------------------------------------------------------------------


def test_capacity_prints_old_and_new_and_grants_waiting_runs(calls) -> None:
    result = run_cli("capacity", "voice-calls", "3")
    assert (result.code, result.out) == (0, "voice-calls capacity: 2 → 3\n")
    assert holders("voice-calls")[-1] == ("r3", "reserved")
    assert queue("voice-calls") == ["r4"]
    event = AuditEvent.objects.get(action="capacity")
    assert (event.actor, event.old_value, event.new_value) == (ACTOR, "2", "3")


def test_capacity_reset_prints_the_declared_value(calls) -> None:
    run_cli("capacity", "voice-calls", "7")
    result = run_cli("capacity", "voice-calls", "reset")
    assert (result.code, result.out) == (0, "voice-calls capacity: 7 → 2 (declared)\n")
    assert Limit.objects.get(name="voice-calls").capacity_override is None


def test_capacity_json_prints_the_limit_as_in_list(calls) -> None:
    payload = json.loads(run_cli("capacity", "voice-calls", "9", "--json").out)
    assert set(payload) >= LIST_KEYS
    assert (payload["capacity"], payload["declared_capacity"], payload["capacity_overridden"]) == (9, 2, True)


@pytest.mark.parametrize("value", ["0", "100001", "-3", "abc", "2.5", ""])
def test_capacity_with_a_bad_value_exits_2_naming_the_range(calls, value) -> None:
    result = run_cli("capacity", "voice-calls", value)
    assert result.code == 2
    assert result.err.startswith("error: capacity must be a whole number from 1 to 100000")
    assert result.err.count("\n") == 1
    assert Limit.objects.get(name="voice-calls").capacity_override is None
    assert not AuditEvent.objects.filter(action="capacity").exists()


def test_capacity_of_an_unknown_limit_exits_1(calls) -> None:
    result = run_cli("capacity", "nope", "3")
    assert (result.code, result.err) == (1, "error: unknown limit 'nope'\n")


# --- max-hold -----------------------------------------------------------------------------------


def test_max_hold_prints_old_and_new_durations(calls) -> None:
    result = run_cli("max-hold", "voice-calls", "2h")
    assert (result.code, result.out) == (0, "voice-calls max hold: 45m → 2h\n")
    event = AuditEvent.objects.get(action="max_hold")
    assert (event.actor, event.old_value, event.new_value) == (ACTOR, str(45 * 60_000), str(2 * 3_600_000))


def test_max_hold_resets_to_the_declared_value(calls) -> None:
    assert run_cli("max-hold", "voice-calls", "2650s").out == "voice-calls max hold: 45m → 44m 10s\n"
    result = run_cli("max-hold", "voice-calls", "reset")
    assert (result.code, result.out) == (0, "voice-calls max hold: 44m 10s → 45m (declared)\n")
    assert Limit.objects.get(name="voice-calls").max_hold_override_ms is None


@pytest.mark.parametrize(("value", "number"), [("45", "45"), ("2650000", "2650000"), (" 45 ", "45"), ("+45", "45")])
def test_max_hold_refuses_a_bare_number_naming_the_units(calls, value: str, number: str) -> None:
    """Issue 15, item 3: '45' meant 45 ms by surprise, and the next sweep took 15 slots back."""
    result = run_cli("max-hold", "voice-calls", value)
    assert (result.code, result.out) == (2, "")
    assert result.err == f"error: max hold '{value.strip()}' needs a unit: {number}s, {number}m, {number}h\n"
    assert Limit.objects.get(name="voice-calls").max_hold_override_ms is None
    assert not AuditEvent.objects.filter(action="max_hold").exists()


def test_a_negative_max_hold_is_a_value_not_an_option(calls) -> None:
    """Issue 15, item 14: `max-hold voice-calls -5s` was read as an unknown option."""
    for argv in (("max-hold", "voice-calls", "-5s"), ("max-hold", "voice-calls", "--", "-5s")):
        result = run_cli(*argv)
        assert result.code == 2
        assert result.err.startswith("error: max hold must be more than 0, not '-5s'"), result.err
    capacity = run_cli("capacity", "voice-calls", "-1")
    assert capacity.err == "error: capacity must be a whole number from 1 to 100000, not -1\n"
    per_key = run_cli("per-key", "voice-calls", "-2x")
    assert (per_key.code, per_key.err.startswith("error: per_key must be")) == (2, True), per_key.err
    assert Limit.objects.get(name="voice-calls").max_hold_override_ms is None


@pytest.mark.parametrize(
    ("argv", "code", "error", "field"),
    [
        (("list", "--kind", "nope"), 2, "--kind must be 'limit', 'workflow' or 'box', not 'nope'", "kind"),
        (("slots", "nope"), 1, "unknown limit 'nope'", "limit"),
        (("slots", "voice-calls", "--key", "a\x01"), 2, "key must not contain control characters", "key"),
        (("keys", "nope"), 1, "unknown limit 'nope'", "limit"),
        (("keys", "voice-calls", "--search", "x" * 129), 2, None, "search"),
        (("release", "slot_nope", "--yes"), 1, "unknown slot 'slot_nope'", "slot_id"),
        (("capacity", "voice-calls", "0"), 2, "capacity must be a whole number from 1 to 100000, not 0", "capacity"),
        (("capacity", "nope", "3"), 1, "unknown limit 'nope'", "limit"),
        (("max-hold", "voice-calls", "45"), 2, "max hold '45' needs a unit: 45s, 45m, 45h", "max_hold"),
        (("per-key", "voice-calls", "0"), 2, None, "per_key"),
        (("slots", "voice-calls", "--agent", " "), 2, None, "agent"),
    ],
)
def test_with_json_every_verbs_error_is_one_json_line_on_stderr(
    calls, argv: tuple[str, ...], code: int, error: str | None, field: str
) -> None:
    """Issue 15, item 14: not only release's. stdout stays empty (release's own answer aside)."""
    result = run_cli(*argv, "--json")
    assert result.code == code
    assert result.out == ("" if argv[0] != "release" else '{\n  "released": false,\n  "reason": "unknown"\n}\n')
    assert result.err.count("\n") == 1
    payload = json.loads(result.err)
    assert set(payload) == {"error", "field"} and payload["field"] == field
    assert payload["error"] == error if error is not None else payload["error"]
    plain = run_cli(*argv)  # without --json: the one `error:` line, as before
    assert plain.err.startswith("error: ") and plain.code == code


def test_with_json_argparses_own_errors_of_a_verb_are_json_too(calls, capsys) -> None:
    result = run_cli("slots", "voice-calls", "--limit", "0", "--json")
    assert result.code == 2
    assert json.loads(capsys.readouterr().err) == {
        "error": "stackbone limits slots: argument --rows/--limit: --rows (or --limit) must be a whole number "
        "of at least 1, not '0'",
        "field": None,
    }
    assert run_cli("slots", "voice-calls", "--limit", "0").code == 2  # without --json: usage text
    assert "usage: stackbone limits slots" in capsys.readouterr().err


def test_max_hold_json_prints_the_limit_as_in_list(calls) -> None:
    payload = json.loads(run_cli("max-hold", "voice-calls", "90s", "--json").out)
    assert set(payload) >= LIST_KEYS
    assert (payload["max_hold_ms"], payload["max_hold_overridden"]) == (90_000, True)


@pytest.mark.parametrize("value", ["31d", "0", "0s", "abc", "-5", "45 minutes"])
def test_max_hold_with_a_bad_value_exits_2_naming_the_range(calls, value) -> None:
    result = run_cli("max-hold", "voice-calls", value)
    assert result.code == 2
    assert result.err.startswith("error: max hold ")
    assert "at most 30 days" in result.err
    assert Limit.objects.get(name="voice-calls").max_hold_override_ms is None


def test_max_hold_of_an_unknown_limit_exits_1(calls) -> None:
    assert run_cli("max-hold", "nope", "1h").code == 1


# --- usage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv", [[], ["bogus"], ["slots"], ["release"], ["capacity", "voice-calls"], ["list", "--wat"]]
)
def test_bad_usage_exits_2(calls, argv) -> None:
    assert run_cli(*argv).code == 2


@pytest.mark.parametrize("verb", ["capacity", "max-hold"])
def test_an_empty_value_after_a_double_dash_is_a_bad_value_not_a_traceback(calls, verb) -> None:
    """Found by the fuzz test: Python 3.13.0's argparse passes `[]` for `'' -- --`."""
    result = run_cli(verb, "calls", "--", "--")
    assert result.code in (1, 2)
    assert result.err.startswith("error:") and "Traceback" not in result.err
    assert not AuditEvent.objects.filter(action__in=["capacity", "max_hold"]).exists()
