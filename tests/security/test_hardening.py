"""Issue 11, "Bad input and hardening": no password reset that cannot work, health probes that
work over plain HTTP, HSTS preload as an opt-in, and signed-in Studio pages no cache keeps."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import Client
from django.urls import NoReverseMatch, reverse

# one_database (tests/conftest.py): headers, routes and settings, the same on any database.
pytestmark = [pytest.mark.django_db, pytest.mark.one_database]

RESET_URLS = ["/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/done/"]
RESET_NAMES = ["password_reset", "password_reset_done", "password_reset_complete"]


# --- password reset --------------------------------------------------------------------------------


@pytest.mark.parametrize("url", RESET_URLS)
def test_password_reset_is_not_mounted(client: Client, url: str) -> None:
    assert client.get(url).status_code == 404
    assert client.post(url, {"email": "ada@example.com"}).status_code == 404


@pytest.mark.parametrize("name", RESET_NAMES)
def test_password_reset_has_no_url(name: str) -> None:
    with pytest.raises(NoReverseMatch):
        reverse(name)


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_the_sign_in_pages_do_not_offer_a_password_reset(client: Client, url: str) -> None:
    page = client.get(url).content.decode().lower()
    assert "password_reset" not in page and "forgot" not in page


def test_sign_in_logout_and_password_change_still_work(operator_client: Client) -> None:
    assert operator_client.get("/accounts/password_change/").status_code == 200
    assert operator_client.post("/accounts/logout/").status_code in (200, 302)
    assert operator_client.get("/studio/limits/").status_code == 302  # signed out


# --- DEBUG off: a real settings module in a subprocess ------------------------------------------------

PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client
from django.urls import reverse
client = Client()
answers = {
    "healthz": client.get("/healthz").status_code,
    "page": client.get("/studio/limits/").status_code,
    "hsts": client.get("/healthz", secure=True).headers.get("Strict-Transport-Security"),
    "reset": [str(reverse(name)) for name in ("password_reset",)] if settings.STACKBONE_PASSWORD_RESET else [],
}
print(json.dumps(answers))
"""


def probe(**env: str) -> dict[str, object]:
    clean = {
        key: value for key, value in os.environ.items() if key not in {"DEBUG", "SECRET_KEY", "SECURE_HSTS_PRELOAD"}
    }
    clean |= {
        "DJANGO_SETTINGS_MODULE": "studio.settings",
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "testserver",
        **env,
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=clean, capture_output=True, text=True, cwd=settings.BASE_DIR, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def production() -> dict[str, object]:
    return probe()


def test_healthz_answers_over_plain_http_with_debug_off(production) -> None:
    """A health probe speaks plain HTTP and needs 200 or 503, not a redirect to HTTPS."""
    assert production["healthz"] in (200, 503)


def test_other_pages_still_redirect_to_https_with_debug_off(production) -> None:
    assert production["page"] == 301


def test_hsts_is_sent_without_preload_by_default(production) -> None:
    assert production["hsts"] == "max-age=31536000; includeSubDomains"


def test_hsts_preload_is_an_opt_in_and_so_is_password_reset() -> None:
    answers = probe(SECURE_HSTS_PRELOAD="1", STACKBONE_PASSWORD_RESET="1")
    assert answers["hsts"] == "max-age=31536000; includeSubDomains; preload"
    assert answers["reset"] == ["/accounts/password_reset/"]


# --- no-store on signed-in Studio pages ---------------------------------------------------------


@pytest.fixture
def run_id(busy_limit) -> str:
    from django.utils import timezone

    from stackbone.models import Run

    now = timezone.now()
    return Run.objects.create(workflow="place_call", created_at=now, updated_at=now).id


@pytest.mark.parametrize(
    "url",
    ["/studio/limits/", "/studio/limits/voice-calls/", "/studio/runs/{run}/"],
)
@pytest.mark.parametrize("htmx_request", [False, True], ids=["page", "htmx"])
def test_signed_in_studio_pages_are_never_stored(operator_client, run_id, url, htmx_request) -> None:
    headers = {"HX-Request": "true"} if htmx_request else {}
    response = operator_client.get(url.format(run=run_id), headers=headers)
    assert response.status_code == 200
    directives = {part.strip() for part in response["Cache-Control"].split(",")}
    assert {"no-store", "private"} <= directives


def test_an_operator_action_answer_is_never_stored(operator_client, busy_limit) -> None:
    response = operator_client.post(
        "/studio/limits/voice-calls/capacity/", {"capacity": "3"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
