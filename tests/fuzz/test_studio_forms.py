"""Every Studio form field and query parameter, and the admin's override form, fed nasty values:
the answer is the form with a message next to the field (422/200) or a 4xx, never a 500, and
nothing is written. Labels are shown escaped."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import assume, example, given
from hypothesis import strategies as st

from limits import services
from limits.config import MAX_CAPACITY
from limits.durations import DurationError, parse_duration
from limits.models import Limit
from tests.fuzz.conftest import NASTY_TEXT, fuzz, snapshot, text
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db

PAGE = "/studio/limits/voice-calls/"
form_text = text.filter(lambda value: "\x00" not in value)  # NUL: refused before any view (400)


@pytest.fixture
def ops(busy_limit) -> Client:
    client = Client()
    client.force_login(make_user("ada", "limits.operate_limit", "studio.change_run", staff=True))
    return client


@pytest.fixture
def root(busy_limit) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="a-long-password"))
    return client


def valid_capacity_text(raw: str) -> bool:
    # The form strips surrounding whitespace (Django's CharField), so " 3\r" is 3: a pasted value
    # with a stray space or line end is accepted (CI found "1\r" treated as bad here).
    # A sign is read as the CLI reads it: "+3" is 3, "-1" is refused by the range check.
    raw = raw.strip()
    return re.fullmatch(r"[+-]?[0-9]{1,30}", raw) is not None and 1 <= int(raw) <= MAX_CAPACITY


def valid_max_hold_text(raw: str) -> bool:
    # Always text: a bare number needs a unit (issue 15, item 3), in Studio as in the admin.
    try:
        parse_duration(raw)
    except DurationError:
        return False
    return True


@fuzz
@given(value=form_text, htmx=st.booleans())
@example(value="0", htmx=True)
@example(value="100001", htmx=True)
@example(value="-1", htmx=False)
@example(value="٣", htmx=True)
@example(value="1" * 21, htmx=True)
@example(value="1" * 26, htmx=True)
@example(value="-1", htmx=True)
@example(value="9" * 5000, htmx=True)
@example(value="<script>alert(1)</script>", htmx=True)
@example(value="", htmx=True)
def test_a_bad_capacity_comes_back_next_to_the_field(ops, value: str, htmx: bool) -> None:
    assume(not valid_capacity_text(value))
    before = snapshot()
    headers = {"HX-Request": "true"} if htmx else {}
    response = ops.post(f"{PAGE}capacity/", {"capacity": value}, headers=headers)
    assert response.status_code == 422
    body = response.content.decode()
    assert 'class="errorlist' in body and "1 to 100000" in body
    if value.strip():  # the CLI's words, whatever the value (issue 15, item 8)
        assert "Capacity must be a whole number from 1 to 100000, not " in body
    assert "<script>alert(1)</script>" not in body
    assert snapshot() == before


@fuzz
@given(value=form_text, htmx=st.booleans())
@example(value="0ms", htmx=True)
@example(value="31d", htmx=True)
@example(value="2592000001", htmx=False)
@example(value="٣m", htmx=True)
@example(value="45 m", htmx=True)
@example(value="x" * 33, htmx=True)
@example(value="45", htmx=True)
@example(value="2592000001", htmx=False)
def test_a_bad_max_hold_comes_back_next_to_the_field(ops, value: str, htmx: bool) -> None:
    assume(not valid_max_hold_text(value.strip()))
    before = snapshot()
    headers = {"HX-Request": "true"} if htmx else {}
    response = ops.post(f"{PAGE}max-hold/", {"max_hold": value}, headers=headers)
    assert response.status_code == 422
    assert 'class="errorlist' in response.content.decode()
    assert snapshot() == before


@fuzz
@given(field=form_text)
def test_a_reset_of_anything_but_the_two_fields_is_a_400(ops, field: str) -> None:
    assume(field not in ("capacity", "max_hold"))
    before = snapshot()
    assert ops.post(f"{PAGE}reset/", {"field": field}).status_code == 400
    assert snapshot() == before


@fuzz
@given(slot=form_text, htmx=st.booleans())
@example(slot="slot_" + "A" * 35, htmx=True)
@example(slot="slot_<b>", htmx=True)
@example(slot="'; DROP TABLE limits_slot; --", htmx=False)
def test_releasing_a_weird_slot_id_changes_nothing(ops, slot: str, htmx: bool) -> None:
    before = snapshot()
    headers = {"HX-Request": "true"} if htmx else {}
    response = ops.post(f"{PAGE}release/", {"slot": slot, "slots": slot, "queue": slot}, headers=headers)
    assert response.status_code in (200, 302, 400), response.status_code
    if response.status_code == 200:
        assert "already free" in response.content.decode()
    assert snapshot() == before


@fuzz
@given(slots=text, queue=text, extra=text)
@example(slots="999999999", queue="-1", extra="")
@example(slots="9" * 5000, queue="1e3", extra="")
def test_any_page_parameters_show_a_page(ops, slots: str, queue: str, extra: str) -> None:
    for params in ({"slots": slots, "queue": queue}, {"page": extra, "q": extra}):
        response = ops.get(PAGE, params)
        if any("\x00" in value for value in params.values()):
            assert response.status_code == 400
        else:
            assert response.status_code == 200
    assert ops.get("/studio/limits/", {"page": extra}, headers={"HX-Request": "true"}).status_code in (200, 400)


@pytest.mark.parametrize(
    "path", ["/studio/limits/%00/", "/studio/runs/run%00/", "/studio/limits/voice-calls/?slots=%00"]
)
def test_a_nul_anywhere_in_the_address_is_a_400_not_a_database_error(ops, path: str) -> None:
    assert ops.get(path).status_code == 400


@pytest.mark.parametrize(
    "name", [n for n in NASTY_TEXT if n and "\x00" not in n and "/" not in n and n not in (".", "..")]
)
def test_an_unknown_limit_page_or_action_is_a_404(ops, name: str) -> None:
    before = snapshot()
    from urllib.parse import quote

    path = f"/studio/limits/{quote(name, safe='')}/"
    assert ops.get(path).status_code == 404
    assert ops.post(f"{path}capacity/", {"capacity": "3"}).status_code == 404
    assert ops.post(f"{path}release/", {"slot": "slot_x"}).status_code == 404
    assert snapshot() == before


# --- the admin's override form --------------------------------------------------------------------


@fuzz
@given(capacity=form_text, max_hold=form_text)
@example(capacity="0", max_hold="1m")
@example(capacity="5", max_hold="0ms")
@example(capacity="１０", max_hold="1m")
def test_the_admin_override_form_refuses_bad_values_and_writes_nothing(root, capacity: str, max_hold: str) -> None:
    capacity_ok = not capacity.strip() or valid_capacity_text(capacity.strip())
    max_hold_ok = not max_hold.strip() or valid_max_hold_text(max_hold.strip())
    assume(not (capacity_ok and max_hold_ok))
    limit = Limit.objects.get(name="voice-calls")
    before = snapshot()
    response = root.post(f"/admin/limits/limit/{limit.pk}/change/", {"capacity": capacity, "max_hold": max_hold})
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert snapshot() == before


@fuzz
@given(
    params=st.dictionaries(
        st.sampled_from(["q", "o", "p", "state__exact", "limit__id__exact", "at__year", "at__month", "e", "all"]),
        form_text,
        max_size=3,
    )
)
@example(params={"at__year": "99999999999"})  # found by this test: OverflowError in the date hierarchy, a 500
@example(params={"limit__id__exact": "abc"})
@example(params={"q": "x" * 100_000})  # found in CI: SQLite refused the LIKE pattern, a 500
def test_admin_lists_take_any_query(root, params: dict[str, str]) -> None:
    for model in ("limit", "slot", "queueentry", "auditevent"):
        response = root.get(f"/admin/limits/{model}/", params)
        assert response.status_code in (200, 302, 400), (model, params, response.status_code)


@fuzz
@given(ids=st.lists(form_text, max_size=3))
def test_the_admin_release_action_with_weird_ids_changes_nothing(root, ids: list[str]) -> None:
    before = snapshot()
    response = root.post("/admin/limits/slot/", {"action": "release_selected", "_selected_action": ids})
    assert response.status_code in (200, 302)
    assert snapshot() == before


# --- the sign-in form ------------------------------------------------------------------------------


@fuzz
@given(username=form_text, password=form_text)
def test_the_sign_in_form_takes_any_input(db, username: str, password: str) -> None:
    response = Client().post("/accounts/login/", {"username": username, "password": password})
    assert response.status_code == 200  # the form again, with a message
    assert "_auth_user_id" not in Client().session


# --- escaping ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "label",
    [
        "<script>alert(1)</script>",
        '"><img src=x onerror=alert(1)>',
        "' onmouseover='alert(1)",
        "{{ 7*7 }}",
        "</td></tr></table><h1>x</h1>",
    ],
)
def test_labels_are_shown_escaped_wherever_they_appear(ops, label: str) -> None:
    """The label goes into a table cell, and into the release button's hx-confirm attribute."""
    from django.utils.html import escape

    services.set_capacity("voice-calls", 3, actor="test")  # run-2 (queued) gets a slot
    services.acquire("voice-calls", run_id="run-x", label=label)
    services.set_capacity("voice-calls", 10, actor="test")
    for response in (ops.get(PAGE), ops.get(PAGE, headers={"HX-Request": "true"}), ops.get("/studio/runs/run-x/")):
        body = response.content.decode()
        assert label not in body or label == escape(label)
    page = ops.get(PAGE).content.decode()
    assert escape(label) in page
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page and "<h1>x</h1>" not in page


def test_a_script_label_is_escaped_on_the_limit_page(ops) -> None:
    services.set_capacity("voice-calls", 10, actor="test")
    services.acquire("voice-calls", run_id="run-evil", label="<script>alert(1)</script>")
    body = ops.get(PAGE).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)</script>" not in body


def test_a_user_named_with_html_is_escaped_in_the_activity(busy_limit) -> None:
    user = make_user("<b>mallory</b>", "limits.operate_limit")
    client = Client()
    client.force_login(user)
    assert client.post(f"{PAGE}capacity/", {"capacity": "3"}).status_code == 302
    body = client.get(PAGE).content.decode()
    assert "<b>mallory</b>" not in body and "&lt;b&gt;mallory&lt;/b&gt;" in body
    assert User.objects.filter(username="<b>mallory</b>").exists()


def test_the_admin_release_action_with_a_nul_id_is_a_400(root) -> None:
    """Found by fuzzing on PostgreSQL: the admin looked the id up before any code of ours ran (a 500)."""
    before = snapshot()
    response = root.post("/admin/limits/slot/", {"action": "release_selected", "_selected_action": ["slot_\x00"]})
    assert response.status_code == 400
    assert snapshot() == before
