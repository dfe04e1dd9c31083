from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from limits import services
from limits.models import Limit
from tests.factories import declare


def make_user(username: str, *perms: str, staff: bool = False) -> User:
    user = User.objects.create_user(username, password="a-long-password", is_staff=staff)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return user


@pytest.fixture
def operator(db: None) -> User:
    return make_user("ada", "limits.operate_limit", "studio.change_run")


@pytest.fixture
def viewer(db: None) -> User:
    return make_user("bob")


@pytest.fixture
def operator_client(operator: User) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def viewer_client(viewer: User) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def htmx() -> dict[str, str]:
    """Headers of an htmx request."""
    return {"HX-Request": "true"}


@pytest.fixture
def busy_limit(clock) -> Limit:
    """voice-calls with capacity 2: two busy slots (call-0, call-1) and three runs waiting
    (run-2, run-3, run-4), each a second after the one before."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    for i in range(5):
        services.acquire("voice-calls", run_id=f"run-{i}", label=f"call-{i}")
        clock.advance(seconds=1)
    return Limit.objects.get(name="voice-calls")


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
