"""A recorded step's key, not the text users see, is what a replay compares (issue 48).

Must never happen: a run that stops replaying because the name users see changed; a replay that
accepts a different call because its display text matches; a run recorded before keys (or by a
worker of the older release during a rolling deploy: rows without a key) that no longer replays;
the run page showing other waits than it did from the names.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from limits import services
from limits import workflow as limits_workflow
from limits.runs import selectors as run_selectors
from limits.workflow import with_limits
from stackbone.models import Run, Step
from stackbone.runs.runtime import advance
from studio.workflows import start_run, step, workflow
from tests.factories import assert_counters_match_rows, declare, holders

pytestmark = pytest.mark.django_db(transaction=True)

# As the seed names the wait (what users see) and as every release before the key recorded it.
SHOWN = "Esperando hueco · partner-api + voice-calls"
KEY = "acquire:partner-api,voice-calls"
BOTH = ["partner-api", "voice-calls"]

# The INSERT of the release before the key (stackbone.runs.statements._INSERT_STEP then): it names
# no key column, as a worker of that release still does during a rolling deploy.
OLDER_RELEASE_INSERT = """
    INSERT INTO studio_step (run_id, seq, name, kind, status, result, error, started_at, finished_at)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"""


@pytest.fixture
def limits(clock, no_worker):
    declare(partner_api={"capacity": 1, "max_hold": "1h"}, voice_calls={"capacity": 1, "max_hold": "1h"})


@step
def sync_account(account: str) -> dict:
    return {"synced": account}


@workflow(name="test_replay_key_sync")
def sync_both(input: dict) -> dict:
    return with_limits(BOTH, lambda: sync_account(input["account"]))


def waiting_run() -> tuple[str, str]:
    """A run suspended on its wait for both limits (voice-calls is held), and the holder's slot."""
    blocker = services.acquire("voice-calls", run_id="blocker").slot_id
    run = start_run(sync_both, {"account": "acme"})
    assert advance(run.id) == "suspended"
    return run.id, blocker


def recorded(run_id: str) -> list[tuple[str, str, str]]:
    return [(s.name, s.key, s.status) for s in Step.objects.filter(run_id=run_id).order_by("seq")]


def rows(run_id: str) -> list[tuple[int, str, str, Any]]:
    return list(Step.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "name", "key", "finished_at"))


def rewrite_the_older_release_way(step: Step) -> None:
    """Replace a recorded step by the row the release before the key wrote for the same call."""
    Step.objects.filter(id=step.id).delete()

    def prep(field: str, value: Any) -> Any:
        return Step._meta.get_field(field).get_db_prep_save(value, connection)  # type: ignore[union-attr]

    name = limits_workflow.KEYLESS_HOOK_NAME.format(limit=" + ".join(BOTH)) if step.kind == "hook" else step.name
    with connection.cursor() as cursor:
        cursor.execute(
            OLDER_RELEASE_INSERT,
            [
                step.run_id,
                step.seq,
                name,
                step.kind,
                step.status,
                prep("result", step.result),
                step.error,
                prep("started_at", step.started_at),
                prep("finished_at", step.finished_at),
            ],
        )


def test_a_new_run_records_each_step_under_the_name_users_see_and_a_stable_key(limits) -> None:
    run_id, blocker = waiting_run()
    assert recorded(run_id) == [(SHOWN, KEY, "waiting")]
    services.release(blocker)
    assert advance(run_id) == "completed", Run.objects.get(id=run_id).error
    assert recorded(run_id) == [
        (SHOWN, KEY, "completed"),
        ("sync_account", "sync_account", "completed"),
        ("release_slots", "release_slots", "completed"),
    ]


def test_a_changed_display_name_does_not_break_a_replay(limits, monkeypatch) -> None:
    """A release that shows the wait in other words resumes the runs recorded under the old ones."""
    run_id, blocker = waiting_run()
    monkeypatch.setattr(limits_workflow, "HOOK_NAME", "Waiting for a slot of {limit}")
    services.release(blocker)
    assert advance(run_id) == "completed", Run.objects.get(id=run_id).error
    # The recorded wait keeps the name it was recorded under; the run page shows today's words.
    assert recorded(run_id)[0] == (SHOWN, KEY, "completed")
    (wait, *_) = run_selectors.run_steps(Run.objects.get(id=run_id))
    shown = "".join(text for text, _ in wait.shown_parts)  # for the template
    assert shown == "Waiting for a slot of partner-api + voice-calls"
    assert holders("partner-api") == [] and holders("voice-calls") == []
    assert_counters_match_rows("voice-calls")


def test_a_different_call_under_the_same_display_name_is_a_replay_mismatch(limits) -> None:
    """The key is what is compared: a recorded wait for other limits is not this call, whatever
    its name says."""
    run_id, blocker = waiting_run()
    Step.objects.filter(run_id=run_id, seq=1).update(key="acquire:voice-calls")
    services.release(blocker)
    assert advance(run_id) == "failed"
    error = Run.objects.get(id=run_id).error
    assert "not deterministic" in error and "'acquire:voice-calls'" in error and repr(KEY) in error
    assert holders("partner-api") == [] and holders("voice-calls") == []  # ending the run freed them


def test_a_run_recorded_before_keys_replays_by_the_names_it_was_recorded_under(limits, monkeypatch) -> None:
    """Rows without a key (the older release's INSERT, which names no key column: the database
    default "") replay by their names, even after the display name changed; a run suspended on
    such a row resumes, and a run whose every row is keyless replays to its end without running
    a step again."""
    run_id, blocker = waiting_run()
    rewrite_the_older_release_way(Step.objects.get(run_id=run_id, seq=1))
    assert recorded(run_id) == [(SHOWN, "", "waiting")]
    (wait,) = run_selectors.run_steps(Run.objects.get(id=run_id))
    assert wait.waits_on == BOTH  # the run page reads it as before
    monkeypatch.setattr(limits_workflow, "HOOK_NAME", "Waiting for a slot of {limit}")
    services.release(blocker)
    assert advance(run_id) == "completed", Run.objects.get(id=run_id).error
    assert [key for _, key, _ in recorded(run_id)] == ["", "sync_account", "release_slots"]

    # The whole run as the older release recorded it, replayed from the top: the same calls.
    for old in Step.objects.filter(run_id=run_id, seq__gt=1):
        rewrite_the_older_release_way(old)
    Run.objects.filter(id=run_id).update(status="running", output=None, finished_at=None)
    before = rows(run_id)
    assert advance(run_id) == "completed", Run.objects.get(id=run_id).error
    assert rows(run_id) == before  # nothing ran or was recorded again
    assert Run.objects.get(id=run_id).output == {"synced": "acme"}


def test_the_run_page_shows_the_waits_from_the_key_as_it_did_from_the_name(limits) -> None:
    run_id, _ = waiting_run()
    Step.objects.filter(run_id=run_id, seq=1).update(name="renamed by a later release")
    (wait,) = run_selectors.run_steps(Run.objects.get(id=run_id))
    assert wait.waits_on == BOTH  # read from the key, not the name
    client = Client()
    client.force_login(User.objects.create_user("ada", password="a-long-password"))
    page = client.get(f"/studio/runs/{run_id}/").content.decode()
    (shown,) = re.findall(r'<span class="step-name">(.*?)</span>', page, re.S)
    assert shown == (
        'Esperando hueco · <a href="/studio/limits/partner-api/">partner-api</a>'
        ' + <a href="/studio/limits/voice-calls/">voice-calls</a>'
    )
    # A step that is not a wait shows its own name, links nothing, whatever its key.
    Step.objects.filter(run_id=run_id, seq=1).update(key="sync_account", kind="step")
    (plain,) = run_selectors.run_steps(Run.objects.get(id=run_id))
    assert plain.waits_on == []


LONG = ["a" * 64, "b" * 64, "c" * 64]  # three limits (keys.MAX_GROUP) of the longest name


@workflow(name="test_replay_key_long_names")
def sync_three(input: dict) -> dict:
    return with_limits(LONG, lambda: sync_account(input["account"]))


def test_a_wait_for_three_limits_of_the_longest_name_is_recorded_and_replays(clock, no_worker) -> None:
    """Its name users see is 216 characters ('Esperando hueco · ' and three names of 64 joined by
    ' + '): the step's row holds it whole (the name was 200 characters before issue 48's key), and
    its key; the run waits, then completes on replay."""
    declare(**{name: {"capacity": 1, "max_hold": "1h"} for name in LONG})
    blocker = services.acquire(LONG[2], run_id="blocker").slot_id
    run = start_run(sync_three, {"account": "acme"})
    assert advance(run.id) == "suspended"
    (wait,) = Step.objects.filter(run_id=run.id)
    assert (len(wait.name), wait.name, wait.key) == (
        216,
        limits_workflow.hook_name(LONG),
        limits_workflow.hook_key(LONG),
    )
    assert services.release(blocker)
    assert advance(run.id) == "completed", Run.objects.get(id=run.id).error
    assert Run.objects.get(id=run.id).output == {"synced": "acme"}
