"""Django 6's Content-Security-Policy is on, strict, and our pages need nothing it forbids: no
inline script, no inline style, no event-handler attribute, no eval (htmx's allowEval is off)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db

# Every template: the box's (templates/) and the limits app's (limits/templates/).
TEMPLATE_DIRS = (Path(settings.BASE_DIR) / "templates", Path(settings.BASE_DIR) / "limits" / "templates")
STATIC_JS = Path(settings.BASE_DIR) / "limits" / "static" / "studio"


def directives(response) -> dict[str, list[str]]:
    policy = response["Content-Security-Policy"]
    parts = [part.split() for part in policy.split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


@pytest.fixture
def signed_in(busy_limit) -> Client:
    client = Client()
    client.force_login(make_user("ada", "limits.operate_limit", "studio.change_run", staff=True))
    return client


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/login/",
        "/studio/limits/",
        "/studio/limits/voice-calls/",
        "/studio/runs/",
        "/studio/runs/run-0/",
        "/admin/",
    ],
)
def test_every_page_carries_the_strict_policy(signed_in, path: str) -> None:
    response = signed_in.get(path)
    assert response.status_code in (200, 404)
    policy = directives(response)
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]


def test_errors_and_fragments_carry_it_too(signed_in, htmx) -> None:
    assert "Content-Security-Policy" in signed_in.get("/studio/limits/nope/")
    assert "Content-Security-Policy" in signed_in.get("/studio/limits/voice-calls/", headers=htmx)
    assert "Content-Security-Policy" in Client().get("/studio/runs/run%00x/")


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
HANDLER_ATTRIBUTE = re.compile(r"\s(on[a-z]+|hx-on[:a-z-]*)\s*=", re.I)
STYLE = re.compile(r"<style|\sstyle\s*=", re.I)
EVAL_FILTER = re.compile(r'hx-trigger="[^"]*\[')  # a trigger filter is evaluated with Function()
JS_VALUES = re.compile(r'hx-(vals|vars|headers)=[\'"]\s*js:', re.I)


@pytest.mark.parametrize(
    "template",
    sorted(p.relative_to(Path(settings.BASE_DIR)).as_posix() for d in TEMPLATE_DIRS for p in d.rglob("*.html")),
)
def test_no_template_needs_what_the_policy_forbids(template: str) -> None:
    text = (Path(settings.BASE_DIR) / template).read_text()
    assert not INLINE_SCRIPT.search(text), "inline <script>: move it to limits/static/studio/studio.js"
    assert not HANDLER_ATTRIBUTE.search(text), "on*/hx-on handler: listen in limits/static/studio/studio.js"
    assert not STYLE.search(text), "inline style: put it in limits/static/studio/studio.css"
    assert not EVAL_FILTER.search(text), "hx-trigger filter: htmx evaluates it, the policy forbids eval"
    assert not JS_VALUES.search(text), "js: values are evaluated, the policy forbids eval"


def test_htmx_is_told_not_to_inject_styles_or_evaluate(signed_in) -> None:
    page = signed_in.get("/studio/limits/").content.decode()
    config = re.search(r'<meta name="htmx-config" content=\'([^\']*)\'', page)
    assert config is not None
    assert '"includeIndicatorStyles": false' in config[1] and '"allowEval": false' in config[1]
    css = (STATIC_JS / "studio.css").read_text()
    assert ".htmx-request .htmx-indicator" in css  # what htmx would have injected


def test_the_usage_bar_is_drawn_without_a_style_attribute(signed_in) -> None:
    page = signed_in.get("/studio/limits/voice-calls/").content.decode()
    bar = re.search(r'<div class="bar[^"]*"[^>]*>(.*?)</div>', page, re.S)
    assert bar is not None and "style=" not in bar[1]
    assert '<rect width="100" height="1">' in bar[1]  # 2 of 2 in use
