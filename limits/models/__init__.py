"""The limits app's rows, one module per kind (values, limit, slots, operations, insights);
every name is also here, where the rest of the code and the migrations import it from."""

from limits.models.insights import WAIT_BUCKETS_S, ForgottenLimit, LimitKeySpan, LimitMinute, LimitTotals
from limits.models.limit import Limit, LimitKey, LimitQuerySet
from limits.models.operations import ApiToken, AuditEvent, SweepState
from limits.models.slots import LIVE_SLOT_STATES, QueueEntry, Slot
from limits.models.values import (
    CAPACITY_IN_FORCE,
    CAPACITY_IN_FORCE_SQL,
    LABEL_MAX_LENGTH,
    REQUEST_MAX_LENGTH,
    RUN_ID_MAX_LENGTH,
    SLOT_ID_FORMAT,
    capacity_in_force,
    is_storable_text,
    new_slot_id,
    pool_size,
)

__all__ = [
    "LABEL_MAX_LENGTH",
    "RUN_ID_MAX_LENGTH",
    "REQUEST_MAX_LENGTH",
    "is_storable_text",
    "SLOT_ID_FORMAT",
    "new_slot_id",
    "capacity_in_force",
    "CAPACITY_IN_FORCE",
    "CAPACITY_IN_FORCE_SQL",
    "pool_size",
    "LimitQuerySet",
    "Limit",
    "LimitKey",
    "QueueEntry",
    "LIVE_SLOT_STATES",
    "Slot",
    "AuditEvent",
    "ApiToken",
    "SweepState",
    "WAIT_BUCKETS_S",
    "LimitMinute",
    "LimitTotals",
    "LimitKeySpan",
    "ForgottenLimit",
]
