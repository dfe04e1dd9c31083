"""SPEC 14.1, 14.5, 14.6 in the CLI (issue 47): `on-full <limit> <wait|skip|reset>`,
`max-waiting <limit> <n|reset> [--per-key]` and `show <limit>` on this installation, with their
--json and exit codes (0 done; 1 unknown limit; 2 a bad value: one line naming the field, nothing
changed), the values and counts in `list`, and what an operator's change does to the next
acquisition. 'cancel_running' is a workflow's own bound's only (SPEC 14.4): refused for a named limit
with the engine's message naming on_full."""

from __future__ import annotations

import getpass
import io
import json

import pytest
from django.core.management import CommandError, call_command

from limits.config import define_workspace
from limits.models import AuditEvent, Limit, QueueEntry
from limits.services import acquire, sync_workspace
from tests.cli.conftest import run_cli, seed_when_full
from tests.factories import declare, queue

pytestmark = pytest.mark.django_db

ACTOR = f"cli:{getpass.getuser()}"
ACTIONS = ["on_full", "max_waiting", "max_waiting_key"]


@pytest.fixture
def full() -> None:
    seed_when_full()


def _values(name: str) -> tuple[str, int | None, int | None]:
    limit = Limit.objects.get(name=name)
    return limit.on_full, limit.max_waiting, limit.max_waiting_per_key


def _nothing_changed() -> None:
    assert _values("report-exports") == ("skip", None, None)
    assert _values("partner-api") == ("wait", 2, 1)
    assert not AuditEvent.objects.filter(action__in=ACTIONS).exists()


def _rows() -> dict[str, str]:
    return {line.split()[0]: line for line in run_cli("list").out.splitlines()[1:]}


# --- show and list --------------------------------------------------------------------------------


def test_show_gives_each_value_in_force_and_what_the_limit_answered_at_once(full) -> None:
    result = run_cli("show", "partner-api")
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        "partner-api: 1/1 in use, 2 waiting",
        "kind                  limit",
        "capacity              1",
        "max hold              10m",
        "per key               none",
        "share                 fifo",
        "on full               wait",
        "max waiting           2",
        "max waiting per key   1",
        "skipped               0",
        "refused (queue full)  2",
        "replaced              0",
        "cancelled             0",
    ]
    lines = run_cli("show", "report-exports").out.splitlines()
    assert "on full               skip" in lines
    assert "max waiting           none" in lines
    assert "skipped               1" in lines


def test_show_says_which_values_an_operator_overrode_and_what_was_declared(full) -> None:
    run_cli("on-full", "partner-api", "skip")
    run_cli("max-waiting", "partner-api", "5")
    run_cli("capacity", "partner-api", "3")
    lines = run_cli("show", "partner-api").out.splitlines()
    assert "capacity              3 (overridden; declared 1)" in lines
    assert "on full               skip (overridden; declared wait)" in lines
    assert "max waiting           5 (overridden; declared 2)" in lines
    assert "max waiting per key   1" in lines


def test_show_json_is_the_limits_row_of_list_json(full) -> None:
    shown = json.loads(run_cli("show", "partner-api", "--json").out)
    listed = {row["name"]: row for row in json.loads(run_cli("list", "--json").out)}
    assert shown == listed["partner-api"]
    assert {key: shown[key] for key in ("on_full", "max_waiting", "max_waiting_per_key")} == {
        "on_full": "wait",
        "max_waiting": 2,
        "max_waiting_per_key": 1,
    }
    assert (shown["skipped_count"], shown["refused_count"]) == (0, 2)
    exports = listed["report-exports"]
    assert (exports["on_full"], exports["declared_on_full"], exports["on_full_overridden"]) == ("skip", "skip", False)
    assert (exports["max_waiting"], exports["declared_max_waiting"], exports["max_waiting_overridden"]) == (
        None,
        None,
        False,
    )
    assert (exports["skipped_count"], exports["refused_count"]) == (1, 0)


def test_show_of_an_unknown_limit_exits_1(full) -> None:
    assert run_cli("show", "nope").code == 1
    assert json.loads(run_cli("show", "nope", "--json").err) == {"error": "unknown limit 'nope'", "field": "limit"}


def test_list_notes_a_limit_that_skips_and_its_caps(full) -> None:
    declare(
        report_exports={"capacity": 1, "max_hold": "30m", "on_full": "skip"},
        partner_api={"capacity": 1, "max_hold": "10m", "max_waiting": 2, "max_waiting_per_key": 1},
        plain={"capacity": 1, "max_hold": "1m"},
    )
    rows = _rows()
    assert rows["report-exports"].endswith("on full skip")
    assert rows["partner-api"].endswith("max waiting 2, max waiting per key 1")
    assert rows["plain"].rstrip().endswith("1m")  # wait and no cap: the defaults, no note
    run_cli("on-full", "report-exports", "wait")
    run_cli("max-waiting", "partner-api", "7", "--per-key")
    output = run_cli("list").out
    assert _rows()["report-exports"].endswith("on full wait*")
    assert _rows()["partner-api"].endswith("max waiting 2, max waiting per key 7*")
    assert output.splitlines()[-1] == "* overridden by an operator; `reset` restores the declared value"


# --- on-full --------------------------------------------------------------------------------------


def test_on_full_skip_makes_the_next_acquisition_skip_audited_and_reset_restores_it(full) -> None:
    result = run_cli("on-full", "partner-api", "skip")
    assert (result.code, result.out, result.err) == (0, "partner-api on full: wait → skip\n", "")
    event = AuditEvent.objects.get(action="on_full")
    assert (event.actor, event.old_value, event.new_value) == (ACTOR, "wait", "skip")
    run_cli("max-waiting", "partner-api", "10")
    answer = acquire("partner-api", run_id="p6", key="initech")
    assert (answer.state, answer.reason) == ("skipped", "limit_full")
    assert queue("partner-api") == ["p2", "p4"]  # the runs waiting keep their places
    assert json.loads(run_cli("show", "partner-api", "--json").out)["skipped_count"] == 1
    reset = json.loads(run_cli("on-full", "partner-api", "reset", "--json").out)
    assert (reset["on_full"], reset["declared_on_full"], reset["on_full_overridden"]) == ("wait", "wait", False)
    assert acquire("partner-api", run_id="p7", key="initech", timeout="1h").state == "waiting"


def test_on_full_wait_makes_a_skipping_limit_queue(full) -> None:
    assert run_cli("on-full", "report-exports", "wait").out == "report-exports on full: skip → wait\n"
    assert acquire("report-exports", run_id="r3", timeout="1h").state == "waiting"
    assert run_cli("on-full", "report-exports", "reset").out == "report-exports on full: wait → skip (declared)\n"
    assert acquire("report-exports", run_id="r4").state == "skipped"
    assert queue("report-exports") == ["r3"]


@pytest.mark.parametrize("value", ["cancel_running", "SKIP", "queue", "", "-1", "reset-it", "skip\x1b[31m"])
def test_a_bad_on_full_is_one_line_naming_the_field_and_changes_nothing(full, value) -> None:
    result = run_cli("on-full", "partner-api", value)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: on_full must be 'wait', 'skip' or 'replace', not ")
    assert result.err.count("\n") == 1
    assert "\x1b" not in result.err
    error = json.loads(run_cli("on-full", "partner-api", value, "--json").err)
    assert error["field"] == "on_full"
    _nothing_changed()


def test_cancel_running_is_refused_for_a_named_limit_with_the_engines_message(full) -> None:
    result = run_cli("on-full", "report-exports", "cancel_running")
    assert (result.code, result.err) == (
        2,
        "error: on_full must be 'wait', 'skip' or 'replace', not 'cancel_running': it is a workflow's own bound's "
        "only (SPEC 14.4), not a named limit's or an acquisition's\n",
    )
    _nothing_changed()


def test_replace_is_set_audited_and_shown(full) -> None:
    """SPEC 14.3, 14.6: on-full replace sets it (audited), show gives it and the replaced count."""
    result = run_cli("on-full", "partner-api", "replace")
    assert (result.code, result.out) == (0, "partner-api on full: wait → replace\n")
    assert Limit.objects.get(name="partner-api").on_full == "replace"
    assert "replaced" in run_cli("show", "partner-api").out
    assert json.loads(run_cli("show", "partner-api", "--json").out)["replaced_count"] == 0


# --- max-waiting ----------------------------------------------------------------------------------


def test_max_waiting_caps_the_queue_audited_and_reset_restores_the_declared_cap(full) -> None:
    result = run_cli("max-waiting", "report-exports", "1")
    assert (result.code, result.out, result.err) == (0, "report-exports max waiting: none → 1\n", "")
    event = AuditEvent.objects.get(action="max_waiting")
    assert (event.actor, event.old_value, event.new_value) == (ACTOR, "none", "1")
    assert run_cli("on-full", "report-exports", "wait").code == 0
    assert acquire("report-exports", run_id="r3", timeout="1h").state == "waiting"
    answer = acquire("report-exports", run_id="r4", timeout="1h")
    assert (answer.state, answer.reason) == ("refused", "queue_full")
    assert json.loads(run_cli("show", "report-exports", "--json").out)["refused_count"] == 1
    assert run_cli("max-waiting", "report-exports", "reset").out == "report-exports max waiting: 1 → none (declared)\n"
    assert acquire("report-exports", run_id="r4", timeout="1h").state == "waiting"


def test_max_waiting_per_key_caps_each_keys_part_of_the_queue(full) -> None:
    result = run_cli("max-waiting", "partner-api", "3", "--per-key")
    assert (result.code, result.out) == (0, "partner-api max waiting per key: 1 → 3\n")
    assert AuditEvent.objects.get(action="max_waiting_key").new_value == "3"
    run_cli("max-waiting", "partner-api", "10")
    for n in (6, 7):
        assert acquire("partner-api", run_id=f"p{n}", key="acme", timeout="1h").state == "waiting"
    refused = acquire("partner-api", run_id="p8", key="acme", timeout="1h")
    assert (refused.state, refused.reason) == ("refused", "key_queue_full")
    answer = json.loads(run_cli("max-waiting", "partner-api", "reset", "--per-key", "--json").out)
    assert (answer["max_waiting_per_key"], answer["max_waiting_per_key_overridden"]) == (1, False)
    assert (answer["max_waiting"], answer["max_waiting_overridden"]) == (10, True)  # the other cap stays


def test_lowering_a_cap_takes_no_waiting_run_out_of_the_queue(full) -> None:
    assert run_cli("max-waiting", "partner-api", "1").out == "partner-api max waiting: 2 → 1\n"
    assert queue("partner-api") == ["p2", "p4"]
    assert run_cli("show", "partner-api").out.splitlines()[0] == "partner-api: 1/1 in use, 2 waiting"
    assert acquire("partner-api", run_id="p6", key="initech", timeout="1h").state == "refused"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("0",), "error: max_waiting must be a whole number from 1 to 1,000,000, not 0"),
        (("1000001",), "error: max_waiting must be a whole number from 1 to 1,000,000, not 1000001"),
        (("-1",), "error: max_waiting must be a whole number from 1 to 1,000,000, not -1"),
        (("2.5",), "error: max_waiting must be a whole number from 1 to 1,000,000, not '2.5'"),
        (("lots",), "error: max_waiting must be a whole number from 1 to 1,000,000, not 'lots'"),
        (("",), "error: max_waiting must be a whole number from 1 to 1,000,000, not ''"),
        (("0", "--per-key"), "error: max_waiting_per_key must be a whole number from 1 to 1,000,000, not 0"),
        (("1e3", "--per-key"), "error: max_waiting_per_key must be a whole number from 1 to 1,000,000, not '1e3'"),
    ],
)
def test_a_bad_max_waiting_is_one_line_naming_the_field_and_changes_nothing(full, argv, message) -> None:
    result = run_cli("max-waiting", "partner-api", *argv)
    assert (result.code, result.out, result.err) == (2, "", message + "\n")
    field = "max_waiting_per_key" if "--per-key" in argv else "max_waiting"
    assert json.loads(run_cli("max-waiting", "partner-api", *argv, "--json").err)["field"] == field
    _nothing_changed()


@pytest.mark.parametrize("argv", [("on-full", "nope", "skip"), ("max-waiting", "nope", "3")])
def test_an_unknown_limit_exits_1_and_changes_nothing(full, argv) -> None:
    result = run_cli(*argv)
    assert (result.code, result.out, result.err) == (1, "", "error: unknown limit 'nope'\n")
    _nothing_changed()


def test_the_box_has_neither_on_full_nor_caps_of_its_own(full) -> None:
    sync_workspace(
        define_workspace(
            limits={"partner-api": {"capacity": 1, "max_hold": "10m"}}, run_concurrency={"base": 1, "burst": 2.0}
        )
    )
    for argv in (("on-full", "box", "skip"), ("max-waiting", "box", "3"), ("max-waiting", "box", "3", "--per-key")):
        result = run_cli(*argv)
        assert (result.code, result.out) == (2, ""), argv
        assert result.err.startswith("error: 'box' is the box's run concurrency"), argv
    box = Limit.objects.get(name="box")
    assert (box.on_full, box.max_waiting, box.max_waiting_per_key) == ("wait", None, None)
    lines = run_cli("show", "box").out.splitlines()
    assert [line.split() for line in lines[1:5]] == [["kind", "box"], ["ceiling", "2"], ["base", "1"], ["burst", "2"]]


def test_the_verbs_run_through_manage_py(full) -> None:
    out = io.StringIO()
    call_command("limits", "on-full", "partner-api", "skip", stdout=out, stderr=io.StringIO())
    call_command("limits", "max-waiting", "partner-api", "4", "--per-key", stdout=out, stderr=io.StringIO())
    call_command("limits", "show", "partner-api", stdout=out, stderr=io.StringIO())
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["partner-api on full: wait → skip", "partner-api max waiting per key: 1 → 4"]
    assert "max waiting per key   4 (overridden; declared 1)" in lines
    with pytest.raises(CommandError) as raised:
        call_command("limits", "on-full", "partner-api", "drop", stdout=io.StringIO(), stderr=io.StringIO())
    assert (str(raised.value), raised.value.returncode) == (
        "on_full must be 'wait', 'skip' or 'replace', not 'drop'",
        2,
    )
    assert _values("partner-api") == ("skip", 2, 4)
    assert not QueueEntry.objects.filter(run_id__in=["p3", "p5"]).exists()  # the refused runs left nothing
