"""Sign-in throttling: after 5 failed attempts for one username (or 20 from one address) within
15 minutes, the sign-in forms refuse further attempts, even with the right password, with a clear
message that reads the same whether or not the user exists. The failures are database rows, so
every web worker sees them."""

from __future__ import annotations

import re
import threading

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client

from stackbone.models import SignInFailure
from stackbone.plumbing.throttle import THROTTLED, keys_for
from tests.conftest import requires_postgres

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-password"
REFUSED = THROTTLED.format(minutes=15)


@pytest.fixture
def ada(db) -> User:
    return User.objects.create_user("ada", password=PASSWORD, is_staff=True, is_superuser=True)


def sign_in(
    username: str, password: str, *, address: str = "10.0.0.1", path: str = "/accounts/login/"
) -> tuple[Client, str]:
    client = Client(REMOTE_ADDR=address)
    response = client.post(path, {"username": username, "password": password})
    return client, response.content.decode() if response.status_code == 200 else ""


def notice(page: str) -> str:
    """The message the sign-in form shows, with the typed username blanked out."""
    found = re.search(r'<div class="notice error" role="alert">(.*?)</div>', page, re.S)
    assert found is not None, page[-2000:]
    return found[1]


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail(username: str, times: int, *, address: str = "10.0.0.1", path: str = "/accounts/login/") -> None:
    for _ in range(times):
        client, page = sign_in(username, "wrong-password", address=address, path=path)
        assert not signed_in(client) and REFUSED not in page


def test_five_failures_lock_the_username_even_against_the_right_password(clock, ada) -> None:
    fail("ada", 5)
    client, page = sign_in("ada", PASSWORD)
    assert not signed_in(client)
    assert REFUSED in page
    # A fresh client (another browser, another web worker) is refused too: the count is in the database.
    client, page = sign_in("ADA ", PASSWORD, address="10.9.9.9")
    assert not signed_in(client) and REFUSED in page


def test_four_failures_do_not_lock_and_a_success_clears_them(clock, ada) -> None:
    fail("ada", 4)
    client, _ = sign_in("ada", PASSWORD)
    assert signed_in(client)
    fail("ada", 4)  # counting starts again after a success
    assert signed_in(sign_in("ada", PASSWORD)[0])


def test_the_lock_lifts_when_the_failures_age_out_of_the_window(clock, ada) -> None:
    fail("ada", 5)
    clock.advance(minutes=14)
    assert not signed_in(sign_in("ada", PASSWORD)[0])
    clock.advance(minutes=1, seconds=1)
    assert signed_in(sign_in("ada", PASSWORD)[0])


def test_the_refusal_does_not_reveal_whether_the_user_exists(clock, ada) -> None:
    _, first_ada = sign_in("ada", "wrong-password", address="10.0.0.2")
    _, first_ghost = sign_in("ghost", "wrong-password", address="10.0.0.3")
    assert notice(first_ada) == notice(first_ghost)
    fail("ada", 4, address="10.0.0.2")
    fail("ghost", 4, address="10.0.0.3")
    _, locked_ada = sign_in("ada", PASSWORD, address="10.0.0.2")
    _, locked_ghost = sign_in("ghost", PASSWORD, address="10.0.0.3")
    assert REFUSED in locked_ada and REFUSED in locked_ghost
    assert notice(locked_ada) == notice(locked_ghost) == REFUSED


def test_one_address_is_locked_after_twenty_failures_across_usernames(clock, ada) -> None:
    for n in range(5):
        fail(f"user{n}", 4, address="10.6.6.6")
    client, page = sign_in("ada", PASSWORD, address="10.6.6.6")
    assert not signed_in(client) and REFUSED in page
    assert signed_in(sign_in("ada", PASSWORD, address="10.0.0.7")[0])  # other addresses are not


def test_the_admin_sign_in_is_throttled_too(clock, ada) -> None:
    fail("ada", 5, path="/admin/login/")
    client, page = sign_in("ada", PASSWORD, path="/admin/login/")
    assert not signed_in(client) and REFUSED in page


def test_failures_are_stored_as_digests_and_pruned(clock, ada) -> None:
    fail("my-secret-typed-in-the-wrong-box", 2)
    keys = list(SignInFailure.objects.values_list("key", flat=True))
    assert len(keys) == 4 and all(len(key) == 64 and "secret" not in key for key in keys)
    clock.advance(minutes=16)
    fail("ada", 1)
    assert SignInFailure.objects.count() == 2  # the old rows were deleted with this failure


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_attempts_racing_from_many_workers_get_no_more_password_checks_than_allowed(settings) -> None:
    """Invariant: within the window, at most STACKBONE_LOGIN_MAX_FAILURES (5) attempts for one
    username reach the password check, however many arrive at once. 16 threads, each with its
    own database connection (like 16 web workers), post a wrong password at the same instant;
    each attempt that was checked and failed leaves its row. Checking first and recording after
    the (slow, PBKDF2) password check let every one of them through."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # a real, slow check
    User.objects.create_user("ada", password=PASSWORD)
    attempts = 16
    barrier = threading.Barrier(attempts)
    pages: list[str] = []

    def attempt(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            pages.append(sign_in("ada", "wrong-password", address=f"10.1.0.{n}")[1])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(pages) == attempts
    checked = [page for page in pages if REFUSED not in page]
    assert len(checked) <= 5  # (racing attempts may also refuse one another: the safe side)
    assert SignInFailure.objects.filter(key__in=keys_for("ada", None)).count() == len(checked)
