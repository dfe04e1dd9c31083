"""SPEC 9.4, 9.5 and 10 in the CLI (issue 13): `keys`, `slots --key`, `per-key`, and the keys
and groups of slots and queue entries, on the local installation, with their --json keys and
exit codes (0 done; 1 unknown limit; 2 a bad value, nothing changed)."""

from __future__ import annotations

import getpass
import io
import json

import pytest
from django.core.management import CommandError, call_command

from limits.models import AuditEvent, Limit, LimitKey, Slot
from limits.services import acquire, acquire_group, release
from tests.cli.conftest import run_cli
from tests.factories import declare, holders

pytestmark = pytest.mark.django_db

ACTOR = f"cli:{getpass.getuser()}"
KEY_ROW_KEYS = {"key", "busy", "reserved", "in_use", "waiting", "pool", "pool_override", "pool_overridden"} | {
    "weight",
    "min",
    "fair_share",
    "pass",
}


def _rows(text: str, header: str) -> list[list[str]]:
    """The rows of the table whose header line starts with `header`, split on whitespace."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1 :]:
        if not line or line.startswith("…"):
            break
        rows.append(line.split())
    return rows


def _nothing_changed() -> None:
    limit = Limit.objects.get(name="voice-calls")
    assert (limit.per_key_override, limit.declared_per_key) == (None, 2)
    assert not LimitKey.objects.filter(pool_override__isnull=False).exists()
    assert not AuditEvent.objects.filter(action="per_key").exists()


# --- list ---------------------------------------------------------------------------------------


def test_list_json_has_the_per_key_in_force_and_whether_it_is_overridden(tenants) -> None:
    limits = {limit["name"]: limit for limit in json.loads(run_cli("list", "--json").out)}
    voice, partner = limits["voice-calls"], limits["partner-api"]
    assert (voice["per_key"], voice["declared_per_key"], voice["per_key_overridden"]) == (2, 2, False)
    assert (partner["per_key"], partner["declared_per_key"], partner["per_key_overridden"]) == (None, None, False)
    run_cli("per-key", "voice-calls", "3")
    voice = next(limit for limit in json.loads(run_cli("list", "--json").out) if limit["name"] == "voice-calls")
    assert (voice["per_key"], voice["declared_per_key"], voice["per_key_overridden"]) == (3, 2, True)


def test_list_notes_the_per_key_and_marks_an_override(tenants) -> None:
    rows = {line.split()[0]: line for line in run_cli("list").out.splitlines()[1:]}
    assert rows["voice-calls"].endswith("per key 2")
    assert "per key" not in rows["partner-api"]
    run_cli("per-key", "voice-calls", "3")
    result = run_cli("list")
    rows = {line.split()[0]: line for line in result.out.splitlines()[1:]}
    assert rows["voice-calls"].endswith("per key 3*")
    assert result.out.splitlines()[-1].startswith("* overridden")


# --- keys ---------------------------------------------------------------------------------------


def test_keys_lists_each_key_busiest_first_and_the_pool_without_a_key(tenants) -> None:
    result = run_cli("keys", "voice-calls")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "voice-calls: 4/4 in use, 2 waiting, per key 2"
    assert lines[2].split() == ["KEY", "IN", "USE", "POOL", "WAITING", "OVERRIDE", "NOTES"]
    assert _rows(result.out, "KEY") == [["acme", "2", "2", "1", "-"], ["globex", "1", "2", "1", "-"]]
    assert lines[-1] == "without a key: 1/2 in use, 0 waiting"


def test_keys_json_has_a_row_per_key_and_no_key_as_null(tenants) -> None:
    result = run_cli("keys", "voice-calls", "--json")
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    assert set(payload) == {"limit", "per_key", "key", "search", "keys", "more_keys", "no_key"}
    assert (payload["limit"], payload["per_key"], payload["key"], payload["more_keys"]) == ("voice-calls", 2, None, 0)
    assert all(set(row) == KEY_ROW_KEYS for row in payload["keys"])
    assert payload["keys"][0] == {
        "key": "acme",
        "busy": 2,
        "reserved": 0,
        "in_use": 2,
        "waiting": 1,
        "pool": 2,
        "pool_override": None,
        "pool_overridden": False,
        "weight": 1,
        "min": 0,
        "fair_share": None,  # a fifo limit (SPEC 13.5)
        "pass": None,  # a fifo limit: no turns (SPEC 13.2)
    }
    assert [row["key"] for row in payload["keys"]] == ["acme", "globex"]
    assert payload["no_key"] == {
        "key": None,
        "busy": 1,
        "reserved": 0,
        "in_use": 1,
        "waiting": 0,
        "pool": 2,
        "pool_override": None,
        "pool_overridden": False,
        "weight": 1,
        "min": 0,
        "fair_share": None,  # a fifo limit (SPEC 13.5)
        "pass": None,  # a fifo limit: no turns (SPEC 13.2)
    }


def test_keys_in_use_counts_busy_and_reserved_slots_and_notes_the_reserved(tenants) -> None:
    """SPEC 6.5: busy is the confirmed slots, reserved the unconfirmed, in use both."""
    release(Slot.objects.get(run_id="r1").id, actor="test")  # r3 of acme is granted: reserved
    payload = json.loads(run_cli("keys", "voice-calls", "--json").out)
    acme = next(row for row in payload["keys"] if row["key"] == "acme")
    assert (acme["busy"], acme["reserved"], acme["in_use"], acme["waiting"]) == (1, 1, 2, 0)
    assert _rows(run_cli("keys", "voice-calls").out, "KEY")[0] == ["acme", "2", "2", "0", "-", "1", "reserved"]


def test_keys_filtered_by_key_shows_that_key_only(tenants) -> None:
    result = run_cli("keys", "voice-calls", "--key", "globex")
    assert result.code == 0, result.err
    assert _rows(result.out, "KEY") == [["globex", "1", "2", "1", "-"]]
    assert "without a key" not in result.out
    payload = json.loads(run_cli("keys", "voice-calls", "--key", "globex", "--json").out)
    assert (payload["key"], [row["key"] for row in payload["keys"]]) == ("globex", ["globex"])


def test_keys_filter_is_exact_and_case_sensitive(tenants) -> None:
    result = run_cli("keys", "voice-calls", "--key", "ACME")
    assert result.code == 0
    assert "no key ACME on voice-calls" in result.out
    assert json.loads(run_cli("keys", "voice-calls", "--key", "acm", "--json").out)["keys"] == []


def test_keys_search_finds_keys_that_contain_the_text_in_any_case(tenants) -> None:
    payload = json.loads(run_cli("keys", "voice-calls", "--search", "LOB", "--json").out)
    assert [row["key"] for row in payload["keys"]] == ["globex"]
    assert "no key of voice-calls contains zzz" in run_cli("keys", "voice-calls", "--search", "zzz").out


def test_keys_limit_cuts_the_list_and_says_how_many_more(tenants) -> None:
    result = run_cli("keys", "voice-calls", "--limit", "1")
    assert _rows(result.out, "KEY") == [["acme", "2", "2", "1", "-"]]
    assert "… and 1 more key" in result.out.splitlines()
    payload = json.loads(run_cli("keys", "voice-calls", "--limit", "1", "--json").out)
    assert (len(payload["keys"]), payload["more_keys"]) == (1, 1)


def test_keys_of_a_limit_without_per_key_show_no_pool_size(tenants) -> None:
    acquire("partner-api", run_id="p1", key="acme")
    result = run_cli("keys", "partner-api")
    assert result.out.splitlines()[0] == "partner-api: 1/5 in use, 0 waiting, no per-key pools (only the total applies)"
    assert _rows(result.out, "KEY") == [["acme", "1", "-", "0", "-"]]
    assert result.out.splitlines()[-1] == "without a key: 0 in use, 0 waiting"
    payload = json.loads(run_cli("keys", "partner-api", "--json").out)
    assert (payload["per_key"], payload["keys"][0]["pool"], payload["no_key"]["pool"]) == (None, None, None)


def test_keys_of_a_limit_nobody_used_with_a_key(tenants) -> None:
    result = run_cli("keys", "partner-api")
    assert (result.code, result.err) == (0, "")
    assert "no keys yet" in result.out


def test_keys_of_an_unknown_limit_exits_1(tenants) -> None:
    result = run_cli("keys", "nope")
    assert (result.code, result.out, result.err) == (1, "", "error: unknown limit 'nope'\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--key", ""), "error: key must be a string of 1 to 128 characters\n"),
        (("--key", "k" * 129), "error: key must be a string of 1 to 128 characters\n"),
        (("--key", "a\x1bb"), "error: key must not contain control characters\n"),
        (("--search", "s" * 129), "error: --search must be text of at most 128 characters (no NUL characters)\n"),
    ],
)
def test_keys_with_a_bad_filter_exits_2_in_one_line(tenants, argv, message) -> None:
    result = run_cli("keys", "voice-calls", *argv)
    assert (result.code, result.out, result.err) == (2, "", message)


def test_keys_shows_hostile_keys_escaped(tenants) -> None:
    acquire("partner-api", run_id="p1", key="x\u202eevil")
    result = run_cli("keys", "partner-api")
    assert "x\\u202eevil" in result.out
    assert "\u202e" not in result.out
    assert json.loads(run_cli("keys", "partner-api", "--json").out)["keys"][0]["key"] == "x\u202eevil"


# --- slots --------------------------------------------------------------------------------------


def test_slots_json_has_the_key_of_every_slot_and_waiting_run_null_for_none(tenants) -> None:
    payload = json.loads(run_cli("slots", "voice-calls", "--json").out)
    assert payload["key"] is None
    assert [(slot["run"], slot["key"]) for slot in payload["slots"]] == [
        ("r1", "acme"),
        ("r2", "acme"),
        ("r4", "globex"),
        ("r5", None),
    ]
    assert [(entry["position"], entry["run"], entry["key"]) for entry in payload["queue"]] == [
        (1, "r3", "acme"),
        (2, "r6", "globex"),
    ]
    assert all((row["group_size"], row["group"]) == (1, None) for row in payload["slots"] + payload["queue"])


def test_slots_shows_a_key_column_when_a_row_has_a_key(tenants) -> None:
    text = run_cli("slots", "voice-calls").out
    assert [row[1:5] for row in _rows(text, "SLOT")] == [
        ["busy", "r1", "call-1", "acme"],
        ["busy", "r2", "call-2", "acme"],
        ["busy", "r4", "call-4", "globex"],
        ["busy", "r5", "call-5", "-"],
    ]
    assert [row[:4] for row in _rows(text, "POSITION")] == [
        ["1", "r3", "call-3", "acme"],
        ["2", "r6", "call-6", "globex"],
    ]


def test_slots_without_keys_print_no_key_column(calls) -> None:
    text = run_cli("slots", "voice-calls").out
    assert "KEY" not in text
    assert "LIMITS" not in text


def test_slots_filtered_by_key_show_only_that_keys_slots_and_queue(tenants) -> None:
    result = run_cli("slots", "voice-calls", "--key", "globex")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[:2] == [
        "voice-calls: 4/4 in use, 2 waiting, max hold 45m, per key 2",
        "key globex: 1/2 in use, 1 waiting",
    ]
    assert [row[2] for row in _rows(result.out, "SLOT")] == ["r4"]
    assert [row[:2] for row in _rows(result.out, "POSITION")] == [["1", "r6"]]  # first in globex's queue
    payload = json.loads(run_cli("slots", "voice-calls", "--key", "globex", "--json").out)
    assert payload["key"] == "globex"
    assert [slot["run"] for slot in payload["slots"]] == ["r4"]
    assert [(entry["position"], entry["run"], entry["key"]) for entry in payload["queue"]] == [(1, "r6", "globex")]


def test_slots_filtered_by_key_cut_and_count_within_the_key(tenants) -> None:
    acquire("voice-calls", run_id="r7", key="acme", timeout="1h")
    payload = json.loads(run_cli("slots", "voice-calls", "--key", "acme", "--limit", "1", "--json").out)
    assert [slot["run"] for slot in payload["slots"]] == ["r1"]
    assert [entry["run"] for entry in payload["queue"]] == ["r3"]
    assert (payload["more_slots"], payload["more_queue"]) == (1, 1)


def test_slots_of_an_unused_key_are_empty(tenants) -> None:
    result = run_cli("slots", "voice-calls", "--key", "initech")
    assert result.code == 0
    assert "key initech: 0/2 in use, 0 waiting" in result.out.splitlines()
    assert "no slots in use" in result.out and "no runs waiting" in result.out


@pytest.mark.parametrize("key", ["", "k" * 129, "new\nline"])
def test_slots_with_a_bad_key_exits_2_in_one_line(tenants, key) -> None:
    result = run_cli("slots", "voice-calls", "--key", key)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: key must ") and result.err.count("\n") == 1


def test_slots_of_an_unknown_limit_with_a_key_exits_1(tenants) -> None:
    assert run_cli("slots", "nope", "--key", "acme").code == 1


# --- several limits per acquisition ---------------------------------------------------------------


def test_slots_and_queue_name_the_limits_of_a_group(tenants) -> None:
    """r7 needs voice-calls (full) and partner-api together: it waits in both, holding neither."""
    declare(
        voice_calls={"capacity": 4, "max_hold": "45m", "per_key": 2},
        partner_api={"capacity": 5, "max_hold": "10m"},
        exports={"capacity": 1, "max_hold": "10m"},
    )
    acquire_group(["voice-calls", "partner-api"], run_id="r7", key="acme", label="both", timeout="1h")
    acquire_group(["partner-api", "exports"], run_id="r8")
    voice = json.loads(run_cli("slots", "voice-calls", "--json").out)
    waiting = next(entry for entry in voice["queue"] if entry["run"] == "r7")
    assert (waiting["group_size"], waiting["group"], waiting["key"]) == (2, ["partner-api", "voice-calls"], "acme")
    partner = json.loads(run_cli("slots", "partner-api", "--json").out)
    assert [(slot["run"], slot["group_size"], slot["group"]) for slot in partner["slots"]] == [
        ("r8", 2, ["exports", "partner-api"])
    ]
    assert [entry["run"] for entry in partner["queue"]] == ["r7"]  # all or nothing: no slot of partner-api yet
    text = run_cli("slots", "partner-api").out
    assert _rows(text, "SLOT")[0][4:7] == ["exports", "+", "partner-api"]  # the LIMITS column
    assert "partner-api + voice-calls" in text


# --- per-key ------------------------------------------------------------------------------------


def test_per_key_overrides_the_limits_per_key_and_records_it(tenants) -> None:
    result = run_cli("per-key", "voice-calls", "3")
    assert (result.code, result.out, result.err) == (0, "voice-calls per key: 2 → 3\n", "")
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.key, event.old_value, event.new_value) == (ACTOR, "", "2", "3")
    assert Limit.objects.get(name="voice-calls").per_key_override == 3


def test_per_key_reset_prints_the_declared_value(tenants) -> None:
    run_cli("per-key", "voice-calls", "1")
    result = run_cli("per-key", "voice-calls", "reset")
    assert (result.code, result.out) == (0, "voice-calls per key: 1 → 2 (declared)\n")
    assert Limit.objects.get(name="voice-calls").per_key_override is None


def test_per_key_on_a_limit_without_one_says_none(tenants) -> None:
    assert run_cli("per-key", "partner-api", "2").out == "partner-api per key: none → 2\n"
    assert run_cli("per-key", "partner-api", "reset").out == "partner-api per key: 2 → none (declared)\n"


def test_per_key_json_prints_the_limit_as_in_list(tenants) -> None:
    payload = json.loads(run_cli("per-key", "voice-calls", "4", "--json").out)
    assert (payload["name"], payload["per_key"], payload["declared_per_key"], payload["per_key_overridden"]) == (
        "voice-calls",
        4,
        2,
        True,
    )


def test_per_key_raised_grants_a_run_held_back_by_its_keys_pool(tenants) -> None:
    """r3 of acme waits only for acme's pool (2 of 2); raise capacity, then acme's pool."""
    run_cli("capacity", "voice-calls", "6")  # r6 of globex is granted; r3 still waits for acme's pool
    assert ("r3", "reserved") not in holders("voice-calls")
    result = run_cli("per-key", "voice-calls", "3", "--key", "acme")
    assert result.out == "voice-calls key acme pool: 2 → 3\n"
    assert ("r3", "reserved") in holders("voice-calls")


def test_per_key_of_one_key_sets_and_resets_its_pool(tenants) -> None:
    result = run_cli("per-key", "voice-calls", "1", "--key", "globex")
    assert (result.code, result.out) == (0, "voice-calls key globex pool: 2 → 1\n")
    event = AuditEvent.objects.get(action="per_key")
    assert (event.actor, event.key) == (ACTOR, "globex")
    assert LimitKey.objects.get(key="globex").pool_override == 1
    assert Limit.objects.get(name="voice-calls").per_key_override is None  # the limit's per_key is untouched
    reset = run_cli("per-key", "voice-calls", "reset", "--key", "globex")
    assert (reset.code, reset.out) == (0, "voice-calls key globex pool: 1 → 2 (the limit's per key)\n")
    assert LimitKey.objects.get(key="globex").pool_override is None


def test_per_key_of_one_key_json_prints_the_key_as_in_keys(tenants) -> None:
    payload = json.loads(run_cli("per-key", "voice-calls", "4", "--key", "initech", "--json").out)
    assert payload == {
        "limit": "voice-calls",
        "key": "initech",
        "busy": 0,
        "reserved": 0,
        "in_use": 0,
        "waiting": 0,
        "pool": 4,
        "pool_override": 4,
        "pool_overridden": True,
        "weight": 1,
        "min": 0,
        "fair_share": None,  # a fifo limit (SPEC 13.5)
        "pass": None,  # a fifo limit: no turns (SPEC 13.2)
    }
    keys = json.loads(run_cli("keys", "voice-calls", "--json").out)["keys"]
    assert any(row["key"] == "initech" and row["pool_override"] == 4 for row in keys)


@pytest.mark.parametrize("value", ["0", "5", "-1", "abc", "2.5", ""])
def test_per_key_with_a_bad_value_exits_2_and_changes_nothing(tenants, value) -> None:
    result = run_cli("per-key", "voice-calls", value)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: per_key must ")
    assert result.err.count("\n") == 1
    _nothing_changed()


@pytest.mark.parametrize("value", ["0", "5", "abc"])
def test_per_key_of_one_key_with_a_bad_value_exits_2_and_changes_nothing(tenants, value) -> None:
    result = run_cli("per-key", "voice-calls", value, "--key", "acme")
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: per_key must ") and result.err.count("\n") == 1
    _nothing_changed()


@pytest.mark.parametrize("key", ["", "k" * 129, "tab\there"])
def test_per_key_with_a_bad_key_exits_2_and_changes_nothing(tenants, key) -> None:
    result = run_cli("per-key", "voice-calls", "3", "--key", key)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: key must ") and result.err.count("\n") == 1
    _nothing_changed()


def test_per_key_of_an_unknown_limit_exits_1(tenants) -> None:
    for argv in (("per-key", "nope", "3"), ("per-key", "nope", "3", "--key", "acme")):
        result = run_cli(*argv)
        assert (result.code, result.err) == (1, "error: unknown limit 'nope'\n")
    _nothing_changed()


@pytest.mark.parametrize("argv", [["keys"], ["per-key", "voice-calls"], ["per-key"], ["keys", "voice-calls", "--wat"]])
def test_bad_usage_of_the_new_verbs_exits_2(tenants, argv) -> None:
    assert run_cli(*argv).code == 2


# --- manage.py limits ---------------------------------------------------------------------------


def test_the_new_verbs_run_through_manage_py(tenants) -> None:
    out = io.StringIO()
    call_command("limits", "keys", "voice-calls", "--json", stdout=out, stderr=io.StringIO())
    assert [row["key"] for row in json.loads(out.getvalue())["keys"]] == ["acme", "globex"]
    out = io.StringIO()
    call_command("limits", "per-key", "voice-calls", "3", "--key", "acme", stdout=out, stderr=io.StringIO())
    assert out.getvalue() == "voice-calls key acme pool: 2 → 3\n"
    with pytest.raises(CommandError) as error:
        call_command("limits", "per-key", "voice-calls", "0", stdout=io.StringIO(), stderr=io.StringIO())
    assert error.value.returncode == 2


def test_declare_keeps_an_operators_per_key(tenants) -> None:
    """SPEC 9.4 with 5.2: a deploy does not clear the override (shown by `list`)."""
    run_cli("per-key", "voice-calls", "3")
    declare(
        voice_calls={"capacity": 4, "max_hold": "45m", "per_key": 2}, partner_api={"capacity": 5, "max_hold": "10m"}
    )
    voice = next(limit for limit in json.loads(run_cli("list", "--json").out) if limit["name"] == "voice-calls")
    assert (voice["per_key"], voice["per_key_overridden"]) == (3, True)
