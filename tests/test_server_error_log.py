"""Every server error leaves its traceback on the console (stderr), with DEBUG off as with DEBUG on,
once; a 404 is no error. (Django's default sends server errors to mail_admins only with DEBUG off:
with no mail configured, a 500 left no line anywhere.)"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import include, path


def explode(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view broke")


urlpatterns = [path("explode/", explode), path("", include("studio.urls"))]  # the 404 page links to them


def console_handlers() -> list[logging.StreamHandler[Any]]:
    """The plain stream handlers a django.request record can reach (the logger's and those of
    the loggers it propagates to)."""
    found = []
    logger: logging.Logger | None = logging.getLogger("django.request")
    while logger is not None:
        found += [handler for handler in logger.handlers if type(handler) is logging.StreamHandler]
        logger = logger.parent if logger.propagate else None
    return found


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """What the console handlers write, in one buffer."""
    buffer = io.StringIO()
    handlers = console_handlers()
    streams = [handler.setStream(buffer) for handler in handlers]
    yield buffer
    for handler, stream in zip(handlers, streams, strict=True):
        handler.setStream(stream)


@pytest.fixture
def client(settings) -> Client:
    settings.ROOT_URLCONF = __name__
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.SECURE_SSL_REDIRECT = False
    return Client(raise_request_exception=False)


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_server_error_is_logged_once_with_its_traceback(client, console, settings, debug: bool) -> None:
    settings.DEBUG = debug
    assert client.get("/explode/").status_code == 500
    lines = console.getvalue()
    assert lines.count("Internal Server Error: /explode/") == 1, lines
    assert lines.count("Traceback (most recent call last):") == 1
    assert "RuntimeError: the view broke" in lines


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_404_is_not_logged_as_an_error(client, console, settings, debug: bool) -> None:
    settings.DEBUG = debug
    assert client.get("/nowhere/").status_code == 404
    assert "Error" not in console.getvalue()
    if not debug:
        assert console.getvalue() == ""
