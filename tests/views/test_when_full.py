"""SPEC 14.1, 14.6 on the Studio Limits screen (issue 47): an operator sets what a full limit does
and the caps on its queue from the edit panel (audited; empty: the declared value), a bad value
is shown by its field and changes nothing, a viewer sees the values and what they answered."""

from __future__ import annotations

import pytest

from limits import services
from limits.models import AuditEvent, Limit
from tests.factories import declare

pytestmark = pytest.mark.django_db

URL = "/studio/limits/exports/"
EMPTY = {"on_full": "", "max_waiting": "", "max_waiting_per_key": ""}


@pytest.fixture
def exports(clock) -> Limit:
    declare(exports={"capacity": 1, "max_hold": "30m", "max_waiting": 20})
    services.acquire("exports", run_id="holder")
    return Limit.objects.get(name="exports")


def test_the_operator_sets_skip_and_the_caps_then_goes_back_to_the_declared(exports, operator_client, htmx) -> None:
    page = operator_client.get(URL).content.decode()
    assert 'id="when-full"' in page and 'name="max_waiting_per_key"' in page
    response = operator_client.post(
        URL + "when-full/", {"on_full": "skip", "max_waiting": "5", "max_waiting_per_key": "2"}, headers=htmx
    )
    assert response.status_code == 200
    assert "When full, exports now skips: an acquisition is answered at once; max waiting 5, per key 2." in (
        response.content.decode()
    )
    assert "limit-changed" in response.headers["HX-Trigger"]
    assert services.acquire("exports", run_id="late").state == "skipped"
    limit = Limit.objects.get(name="exports")
    assert (limit.on_full, limit.max_waiting, limit.max_waiting_per_key, limit.skipped_count) == ("skip", 5, 2, 1)
    assert "So far 1 skipped, 0 refused, 0 replaced." in operator_client.get(URL).content.decode()
    body = operator_client.post(URL + "when-full/", EMPTY, headers=htmx).content.decode()
    assert "When full, exports now queues an acquisition; max waiting 20, per key none." in body
    actions = AuditEvent.objects.exclude(action="sync").order_by("id").values_list("action", "actor", "new_value")
    assert list(actions) == [
        ("on_full", "user:ada", "skip"),
        ("max_waiting", "user:ada", "5"),
        ("max_waiting_key", "user:ada", "2"),
        ("on_full", "user:ada", "wait (declared)"),
        ("max_waiting", "user:ada", "20 (declared)"),
        ("max_waiting_key", "user:ada", "none (declared)"),
    ]


def test_bad_values_are_shown_by_their_fields_and_change_nothing(exports, operator_client, htmx) -> None:
    response = operator_client.post(
        URL + "when-full/", {"on_full": "newest", "max_waiting": "0", "max_waiting_per_key": "lots"}, headers=htmx
    )
    assert response.status_code == 422
    body = response.content.decode()
    assert (
        "When full must be &#x27;wait&#x27;, &#x27;skip&#x27; or &#x27;replace&#x27;, not &#x27;newest&#x27;." in body
    )
    assert "Max waiting must be a whole number from 1 to 1,000,000, not 0." in body
    assert "Max waiting per key must be a whole number from 1 to 1,000,000, not &#x27;lots&#x27;." in body
    limit = Limit.objects.get(name="exports")
    assert (limit.on_full_override, limit.max_waiting_override, limit.max_waiting_per_key_override) == ("", None, None)
    assert not AuditEvent.objects.exclude(action="sync").exists()


def test_a_viewer_sees_the_values_and_cannot_change_them(exports, viewer_client, htmx) -> None:
    page = viewer_client.get(URL).content.decode()
    assert 'id="fact-when-full"' in page and "wait, max waiting 20, per key none" in page
    assert viewer_client.post(URL + "when-full/", {"on_full": "skip"}, headers=htmx).status_code == 403
    assert Limit.objects.get(name="exports").on_full == "wait"


def test_the_operator_sets_replace_and_the_hint_counts_the_replaced(exports, operator_client, htmx) -> None:
    """SPEC 14.3, 14.6: the When-full choice 'replace' (audited); the next acquisition of a key
    takes the place of that key's run waiting, and the hint counts it."""
    response = operator_client.post(URL + "when-full/", {"on_full": "replace"}, headers=htmx)
    assert response.status_code == 200
    assert "When full, exports now replaces: an acquisition takes the place of its key&#x27;s runs waiting" in (
        response.content.decode()
    )
    services.acquire("exports", run_id="older", key="acme")
    services.acquire("exports", run_id="newer", key="acme")
    assert Limit.objects.get(name="exports").replaced_count == 1
    assert "0 refused, 1 replaced." in operator_client.get(URL).content.decode()
    assert AuditEvent.objects.filter(action="on_full", new_value="replace", actor="user:ada").exists()


def test_cancel_running_is_set_on_a_workflow_s_own_bound_and_refused_for_a_named_limit(
    exports, operator_client, htmx
) -> None:
    """SPEC 14.4: a workflow's own bound takes it (its hint counts the runs it cancelled); a named
    limit refuses it by its field and nothing changes."""
    from limits.runs import bounds as run_bounds
    from tests.runs.test_cancel_running import PER_CALL

    run_bounds.sync(["test_cancel_running_per_call"])
    bound_url = f"/studio/limits/{PER_CALL}/"
    response = operator_client.post(bound_url + "when-full/", {**EMPTY, "on_full": "cancel_running"}, headers=htmx)
    assert response.status_code == 200
    assert f"When full, {PER_CALL} now cancels running" in response.content.decode()
    assert Limit.objects.get(name=PER_CALL).on_full == "cancel_running"
    assert "0 replaced, 0 cancelled." in operator_client.get(bound_url).content.decode()

    refused = operator_client.post(URL + "when-full/", {**EMPTY, "on_full": "cancel_running"}, headers=htmx)
    assert refused.status_code == 422
    assert "a workflow&#x27;s own bound&#x27;s only" in refused.content.decode()
    assert Limit.objects.get(name="exports").on_full == "wait"
    assert not AuditEvent.objects.filter(limit__name="exports", action="on_full").exists()
