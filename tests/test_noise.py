"""No noise a newcomer sees on the first day (issue 15, item 15): no WhiteNoise warning per test,
no 404 for the browser's /favicon.ico, and HEAD / answered like GET /."""

from __future__ import annotations

import warnings

import pytest
from django.http import FileResponse
from django.test import Client


def test_a_fresh_request_handler_warns_about_nothing() -> None:
    """WhiteNoise is built with the middleware stack: a missing STATIC_ROOT was one
    'No directory at .../staticfiles/' warning per test (922 in a run)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Client().get("/healthz")
    assert [str(w.message) for w in caught if "No directory at" in str(w.message)] == []


def test_the_favicon_is_served() -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert isinstance(response, FileResponse)
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert "max-age=86400" in response["Cache-Control"]


@pytest.mark.parametrize("method", ["get", "head"])
def test_the_root_redirects_to_the_limits_screen_for_get_and_head(method: str) -> None:
    response = getattr(Client(), method)("/")
    assert response.status_code == 302
    assert response["Location"] == "/studio/limits/"


def test_the_root_refuses_post() -> None:
    assert Client().post("/").status_code == 405
