"""`python manage.py limits ...` runs the same verbs as `stackbone limits`, with the same exit
codes, and keeps its own sync, sweep and token verbs."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from limits.models import ApiToken, Limit
from limits.tokens import digest_of

pytestmark = pytest.mark.django_db


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("limits", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_list_through_manage_py_prints_the_same_table(calls) -> None:
    lines = command("list").splitlines()
    assert lines[0].startswith("NAME")
    assert any(line.startswith("voice-calls") and " 2/2 " in line for line in lines)


def test_json_through_manage_py(calls) -> None:
    payload = json.loads(command("slots", "voice-calls", "--json"))
    assert [slot["run"] for slot in payload["slots"]] == ["r1", "r2"]


def test_capacity_through_manage_py(calls) -> None:
    assert command("capacity", "voice-calls", "4") == "voice-calls capacity: 2 → 4\n"
    assert Limit.objects.get(name="voice-calls").capacity == 4


@pytest.mark.parametrize(
    ("args", "returncode", "message"),
    [
        (("capacity", "voice-calls", "0"), 2, "capacity must be a whole number from 1 to 100000"),
        (("max-hold", "voice-calls", "31d"), 2, "max hold must be at most 30 days"),
        (("capacity", "nope", "3"), 1, "unknown limit 'nope'"),
        (("release", "slot_nope", "--yes"), 1, "unknown slot 'slot_nope'"),
    ],
)
def test_failures_through_manage_py_keep_their_exit_codes(calls, args, returncode, message) -> None:
    with pytest.raises(CommandError) as caught:
        command(*args)
    assert caught.value.returncode == returncode
    assert message in str(caught.value)


def test_sync_and_sweep_still_work(calls) -> None:
    assert command("sync").startswith("synced:")
    assert command("sweep").startswith("sweep:")


def test_token_create_prints_a_token_shown_once(calls) -> None:
    User.objects.create_user("ops")
    raw = command("token", "create", "ops", "--name", "laptop").strip()
    token = ApiToken.objects.get()
    assert (token.user.username, token.name, token.digest) == ("ops", "laptop", digest_of(raw))
    assert raw not in {token.prefix, token.digest}


def test_token_create_for_an_unknown_user_fails(calls) -> None:
    with pytest.raises(CommandError, match="unknown user 'ghost'"):
        command("token", "create", "ghost")
