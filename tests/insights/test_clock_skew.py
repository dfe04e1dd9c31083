"""Skew is visible (issue 25): a host whose clock is off the database's shows on /metrics
(`stackbone_clock_skew_seconds{host}`), in Studio's banner, and in the log of the process that
measured it. The measurement itself on a skewed host: tests/runs/test_database_clock.py."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.core.cache import cache
from django.test import Client

from stackbone.plumbing import clock as box_clock
from stackbone.plumbing.models import ClockSkew
from tests.insights.test_metrics import TOKEN, one, scrape
from tests.views.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def skews(clock) -> None:
    now = clock.now()
    ClockSkew.objects.create(host="worker-a", role="worker", skew_seconds=601.5, measured_at=now)
    ClockSkew.objects.create(host="worker-a", role="beat", skew_seconds=-3.0, measured_at=now)
    ClockSkew.objects.create(host="worker-b", role="worker", skew_seconds=-0.4, measured_at=now)
    ClockSkew.objects.create(host="gone", role="worker", skew_seconds=900.0, measured_at=now - dt.timedelta(hours=1))
    cache.delete(box_clock.BANNER_CACHE_KEY)


def test_metrics_report_each_hosts_largest_recent_skew(skews, settings) -> None:
    settings.STACKBONE_METRICS_TOKEN = TOKEN
    samples = scrape(Client(headers={"Authorization": f"Bearer {TOKEN}"}))
    assert one(samples, "stackbone_clock_skew_seconds", host="worker-a") == 601.5
    assert one(samples, "stackbone_clock_skew_seconds", host="worker-b") == -0.4
    assert not [key for key in samples if key[0] == "stackbone_clock_skew_seconds" and ("host", "gone") in key[1]]


def test_studio_shows_a_banner_for_each_host_off_by_more_than_the_warning(skews) -> None:
    client = Client()
    client.force_login(make_user("ada"))
    page = client.get("/studio/limits/").content.decode()
    assert "The clock of worker-a (worker) is 601.5 s ahead of the database" in page
    assert "The clock of worker-a (beat) is 3.0 s behind the database" in page
    assert "worker-b" not in page and "gone" not in page  # within 2 s; not measured for an hour
    assert "clock of" not in Client().get("/accounts/login/").content.decode()  # signed in only


def test_a_measurement_logs_a_warning_above_2_s_and_an_error_above_the_margin(caplog, monkeypatch) -> None:
    for skew, level in ((0.5, None), (3.0, logging.WARNING), (-600.0, logging.ERROR)):
        monkeypatch.setattr(box_clock, "measure_skew", lambda skew=skew: skew)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="stackbone.plumbing.clock"):
            assert box_clock.check_skew("worker") == skew
        assert [record.levelno for record in caplog.records] == ([level] if level else [])
        assert ClockSkew.objects.get(host=box_clock.host_name(), role="worker").skew_seconds == skew


def test_healthz_reports_the_largest_recent_skew_and_stays_up(skews, client) -> None:
    body = client.get("/healthz").json()
    assert body["clock_skew_s"] == 601.5  # worker-a; the host not measured for an hour is left out
    assert body["database"] == "ok"
