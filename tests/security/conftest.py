"""The Studio view fixtures (users, clients, a busy limit) for the security tests."""

from __future__ import annotations

from tests.fuzz.conftest import calls  # noqa: F401 (fixture)
from tests.views.conftest import (  # noqa: F401 (fixtures)
    busy_limit,
    fast_password_hashing,
    htmx,
    make_user,
    operator,
    operator_client,
    viewer,
    viewer_client,
)
