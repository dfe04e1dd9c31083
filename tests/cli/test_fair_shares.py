"""SPEC 13.5 in the CLI (issue 28): `share`, `weight --key`, `min --key`, and the weight, min,
fair share and pass of each key in `keys` and the share in `list`, on this installation, with
their --json and exit codes (0 done; 1 unknown limit; 2 a bad value: one line naming the field,
nothing changed). SPEC 13.7 (issue 43): `slots` lists a fair limit's queue in the order it is
served, says so, and says why a run whose key is not next waits."""

from __future__ import annotations

import getpass
import json

import pytest

from limits.cli.render import FAIR_QUEUE_NOTE
from limits.models import AuditEvent, Limit, LimitKey, Slot
from tests.cli.conftest import run_cli, seed_fair
from tests.factories import declare

pytestmark = pytest.mark.django_db

ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def fair() -> None:
    seed_fair()


def _nothing_changed() -> None:
    limit = Limit.objects.get(name="tenant-jobs")
    assert (limit.share_override, limit.declared_share) == ("", "fair")
    assert not LimitKey.objects.exclude(weight=1).exists()
    assert not LimitKey.objects.exclude(minimum=0).exists()
    assert not AuditEvent.objects.filter(action__in=["share", "weight", "min"]).exists()


def _keys_json(*argv: str) -> dict:
    result = run_cli("keys", "tenant-jobs", "--json", *argv)
    assert result.code == 0, result.err
    return json.loads(result.out)


# --- keys and list --------------------------------------------------------------------------------


def test_keys_json_rows_carry_weight_min_fair_share_and_pass(fair) -> None:
    answer = _keys_json()
    rows = {row["key"]: row for row in answer["keys"]}
    assert {key: (row["weight"], row["min"], row["fair_share"], row["pass"]) for key, row in rows.items()} == {
        "acme": (1, 0, 1.0, 4.0),
        "globex": (1, 0, 1.0, 4.0),
        "initech": (1, 0, 1.0, 4.0),
    }
    no_key = answer["no_key"]
    assert (no_key["weight"], no_key["min"], no_key["fair_share"], no_key["pass"]) == (1, 0, 1.0, 4.0)


def test_a_keys_pass_is_in_turns_to_two_decimals() -> None:
    """Each grant adds 1 / weight of a turn to its key's pass; a key that had nothing enters at
    the smallest pass of the keys holding or waiting (SPEC 13.2)."""
    declare(jobs={"capacity": 4, "max_hold": "1m", "share": "fair"})
    run_cli("weight", "jobs", "3", "--key", "acme")
    from limits.services import acquire

    acquire("jobs", run_id="a1", key="acme")  # 0 + 1/3
    acquire("jobs", run_id="g1", key="globex")  # enters at 1/3, + 1
    answer = json.loads(run_cli("keys", "jobs", "--json").out)
    assert {row["key"]: row["pass"] for row in answer["keys"]} == {"acme": 0.33, "globex": 1.33}
    assert answer["no_key"]["pass"] is None  # no run without a key holds or waits
    rows = {line.split()[0]: line.split() for line in run_cli("keys", "jobs").out.splitlines()[3:5]}
    assert (rows["acme"][6], rows["globex"][6]) == ("0.33", "1.33")


def test_a_heavier_key_gets_a_larger_fair_share(fair) -> None:
    assert run_cli("weight", "tenant-jobs", "3", "--key", "acme").code == 0
    answer = _keys_json()
    shares = {row["key"]: row["fair_share"] for row in answer["keys"]}
    assert shares == {"acme": 2.0, "globex": 0.67, "initech": 0.67}  # 4 x 3/6, 4 x 1/6
    assert answer["no_key"]["fair_share"] == 0.67


def test_a_key_neither_holding_nor_waiting_has_no_fair_share(fair) -> None:
    run_cli("min", "tenant-jobs", "1", "--key", "hooli")  # a row for a key no run used yet
    rows = {row["key"]: row for row in _keys_json()["keys"]}
    assert (rows["hooli"]["min"], rows["hooli"]["fair_share"]) == (1, None)
    assert rows["acme"]["fair_share"] == 1.0  # the idle key counts in no one's share


def test_a_fifo_limit_has_weights_but_no_fair_shares() -> None:
    from tests.cli.conftest import seed_tenants

    seed_tenants()
    answer = json.loads(run_cli("keys", "voice-calls", "--json").out)
    assert {(row["weight"], row["min"], row["fair_share"]) for row in answer["keys"]} == {(1, 0, None)}
    assert run_cli("keys", "voice-calls").out.splitlines()[2].split()[:5] == ["KEY", "IN", "USE", "POOL", "WAITING"]


def test_the_keys_table_of_a_fair_limit_shows_weight_min_and_fair_share(fair) -> None:
    run_cli("weight", "tenant-jobs", "3", "--key", "globex")
    run_cli("min", "tenant-jobs", "2", "--key", "initech")
    lines = run_cli("keys", "tenant-jobs").out.splitlines()
    assert lines[0] == "tenant-jobs: 4/4 in use, 5 waiting, no per-key pools (only the total applies), fair shares"
    assert lines[2].split() == [
        "KEY",
        "IN",
        "USE",
        "POOL",
        "WEIGHT",
        "MIN",
        "FAIR",
        "SHARE",
        "PASS",
        "WAITING",
        "OVERRIDE",
        "NOTES",
    ]
    rows = {line.split()[0]: line.split() for line in lines[3:6]}
    # acme's four grants took it four turns on; the others entered the turns at its pass.
    assert rows["acme"] == ["acme", "4", "-", "1", "0", "0.67", "4.00", "2", "-"]
    assert rows["globex"] == ["globex", "0", "-", "3", "0", "2", "4.00", "1", "-"]
    assert rows["initech"] == ["initech", "0", "-", "1", "2", "0.67", "4.00", "1", "-"]
    assert lines[-1] == "without a key: 0 in use, 1 waiting, fair share 0.67 (weight 1), pass 4.00"


def test_list_shows_the_share(fair) -> None:
    declare(tenant_jobs={"capacity": 4, "max_hold": "45m", "share": "fair"}, other={"capacity": 1, "max_hold": "1m"})
    limits = {row["name"]: row for row in json.loads(run_cli("list", "--json").out)}
    assert (limits["tenant-jobs"]["share"], limits["tenant-jobs"]["share_overridden"]) == ("fair", False)
    assert limits["other"]["share"] == "fifo"
    rows = {line.split()[0]: line for line in run_cli("list").out.splitlines()[1:]}
    assert rows["tenant-jobs"].endswith("fair shares")
    assert "shares" not in rows["other"]


# --- share ----------------------------------------------------------------------------------------


def test_share_switches_a_limit_and_reset_restores_the_declared_share(fair) -> None:
    result = run_cli("share", "tenant-jobs", "fifo")
    assert (result.code, result.out, result.err) == (0, "tenant-jobs share: fair → fifo\n", "")
    assert Limit.objects.get(name="tenant-jobs").share == "fifo"
    rows = {line.split()[0]: line for line in run_cli("list").out.splitlines()[1:]}
    assert rows["tenant-jobs"].endswith("fifo shares*")
    event = AuditEvent.objects.get(action="share")
    assert (event.actor, event.old_value, event.new_value) == (ACTOR, "fair", "fifo")
    answer = json.loads(run_cli("share", "tenant-jobs", "reset", "--json").out)
    assert (answer["share"], answer["declared_share"], answer["share_overridden"]) == ("fair", "fair", False)
    assert run_cli("share", "tenant-jobs", "fair").out == "tenant-jobs share: fair → fair\n"


@pytest.mark.parametrize("value", ["FAIR", "round-robin", "", "-1"])
def test_a_bad_share_is_one_line_naming_the_field_and_changes_nothing(fair, value) -> None:
    result = run_cli("share", "tenant-jobs", value)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("error: share must be 'fifo' or 'fair'")
    assert result.err.count("\n") == 1
    errors = json.loads(run_cli("share", "tenant-jobs", value, "--json").err)
    assert errors["field"] == "share"
    _nothing_changed()


def test_share_of_an_unknown_limit_exits_1(fair) -> None:
    result = run_cli("share", "nope", "fair")
    assert (result.code, result.err) == (1, "error: unknown limit 'nope'\n")


# --- weight and min -------------------------------------------------------------------------------


def test_weight_sets_a_keys_weight_audited_and_reset_restores_1(fair) -> None:
    result = run_cli("weight", "tenant-jobs", "5", "--key", "globex")
    assert (result.code, result.out, result.err) == (0, "tenant-jobs key globex weight: 1 → 5\n", "")
    event = AuditEvent.objects.get(action="weight")
    assert (event.actor, event.key, event.old_value, event.new_value) == (ACTOR, "globex", "1", "5")
    answer = json.loads(run_cli("weight", "tenant-jobs", "reset", "--key", "globex", "--json").out)
    assert (answer["limit"], answer["key"], answer["weight"], answer["fair_share"]) == ("tenant-jobs", "globex", 1, 1.0)
    assert LimitKey.objects.get(key="globex").weight == 1


def test_min_sets_a_keys_min_and_reset_restores_0(fair) -> None:
    answer = json.loads(run_cli("min", "tenant-jobs", "2", "--key", "initech", "--json").out)
    assert (answer["key"], answer["min"]) == ("initech", 2)
    assert run_cli("min", "tenant-jobs", "reset", "--key", "initech").out == (
        "tenant-jobs key initech min: 2 → 0 (default)\n"
    )


def test_weight_on_a_fifo_limit_says_when_it_applies() -> None:
    declare(plain={"capacity": 2, "max_hold": "1m"})
    result = run_cli("weight", "plain", "2", "--key", "acme")
    assert result.out == "plain key acme weight: 1 → 2 (applies while plain is fair)\n"


@pytest.mark.parametrize(
    ("verb", "value", "message"),
    [
        ("weight", "0", "error: weight must be a whole number from 1 to 100, not 0"),
        ("weight", "101", "error: weight must be a whole number from 1 to 100, not 101"),
        ("weight", "2.5", "error: weight must be a whole number from 1 to 100, not '2.5'"),
        ("weight", "-3", "error: weight must be a whole number from 1 to 100, not -3"),
        ("min", "5", "error: min must be a whole number from 0 to capacity (4), not 5"),
        ("min", "-1", "error: min must be a whole number from 0 to capacity (4), not -1"),
        ("min", "lots", "error: min must be a whole number from 0 to capacity (4), not 'lots'"),
    ],
)
def test_a_bad_weight_or_min_is_one_line_naming_the_field_and_changes_nothing(fair, verb, value, message) -> None:
    result = run_cli(verb, "tenant-jobs", value, "--key", "acme")
    assert (result.code, result.out, result.err) == (2, "", message + "\n")
    assert json.loads(run_cli(verb, "tenant-jobs", value, "--key", "acme", "--json").err)["field"] == verb
    _nothing_changed()


@pytest.mark.parametrize("verb", ["weight", "min"])
def test_weight_and_min_need_a_good_key(fair, verb, capsys) -> None:
    missing = run_cli(verb, "tenant-jobs", "2", "--json")  # argparse's own error: on sys.stderr
    assert missing.code == 2
    assert "required: --key" in json.loads(capsys.readouterr().err)["error"]
    bad = run_cli(verb, "tenant-jobs", "2", "--key", "a\x07b")
    assert (bad.code, bad.err) == (2, "error: key must not contain control characters\n")
    _nothing_changed()


# --- the queue of a fair limit (SPEC 13.7) --------------------------------------------------------


def _queue_lines(*argv: str) -> list[list[str]]:
    lines = run_cli("slots", "tenant-jobs", *argv).out.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("POSITION"))
    return [line.split()[:4] for line in lines[start + 1 :] if line and not line.startswith(("…", "~ "))]


def test_slots_lists_a_fair_queue_in_the_order_it_is_served_and_says_why(fair) -> None:
    """acme holds all four slots: globex, initech and the run without a key come before acme's
    own two (ties at the same pass go to the oldest run); the first is only waiting for the limit,
    the others for their turn. Releasing the oldest slot grants the first row."""
    result = run_cli("slots", "tenant-jobs")
    assert result.code == 0, result.err
    assert FAIR_QUEUE_NOTE in result.out.splitlines()
    assert "First come" not in result.out
    assert _queue_lines() == [
        ["1", "r7", "-", "globex"],
        ["2", "r8", "-", "initech"],
        ["3", "r9", "-", "-"],
        ["4", "r5", "-", "acme"],
        ["5", "r6", "-", "acme"],
    ]
    rows = {line.split()[1]: line for line in result.out.splitlines() if line[:1].isdigit()}
    assert rows["r7"].endswith("the limit is full")
    for run in ("r8", "r9", "r5", "r6"):
        assert rows[run].endswith("other keys hold less of their share and are served first"), rows[run]
    queue = json.loads(run_cli("slots", "tenant-jobs", "--json").out)["queue"]
    assert [(row["position"], row["run"], row["position_estimated"]) for row in queue][:2] == [
        (1, "r7", False),
        (2, "r8", False),
    ]
    assert [row["reason"]["code"] for row in queue] == ["limit_full", *["fair_turn"] * 4]
    assert queue[1]["reason"] == {
        "code": "fair_turn",
        "text": "other keys hold less of their share and are served first",
        "limit": "tenant-jobs",
        "key": "initech",
    }

    oldest = Slot.objects.filter(limit__name="tenant-jobs", state="busy").order_by("granted_at", "id").first()
    assert run_cli("release", oldest.id, "--yes").code == 0
    assert Slot.objects.get(limit__name="tenant-jobs", state="reserved").run_id == "r7"
    assert [row[1] for row in _queue_lines()] == ["r8", "r9", "r5", "r6"]


def test_rows_past_the_walked_ones_are_marked_estimated(fair, monkeypatch) -> None:
    monkeypatch.setattr("limits.selectors.fair.FAIR_EXACT_MAX", 3)
    result = run_cli("slots", "tenant-jobs")
    assert [line[0] for line in _queue_lines()] == ["1", "2", "3", "~4", "~5"]
    assert result.out.splitlines()[-1].startswith("~ estimated: past the first runs")
    queue = json.loads(run_cli("slots", "tenant-jobs", "--json").out)["queue"]
    assert [row["position_estimated"] for row in queue] == [False, False, False, True, True]
    # --rows N walks its N (and one more) exactly.
    assert _queue_lines("--rows", "2") == [["1", "r7", "-", "globex"], ["2", "r8", "-", "initech"]]


def test_a_fifo_queue_keeps_its_header_and_arrival_order(fair) -> None:
    run_cli("share", "tenant-jobs", "fifo")
    out = run_cli("slots", "tenant-jobs").out
    assert FAIR_QUEUE_NOTE not in out
    assert [row[1] for row in _queue_lines()] == ["r5", "r6", "r7", "r8", "r9"]
