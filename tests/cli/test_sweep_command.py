"""`manage.py limits_sweep`: the periodic sweep as a command of its own, in the shape of
Django's clearsessions (it only calls limits.services.sweep and prints one line)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from limits.models import Slot
from limits.services import acquire
from tests.factories import declare, holders

pytestmark = pytest.mark.django_db


def sweep_command(*args: str) -> str:
    out = io.StringIO()
    call_command("limits_sweep", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_it_takes_back_an_expired_slot_and_hands_it_on(clock) -> None:
    declare(one={"capacity": 1, "max_hold": "10m"})
    slot_id = acquire("one", run_id="r1").slot_id
    acquire("one", run_id="r2")
    clock.advance(minutes=11)
    assert sweep_command() == "sweep: 1 expired, 0 lapsed, 0 timed out, 1 granted over 1 limit(s)\n"
    assert Slot.objects.get(id=slot_id).state == "expired"
    assert holders("one") == [("r2", "reserved")]


def test_it_prints_the_same_line_as_limits_sweep(clock) -> None:
    declare(one={"capacity": 1, "max_hold": "10m"})
    out = io.StringIO()
    call_command("limits", "sweep", stdout=out, stderr=io.StringIO())
    assert sweep_command() == out.getvalue()


def test_it_takes_no_arguments() -> None:
    with pytest.raises(CommandError, match="unrecognized arguments: one"):
        sweep_command("one")
