from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from limits.services import acquire
from limits.tokens import issue_token
from tests.factories import declare


def operator(username: str = "ops") -> tuple[User, str]:
    """A user with the operate permission and a token for it."""
    user = User.objects.create_user(username)
    user.user_permissions.add(Permission.objects.get(codename="operate_limit", content_type__app_label="limits"))
    return user, issue_token(user, name="test")[1]


def reader(username: str = "viewer") -> tuple[User, str]:
    user = User.objects.create_user(username)
    return user, issue_token(user)[1]


@pytest.fixture
def calls():
    """voice-calls (capacity 2): r1 and r2 hold busy slots, r3 and r4 wait."""
    declare(voice_calls={"capacity": 2, "max_hold": "45m"})
    slots = [acquire("voice-calls", run_id=f"r{n}", label=f"call-{n}").slot_id for n in (1, 2)]
    for n in (3, 4):
        acquire("voice-calls", run_id=f"r{n}", timeout="1h")
    return slots


class Api:
    """A JSON client that sends a bearer token and enforces CSRF checks like a browser would."""

    def __init__(self, token: str | None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **params: Any):
        return self.client.get(f"/api/limits/{path}", params, headers=self.headers)

    def post(self, path: str, body: object = None, raw: str | None = None):
        import json

        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(f"/api/limits/{path}", data, content_type="application/json", headers=self.headers)
