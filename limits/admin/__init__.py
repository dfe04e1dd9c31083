"""The Django admin for limits. Overrides (capacity, max hold, pool size per key, a key's own
pool) go through limits.services (so raises grant waiting runs and every change is audited);
counters, keys' counters, slots and the queue are read-only, so the admin can never put a
counter out of step with its rows.

Django's autodiscovery imports this package, and the imports below register each admin:
base (what every admin here shares), filters and forms (the Limit admin's), limit (Limit),
limit_key (LimitKey), records (Slot, QueueEntry, AuditEvent, ForgottenLimit). Every name the
single module limits.admin had is still importable from here."""

from __future__ import annotations

from limits.admin.base import (
    BAD_SELECTED,
    NO_MAX_HOLD,
    SEARCH_MAX_LENGTH,
    AnyModelAdmin,
    BoundedSearchAdmin,
    DateBoundsMixin,
    EscapedTextAdmin,
    ReadOnlyAdmin,
    SavedThroughServicesAdmin,
    escaped,
)
from limits.admin.filters import DeclaredFilter, OverriddenFilter, PausedFilter
from limits.admin.forms import LimitKeyModelForm, LimitKeyPoolForm, LimitModelForm, LimitOverridesForm
from limits.admin.limit import LimitAdmin
from limits.admin.limit_key import LimitKeyAdmin
from limits.admin.records import AuditEventAdmin, ForgottenLimitAdmin, QueueEntryAdmin, SlotAdmin

__all__ = [
    "BAD_SELECTED",
    "NO_MAX_HOLD",
    "SEARCH_MAX_LENGTH",
    "AnyModelAdmin",
    "AuditEventAdmin",
    "BoundedSearchAdmin",
    "DateBoundsMixin",
    "DeclaredFilter",
    "EscapedTextAdmin",
    "ForgottenLimitAdmin",
    "LimitAdmin",
    "LimitKeyAdmin",
    "LimitKeyModelForm",
    "LimitKeyPoolForm",
    "LimitModelForm",
    "LimitOverridesForm",
    "OverriddenFilter",
    "PausedFilter",
    "QueueEntryAdmin",
    "ReadOnlyAdmin",
    "SavedThroughServicesAdmin",
    "SlotAdmin",
    "escaped",
]
