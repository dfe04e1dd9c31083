"""Bearer tokens for the JSON API: issued once, stored as a digest, looked up by it."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.db import transaction

from limits.models import ApiToken, is_storable_text

TOKEN_PREFIX = "sbk_"
SHOWN_PREFIX_LENGTH = 12
NAME_MAX_LENGTH = 100  # ApiToken.name
BAD_NAME = f"the token name (--name) must be at most {NAME_MAX_LENGTH} characters, with no NUL character"


class TokenError(ValueError):
    """A token that cannot be issued as asked; `message` says why, in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def digest_of(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def issue_token(user: User, *, name: str = "") -> tuple[ApiToken, str]:
    """Create a token for `user` and return it with its secret, which is never stored. A name
    the column cannot hold raises TokenError before anything is written."""
    if not is_storable_text(name) or len(name) > NAME_MAX_LENGTH:
        raise TokenError(BAD_NAME)
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(user=user, name=name, prefix=raw[:SHOWN_PREFIX_LENGTH], digest=digest_of(raw))
    return token, raw


def user_for_token(raw: str) -> User | None:
    """The active user a token belongs to, or None. The lookup is by digest, so comparing it
    leaks nothing about the secret."""
    if not raw or len(raw) > 200:
        return None
    token = ApiToken.objects.select_related("user").filter(digest=digest_of(raw)).first()
    if token is None or not token.user.is_active:
        return None
    return token.user
