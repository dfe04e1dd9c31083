"""Issue 11: a date the changelist cannot build (a year, month or day too large for a C int) is a
bad lookup (Django's redirect to ?e=1), never a 500, on every admin list with a date hierarchy."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.utils import timezone

from limits import services
from limits.admin import DateBoundsMixin
from stackbone.models import Run
from tests.factories import declare

pytestmark = pytest.mark.django_db

HUGE = "99999999999"


def _date_hierarchy_lists() -> list[tuple[str, str]]:
    """(changelist URL, date field) of every registered list of ours that has a date hierarchy."""
    lists = []
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label in ("limits", "studio") and model_admin.date_hierarchy:
            url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
            lists.append((url, model_admin.date_hierarchy))
    return sorted(lists)


DATE_LISTS = _date_hierarchy_lists()


def test_runs_and_audit_events_are_among_the_lists_with_a_date_hierarchy() -> None:
    assert ("/admin/studio/run/", "created_at") in DATE_LISTS
    assert ("/admin/limits/auditevent/", "at") in DATE_LISTS


def test_every_model_admin_of_ours_is_guarded() -> None:
    """A date hierarchy or date filter added later is covered without anyone remembering to."""
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label in ("limits", "studio"):
            assert isinstance(model_admin, DateBoundsMixin), model.__name__


@pytest.fixture
def rows(db: None) -> None:
    """A run and an audit event, so the lists have rows to filter."""
    now = timezone.now()
    Run.objects.create(workflow="place_call", created_at=now, updated_at=now)
    declare(voice_calls={"capacity": 1, "max_hold": "1m"})
    services.set_capacity("voice-calls", 2, actor="test")


@pytest.mark.parametrize(
    "query",
    [
        {"year": HUGE},
        {"year": "2026", "month": HUGE},
        {"year": "2026", "month": "11", "day": HUGE},
        {"year": "-" + HUGE},
        {"year": "2026", "month": "13"},
    ],
    ids=["year", "month", "day", "negative-year", "month-13"],
)
@pytest.mark.parametrize(("url", "field"), DATE_LISTS)
def test_an_impossible_date_is_a_bad_lookup_not_a_500(rows, admin_client, url: str, field: str, query) -> None:
    params = {f"{field}__{part}": value for part, value in query.items()}
    response = admin_client.get(url, params)
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


@pytest.mark.parametrize(("url", "field"), DATE_LISTS)
@pytest.mark.parametrize("part", ["month", "day"])
def test_a_huge_month_or_day_without_a_year_is_not_a_500(rows, admin_client, url: str, field: str, part: str) -> None:
    response = admin_client.get(url, {f"{field}__{part}": HUGE})
    assert response.status_code in (200, 302)


@pytest.mark.parametrize(("url", "field"), DATE_LISTS)
def test_a_real_date_still_filters(rows, admin_client, url: str, field: str) -> None:
    today = timezone.now()
    response = admin_client.get(url, {f"{field}__year": today.year, f"{field}__month": today.month})
    assert response.status_code == 200
