"""Every field and query parameter of the JSON API, fed wrong types, huge and negative numbers,
unicode, empty and very long strings, SQL and HTML metacharacters, bad JSON and wrong content
types: the answer is a JSON error with a 4xx (never a 500) and nothing is written."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.conf import settings
from hypothesis import assume, example, given
from hypothesis import strategies as st

from limits import api_urls as limits_api_urls
from limits.api import BAD_BODY, BAD_CONTENT_TYPE, BODY_TOO_LARGE
from limits.config import MAX_CAPACITY
from limits.durations import DurationError, parse_duration
from tests.api.conftest import Api, operator, reader
from tests.fuzz.conftest import NASTY_TEXT, fuzz, json_values, snapshot, text

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(calls) -> Api:
    return Api(operator()[1])


# The routes of a limit's name that only take a POST ("/share/", "/on-full/", ...).
WRITE_ROUTES = frozenset(
    str(pattern.pattern).removeprefix("<str:name>")
    for pattern in limits_api_urls.urlpatterns
    if str(pattern.pattern).startswith("<str:name>/") and str(pattern.pattern).count("/") == 2
    and pattern.name not in ("slots", "queue", "keys")
)  # fmt: skip


def is_valid_capacity(value: object) -> bool:
    return value is None or (type(value) is int and 1 <= value <= MAX_CAPACITY)


def is_valid_max_hold(value: object) -> bool:
    if value is None:
        return True
    try:
        parse_duration(value)
    except DurationError:
        return False
    return True


def fits(value: object, field: str) -> bool:
    """The request body stays within Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB): a larger one
    is refused whole, 413 (test_a_body_over_the_size_limit_is_a_json_413), not for its field."""
    return len(json.dumps({field: value}).encode()) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def assert_refused(response, before, *statuses: int) -> dict:
    assert response.status_code in (statuses or (400, 404)), (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert isinstance(body["error"], str) and body["error"]
    assert snapshot() == before, "a refused request wrote something"
    return body


@fuzz
@given(value=json_values)
@example(value=True)
@example(value=0)
@example(value=-1)
@example(value=MAX_CAPACITY + 1)
@example(value=10**100)
@example(value=2.0)
@example(value="5")
@example(value=[5])
@example(value={"capacity": 5})
@example(value="<script>alert(1)</script>")
def test_a_bad_capacity_is_a_400_naming_the_field(api, value) -> None:
    assume(not is_valid_capacity(value) and fits(value, "capacity"))
    before = snapshot()
    body = assert_refused(api.post("voice-calls/capacity/", {"capacity": value}), before, 400)
    assert body["field"] == "capacity" and "1 to 100000" in body["error"]


@pytest.mark.parametrize("path", ["voice-calls/capacity/", "voice-calls/max-hold/"])
def test_a_body_over_the_size_limit_is_a_json_413(api, path: str) -> None:
    """Found by CI's fuzzing: a 3 MB body was Django's HTML 400 page, not a JSON error."""
    before = snapshot()
    huge = {"capacity": "é" * 500_000, "max_hold": ["🙂" * 100_000] * 2}  # ~3 MB as JSON
    body = assert_refused(api.post(path, huge), before, 413)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert body == {"error": BODY_TOO_LARGE.format(limit=limit), "field": "body"}


@fuzz
@given(value=json_values)
@example(value="0ms")
@example(value="31d")
@example(value=2_592_000_001)
@example(value=-5)
@example(value="٣m")
@example(value=1.5)
@example(value="45 m")
@example(value="7")
def test_a_bad_max_hold_is_a_400_naming_the_field(api, value) -> None:
    """The message names the accepted range, or, for a bare number in a text, the units it needs
    (issue 15: '45' is never read as 45 ms)."""
    assume(not is_valid_max_hold(value) and fits(value, "max_hold"))
    before = snapshot()
    body = assert_refused(api.post("voice-calls/max-hold/", {"max_hold": value}), before, 400)
    assert body["field"] == "max_hold"
    assert "30 days" in body["error"] or "needs a unit" in body["error"], body


@fuzz
@given(raw=st.one_of(st.binary(max_size=300), text, st.sampled_from(["[" * 100_000, "{" * 50_000, '{"a":' * 30_000])))
@example(raw=b"\xff\xfe")
@example(raw="[" * 100_000)  # found by this test: a RecursionError in json.loads was a 500
@example(raw='{"capacity": 1e999}')
@example(raw='{"capacity": NaN}')
@example(raw='{"capacity": ' + "9" * 5000 + "}")
@example(raw='{"capacity": 5')
@example(raw="null")
@example(raw="[]")
@example(raw='"capacity"')
@example(raw="capacity=5")
def test_a_body_that_is_not_a_json_object_with_a_good_value_is_refused(api, raw) -> None:
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        parsed = None
    assume(not (isinstance(parsed, dict) and "capacity" in parsed and is_valid_capacity(parsed["capacity"])))
    before = snapshot()
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    response = api.client.post(
        "/api/limits/voice-calls/capacity/", data, content_type="application/json", headers=api.headers
    )
    assert_refused(response, before, 400)


@pytest.mark.parametrize(
    "content_type, data",
    [
        ("application/x-www-form-urlencoded", "capacity=5"),
        (
            "multipart/form-data; boundary=xyz",
            '--xyz\r\nContent-Disposition: form-data; name="capacity"\r\n\r\n5\r\n--xyz--',
        ),
        ("text/plain", '{"capacity": 5}'),
        ("text/html", "<capacity>5</capacity>"),
        ("application/xml", "<capacity>5</capacity>"),
        ("application/jsonx", '{"capacity": 5}'),
        ("", '{"capacity": 5}'),
    ],
)
def test_a_body_that_is_not_labelled_json_is_a_415(api, content_type: str, data: str) -> None:
    before = snapshot()
    response = api.client.post(
        "/api/limits/voice-calls/capacity/", data, content_type=content_type, headers=api.headers
    )
    body = assert_refused(response, before, 415)
    assert body["error"] == BAD_CONTENT_TYPE


def test_an_empty_body_is_a_missing_field_not_a_content_type_problem(api) -> None:
    before = snapshot()
    response = api.client.post("/api/limits/voice-calls/capacity/", b"", content_type="", headers=api.headers)
    assert assert_refused(response, before, 400)["field"] == "capacity"
    assert api.post("voice-calls/capacity/", raw="[1]").json()["error"] == BAD_BODY


names = st.one_of(st.sampled_from(NASTY_TEXT), st.text(min_size=1, max_size=200), st.from_regex(r"[a-z0-9._-]{65,80}"))


@fuzz
@given(name=names)
@example(name="voice-calls\n")
@example(name="VOICE-CALLS")
@example(name="a\x00b")
@example(name="'; DROP TABLE limits_limit; --")
def test_an_unknown_limit_name_anywhere_is_a_404_and_writes_nothing(api, name: str) -> None:
    assume(name != "voice-calls" and name != "partner-api")
    path = quote(name, safe="")
    assume(path not in ("", ".", "..", "slots", "%2E", "%2E%2E"))
    before = snapshot()
    for response in (
        api.get(f"{path}/"),
        api.get(f"{path}/slots/"),
        api.get(f"{path}/queue/"),
        api.post(f"{path}/capacity/", {"capacity": 3}),
        api.post(f"{path}/max-hold/", {"max_hold": "1m"}),
    ):
        assert response.status_code in (400, 404), (response.status_code, name)
        assert response.status_code != 500
    assert snapshot() == before


@fuzz
@given(slot_id=st.one_of(st.sampled_from(NASTY_TEXT), st.text(min_size=1, max_size=60)))
@example(slot_id="slot_" + "A" * 35)
@example(slot_id="slot_<script>")
@example(slot_id="share")  # found by this test: "slots/share/" is the share route of a limit named "slots"
def test_an_unknown_slot_id_is_a_404_and_releases_nothing(api, slot_id: str) -> None:
    before = snapshot()
    path = quote(slot_id, safe="")
    read, release = api.get(f"slots/{path}/"), api.post(f"slots/{path}/release/")
    # A limit may be named "slots" (limits/api_urls.py): "slots/share/" is that limit's write
    # route, which a GET may not use.
    assert read.status_code in ((405,) if f"/{slot_id}/" in WRITE_ROUTES else (400, 404)), (read.status_code, slot_id)
    assert release.status_code in (400, 404), (release.status_code, slot_id)  # 400: a NUL
    assert snapshot() == before


@fuzz
@given(
    page=st.one_of(text, st.integers(min_value=-(10**20), max_value=10**20).map(str)),
    size=st.one_of(text, st.integers().map(str)),
)
@example(page="0", size="100")
@example(page="1", size="501")
@example(page="1000000001", size="1")
@example(page="1000000000", size="500")
@example(page="１", size="1")
@example(page="²", size="1")
@example(page="1 ", size="1")
@example(page="9" * 5000, size="1")  # found by this test: int() of 4,300+ digits raised, a 500
def test_page_and_size_are_checked_and_never_a_500(api, page: str, size: str) -> None:
    for what in ("slots", "queue"):
        response = api.get(f"voice-calls/{what}/", page=page, size=size)
        assert response.status_code in (200, 400), (response.status_code, page, size)
        if response.status_code == 400:
            assert response.json()["field"] in (("page", "size") if "\x00" not in page + size else (None,))
        else:
            assert page.isascii() and page.isdigit() and size.isascii() and size.isdigit()


@fuzz
@given(
    header=st.one_of(
        text.map(lambda t: "Bearer " + t), text, st.sampled_from(["Bearer", "Bearer ", "Basic YTpi", "bearer sbk_x"])
    )
)
def test_a_bad_token_is_a_401_and_writes_nothing(calls, header: str) -> None:
    assume(all(ord(c) < 256 for c in header))  # HTTP headers are latin-1
    api = Api(None)
    api.headers = {"Authorization": header}
    before = snapshot()
    assert api.get("").status_code == 401
    assert api.post("voice-calls/capacity/", {"capacity": 3}).status_code == 401
    assert snapshot() == before


def test_a_reader_cannot_write_whatever_the_body(calls) -> None:
    api = Api(reader()[1])
    before = snapshot()
    for body in ({"capacity": 3}, {"capacity": "<script>"}, None):
        assert api.post("voice-calls/capacity/", body).status_code == 403
    assert snapshot() == before


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_other_methods_are_refused(api, method: str) -> None:
    before = snapshot()
    response = getattr(api.client, method)("/api/limits/voice-calls/capacity/", '{"capacity": 3}', headers=api.headers)
    assert response.status_code == 405
    assert snapshot() == before
