from __future__ import annotations

import pytest

from limits.services import sweep

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_sign_in_and_reports_the_last_sweep(client, clock) -> None:
    body = client.get("/healthz").json()
    assert (body["database"], body["broker"], body["last_sweep_age_s"], body["status"]) == (
        "ok",
        "ok",
        None,
        "degraded",
    )
    sweep()
    clock.advance(seconds=7)
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["last_sweep_age_s"] == 7.0
    assert response.json()["status"] == "ok"


def test_healthz_is_degraded_when_the_sweep_is_old(client, clock) -> None:
    sweep()
    clock.advance(minutes=2)
    assert client.get("/healthz").json()["status"] == "degraded"


def test_healthz_is_503_when_the_broker_is_unreachable(client) -> None:
    from tests.conftest import use_broker

    use_broker("redis://127.0.0.1:1/0", eager=False)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["broker"].startswith("error")
